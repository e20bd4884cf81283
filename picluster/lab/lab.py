"""A lab: N test hosts on a private bridge of this machine, with a state file so any process can end it.

    lab = Lab(nodes=4)
    lab.up()                      # every host answers a real SSH login with the run's key
    lab.write_inventory(path)     # picluster.toml for the rest of picluster
    ...
    lab.down()                    # no namespace, link, process, mount or file left

State lives in ``picluster.paths.state_dir() / "lab" / <id>``: the run's key, known_hosts, the
hosts' layers and logs, and state.json, which `Lab.load(id)` (and `picluster lab down`) read.
"""

import atexit
import contextlib
import fcntl
import ipaddress
import json
import os
import re
import shutil
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import psutil

from picluster import atomic, paths
from picluster.errors import ClusterError, UsageError
from picluster.lab import commands, keys, links, naming, netns, procs, ssh
from picluster.cluster.ssh import connect
from picluster.lab.host import DATA_DIR, OVERLAID, SHARE_DIR, Host, HostOptions, User, untraversable_dirs
from picluster.lab.snapshot import Change

TF_PORT = 2222
FIRST_HOST_OCTET = 11
_USER_NAME = re.compile(r"^[a-z_][a-z0-9_-]{0,31}$")
_LOCK = Path("/run/lock/picluster-lab.lock")
STATE_VERSION = 1


def state_root() -> Path:
    return paths.state_dir() / "lab"


@dataclass(frozen=True)
class HostStatus:
    name: str
    address: str
    netns: str
    sshd: str  # "running" or "stopped"
    link: str  # "up", "down" (cut), "drop" (black-holed) or "missing"
    shaping: str  # the qdisc on the host's link, "" when unshaped


class Lab:
    """N hosts named node01.. at .11, .12, ... of a /24 whose .1 is the bridge (the coordinator)."""

    def __init__(
        self,
        nodes: int = 4,
        *,
        lab_id: str | None = None,
        user: str = "pi",
        host_options: dict[str, HostOptions] | None = None,
        subnet: str | None = None,
        owned: bool = True,
        root: Path | None = None,
    ) -> None:
        """owned: this process owns the lab, which goes down when it exits, however it exits
        (atexit, and the kernel kills the sshds if it dies; that tie is to the *thread* calling
        up(), so call it from one that outlives the lab).  `picluster lab up` passes False so
        the lab outlives the command."""
        if not 1 <= nodes <= naming.MAX_NODES:
            raise UsageError(f"a lab has 1 to {naming.MAX_NODES} hosts, not {nodes}")
        if not _USER_NAME.match(user):
            raise UsageError(f"user name {user!r} is not a valid Linux user name")
        self.id = naming.check_id(lab_id) if lab_id is not None else None
        self.nodes = nodes
        self.user_name = user
        self.host_options = dict(host_options or {})
        unknown = set(self.host_options) - {naming.host_name(i) for i in range(1, nodes + 1)}
        if unknown:
            raise UsageError(f"host_options name hosts this lab does not have: {', '.join(sorted(unknown))}")
        self.subnet = _check_subnet(subnet, nodes) if subnet else None
        self.owned = owned
        self.root = Path(root) if root else state_root()
        self.user: User | None = None
        self.hosts: list[Host] = []
        self.phase = "new"
        self._children = []
        self._atexit_registered = False
        # True once this object made something (or was loaded from a state file): only then may
        # down() act, since an id given to Lab() may name somebody else's lab.
        self._created = False
        self.owner: dict | None = None

    def __repr__(self) -> str:
        return f"<Lab {self.id} {self.subnet} {len(self.hosts)} hosts {self.phase}>"

    # -- names and paths -----------------------------------------------------------------------

    @property
    def run_dir(self) -> Path:
        return self.root / self._require_id()

    @property
    def bridge(self) -> str:
        return naming.bridge(self._require_id())

    @property
    def nft_table(self) -> str:
        return naming.nft_table(self._require_id())

    @property
    def key_path(self) -> Path:
        return self.run_dir / "id_ed25519"

    @property
    def known_hosts_path(self) -> Path:
        return self.run_dir / "known_hosts"

    @property
    def ssh_config_path(self) -> Path:
        """OpenSSH client config naming every host: `ssh -F <this> node01`."""
        return self.run_dir / "ssh_config"

    @property
    def inventory_path(self) -> Path:
        """Where `up()` writes the lab's inventory (write_inventory can add others)."""
        return self.run_dir / "picluster.toml"

    @property
    def gateway(self) -> str:
        """The bridge's address: the coordinator as the hosts see it."""
        return str(self._require_subnet().network_address + 1)

    def _require_id(self) -> str:
        if self.id is None:
            raise ClusterError("this lab has no id yet: call up() first")
        return self.id

    def _require_subnet(self) -> ipaddress.IPv4Network:
        if self.subnet is None:
            raise ClusterError("this lab has no subnet yet: call up() first")
        return self.subnet

    def host(self, which: "str | int | Host") -> Host:
        """A host by name ("node02"), by number (2) or itself."""
        if isinstance(which, Host):
            return which
        for host in self.hosts:
            if which in (host.name, host.index):
                return host
        raise UsageError(f"lab {self.id} has no host {which!r}")

    # -- state file ----------------------------------------------------------------------------

    def save(self) -> None:
        state = {
            "version": STATE_VERSION,
            "id": self.id,
            "phase": self.phase,
            "subnet": str(self.subnet) if self.subnet else None,
            "user": vars(self.user) if self.user else {"name": self.user_name},
            "owner": self.owner,
            "hosts": [host.to_dict() for host in self.hosts],
        }
        self.run_dir.mkdir(parents=True, exist_ok=True)
        atomic.write_json(self.run_dir / "state.json", state)

    @classmethod
    def load(cls, lab_id: str, root: Path | None = None) -> "Lab":
        """The lab `lab_id` as its state file describes it (possibly half up or half down)."""
        root = Path(root) if root else state_root()
        lab_id = naming.check_id(lab_id)
        try:
            state = json.loads((root / lab_id / "state.json").read_text())
        except FileNotFoundError:
            raise UsageError(f"no lab named {lab_id} (no {root / lab_id / 'state.json'})") from None
        except json.JSONDecodeError as exc:
            raise ClusterError(f"state of lab {lab_id} is unreadable: {exc}") from None
        hosts = [Host.from_dict(h) for h in state.get("hosts", [])]
        lab = cls(max(len(hosts), 1), lab_id=lab_id, user=state["user"]["name"], owned=False, root=root)
        lab.hosts = hosts
        lab.subnet = ipaddress.ip_network(state["subnet"]) if state.get("subnet") else None
        if "uid" in state["user"]:
            lab.user = User(**state["user"])
        lab.phase = state.get("phase", "unknown")
        lab.owner = state.get("owner")
        lab._created = True
        return lab

    # -- up ------------------------------------------------------------------------------------

    def up(self, timeout: float = 60.0) -> "Lab":
        """Create the hosts and wait until each answers SSH; on any failure, tear down and raise."""
        commands.require_support()
        if self.phase != "new":
            raise ClusterError(f"lab {self.id} was already brought up once; make a new Lab")
        try:
            self._create_network()
            self._start_hosts()
            self._wait_ready(timeout)
            for host in self.hosts:
                host.record_namespaces()
                host.save_baseline()
            self.write_inventory(self.inventory_path)
            self.phase = "up"
            if not self.owned:
                self.owner = None
                atexit.unregister(self._down_at_exit)
                self._atexit_registered = False
            self.save()
        except BaseException as exc:
            if self._created:
                try:
                    self.down()
                except ClusterError as teardown:
                    exc.add_note(f"and then: {teardown}")
            raise
        return self

    def _create_network(self) -> None:
        with _lab_lock():
            taken = set(known_ids(self.root))
            if self.id is None:
                self.id = naming.new_id(taken)
            elif self.id in taken:
                raise UsageError(
                    f"a lab named {self.id} exists already: `picluster lab down --name {self.id}`"
                )
            self._check_run_dir()
            if self.subnet is None:
                self.subnet = netns.pick_subnet(netns.used_networks())
            elif any(self.subnet.overlaps(net) for net in netns.used_networks()):
                raise UsageError(f"subnet {self.subnet} overlaps a network this machine already uses")
            self.user = self._pick_user()
            self.hosts = [self._new_host(i) for i in range(1, self.nodes + 1)]
            self.phase = "starting"
            self.run_dir.mkdir(parents=True, exist_ok=False)
            self._created = True
            self.run_dir.chmod(0o700)
            # Until up() returns, this process owns the lab even when the lab is to outlive it:
            # a lab whose owner died half-way is an orphan that reap_orphans() removes.
            self.owner = _owner()
            atexit.register(self._down_at_exit)
            self._atexit_registered = True
            self.save()
            # The bridge claims the subnet for the next lab's pick_subnet: create it under the lock.
            prefix = self.subnet.prefixlen
            netns.create_bridge(self.bridge, ipaddress.ip_interface(f"{self.gateway}/{prefix}"))
        for host in self.hosts:
            netns.create_netns(host.netns)
            netns.create_host_link(
                host.netns, host.veth, self.bridge, ipaddress.ip_interface(f"{host.address}/{prefix}")
            )

    def _new_host(self, index: int) -> Host:
        name = naming.host_name(index)
        return Host(
            name=name,
            index=index,
            address=str(self.subnet.network_address + FIRST_HOST_OCTET - 1 + index),
            netns=naming.netns(self.id, name),
            veth=naming.veth(self.id, index),
            dir=self.run_dir / "hosts" / name,
            options=self.host_options.get(name, HostOptions()),
        )

    def _check_run_dir(self) -> None:
        run_dir = os.path.realpath(self.run_dir)
        for target in (*OVERLAID, "/run"):
            if run_dir == target or run_dir.startswith(target + "/"):
                raise UsageError(
                    f"lab state dir {run_dir} lies under {target}, which every test host replaces; "
                    "set PICLUSTER_STATE_DIR elsewhere"
                )
        if re.search(r"[\s,:\\]", run_dir):
            raise UsageError(
                f"lab state dir {run_dir} holds a space, comma, colon or backslash, "
                "which overlay mount options cannot take"
            )

    def _pick_user(self) -> User:
        passwd = _read_db("/etc/passwd")
        if self.user_name in passwd:
            raise UsageError(f"user {self.user_name} exists on this machine; give the lab another user name")
        uids = {int(fields[2]) for fields in passwd.values()}
        gids = {int(fields[2]) for fields in _read_db("/etc/group").values()}
        number = next(n for n in range(1000, 60000) if n not in uids and n not in gids)
        return User(self.user_name, number, number)

    def _start_hosts(self) -> None:
        login = keys.make_keypair(self.key_path, f"picluster-lab-{self.id}")
        traversable = untraversable_dirs([Path(sys.executable).resolve(), Path(sys.executable).parent])
        label = f"lab {self.id}"
        keep = _shared_under_tmp()
        known = [
            f"{h.address} {h.prepare(self.user, login.public_line, traversable, label, keep)}" for h in self.hosts
        ]
        self.known_hosts_path.write_text("\n".join(known) + "\n")
        self.ssh_config_path.write_text("".join(self._ssh_config_entry(h) for h in self.hosts))
        for host in self.hosts:
            self._children.append(host.start(self.owned))
            self.save()

    def _wait_ready(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        pending = {host.name: host for host in self.hosts}
        last_error: dict[str, str] = {}

        def attempt(host: Host) -> tuple[str, str | None]:
            try:
                seen = ssh.remote_hostname(
                    host.address, self.user.name, self.key_path, self.known_hosts_path, timeout=3.0
                )
            except Exception as exc:
                return host.name, f"{type(exc).__name__}: {' '.join(str(exc).split())[:200]}"
            if seen != host.name:
                raise ClusterError(f"test host {host.name} ({host.address}) answers as {seen!r}")
            return host.name, None

        with ThreadPoolExecutor(max_workers=min(8, len(self.hosts))) as pool:
            while pending:
                for host in pending.values():
                    if not host.alive():
                        raise ClusterError(f"test host {host.name} did not start: {host.log_tail()}")
                for name, error in pool.map(attempt, list(pending.values())):
                    if error is None:
                        del pending[name]
                    else:
                        last_error[name] = error
                if not pending:
                    break
                if time.monotonic() > deadline:
                    names = ", ".join(sorted(pending))
                    first = sorted(pending)[0]
                    raise ClusterError(
                        f"lab {self.id}: {names} did not answer SSH within {timeout:g}s "
                        f"({first}: {last_error.get(first, 'no answer')})"
                    )
                time.sleep(0.1)

    # -- down ----------------------------------------------------------------------------------

    def down(self) -> None:
        """Kill every process of the hosts, delete namespaces, links and the run dir.

        Idempotent, and works on a lab that is half up (crashed or failed up()) or that only
        left kernel objects named after it.
        """
        if self.id is None or not self._created:
            return  # this object made nothing: an id given to Lab() may name another's lab
        if self._atexit_registered:
            atexit.unregister(self._down_at_exit)
            self._atexit_registered = False
        problems = []
        namespaces = {host.netns for host in self.hosts} | {
            name for name in netns.netns_names() if naming.lab_of_netns(name) == self.id
        }
        net = {procs.netns_inode(name) for name in namespaces} | {h.net_inode for h in self.hosts}
        mnt = {h.mnt_inode for h in self.hosts}
        pids = set(procs.in_namespaces(net, mnt))
        pids |= {h.pid for h in self.hosts if h.alive()}
        left = procs.kill_all(sorted(pids))
        if left:
            problems.append(f"processes {left} would not die")
        for child in self._children:
            with contextlib.suppress(Exception):
                child.wait(timeout=5)

        steps = [lambda: links.delete_table(self.nft_table)]
        steps += [lambda name=name: netns.delete_netns(name) for name in sorted(namespaces)]
        lab_links = {h.veth for h in self.hosts} | {self.bridge}
        lab_links |= {name for name in netns.link_names() if naming.lab_of_link(name) == self.id}
        steps += [lambda name=name: netns.delete_link(name) for name in sorted(lab_links, reverse=True)]
        steps.append(self._unmount_leftovers)
        steps.append(self._remove_run_dir)
        for step in steps:
            try:
                step()
            except (ClusterError, OSError) as exc:
                problems.append(str(exc))
        self.phase = "down"
        if problems:
            raise ClusterError(f"lab {self.id}: teardown incomplete: {'; '.join(problems)}")

    def _remove_run_dir(self) -> None:
        if self.run_dir.exists():
            shutil.rmtree(self.run_dir)

    def _unmount_leftovers(self) -> None:
        # The hosts' mounts live in their own mount namespaces and vanish with their processes;
        # this only catches someone having mounted something into the run dir by hand.
        run_dir = os.path.realpath(self.run_dir)
        for target in reversed(_mount_targets()):
            if target == run_dir or target.startswith(run_dir + "/"):
                commands.run(["umount", "-l", target])

    def _down_at_exit(self) -> None:
        try:
            self.down()
        except Exception as exc:
            print(f"picluster: lab {self.id}: {exc}", file=sys.stderr)

    def __enter__(self) -> "Lab":
        if self.phase == "new":
            self.up()
        return self

    def __exit__(self, *exc) -> None:
        self.down()

    # -- looking at it -------------------------------------------------------------------------

    def status(self) -> list[HostStatus]:
        blocked = links.blocked(self.nft_table)
        result = []
        for host in self.hosts:
            up = netns.link_is_up(host.veth)
            link = "missing" if up is None else "drop" if host.veth in blocked else "up" if up else "down"
            result.append(
                HostStatus(
                    name=host.name,
                    address=host.address,
                    netns=host.netns,
                    sshd="running" if host.alive() else "stopped",
                    link=link,
                    shaping=links.qdisc(host.veth) if up is not None else "",
                )
            )
        return result

    def _ssh_config_entry(self, host: Host) -> str:
        return (
            f"Host {host.name} {host.address}\n"
            f"    HostName {host.address}\n"
            f"    User {self.user.name}\n"
            f"    IdentityFile {self.key_path}\n"
            f"    IdentitiesOnly yes\n"
            f"    UserKnownHostsFile {self.known_hosts_path}\n"
            f"    StrictHostKeyChecking yes\n"
            f"    ConnectTimeout 10\n"
        )

    def ssh_command(self, which: "str | int | Host") -> list[str]:
        """How a person reaches a host with OpenSSH's client."""
        return ["ssh", "-F", str(self.ssh_config_path), self.host(which).name]

    def connect(self, which: "str | int | Host", key: Path | None = None, timeout: float = 10.0):
        """A fabric.Connection to a host as the cluster user (with the run's key unless `key`)."""
        host = self.host(which)
        return connect(host.address, self.user.name, key or self.key_path, self.known_hosts_path, timeout)

    def changes(self) -> dict[str, list[Change]]:
        """Per host, what changed in its private layers since the lab came up."""
        return {host.name: host.changes() for host in self.hosts}

    # -- faults and limits ---------------------------------------------------------------------

    def make_unreachable(self, which: "str | int | Host", how: str = "down") -> None:
        """Cut a host off mid-run: "down" sets its link down, as if its cable were pulled; "drop"
        discards its frames at the bridge with the link still up, as a dead switch port would.
        Either way open connections stall and new ones fail or time out."""
        host = self.host(which)
        if how == "down":
            netns.set_link(host.veth, up=False)
        elif how == "drop":
            links.block(self.nft_table, host.veth)
        else:
            raise UsageError(f"make_unreachable how={how!r}: use one of {', '.join(links.HOW)}")

    def restore(self, which: "str | int | Host") -> None:
        host = self.host(which)
        links.unblock(self.nft_table, host.veth)
        netns.set_link(host.veth, up=True)

    def shape(
        self,
        which: "str | int | Host",
        rate: str | None = "100mbit",
        delay: str | None = None,
        loss: str | None = None,
    ) -> None:
        """Limit both directions of a host's link; delay and loss need tc netem (see links.py)."""
        host = self.host(which)
        links.shape(host.veth, host.netns, rate, delay, loss)

    def netem_supported(self) -> bool:
        """Whether shape() can add delay and loss on this kernel (rate always works)."""
        return links.netem_supported(self.hosts[0].netns)

    def unshape(self, which: "str | int | Host") -> None:
        host = self.host(which)
        links.unshape(host.veth, host.netns)

    # -- inventory -----------------------------------------------------------------------------

    def inventory_text(self) -> str:
        names = [h.name for h in self.hosts]
        octets = [int(h.address.rsplit(".", 1)[1]) for h in self.hosts]
        base = self.hosts[0].address.rsplit(".", 1)[0]
        workers = names[1:] or names[:1]
        return f"""\
[cluster]
name = {_toml(f"lab-{self.id}")}
user = {_toml(self.user.name)}
nodes = {_toml(_name_range(names))}
addresses = {_toml(f"{base}.[{octets[0]}-{octets[-1]}]" if len(octets) > 1 else self.hosts[0].address)}
subnet = {_toml(str(self.subnet))}
ssh_key = {_toml(str(self.key_path))}
tf_port = {TF_PORT}
share_dir = {_toml(SHARE_DIR)}
data_dir = {_toml(DATA_DIR)}

[roles]
ps = {_toml(names[0])}
worker = {_toml(_name_range(workers))}
nfs_master = {_toml(names[0])}
"""

    def write_inventory(self, path: Path) -> Path:
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(self.inventory_text())
        return path


# -- labs on this machine ----------------------------------------------------------------------


def _shared_under_tmp() -> list[str]:
    """The running venv and picluster's source, when they live under /tmp (hosts get a private
    /tmp): the servers started in the hosts run this same code."""
    import picluster

    paths = {Path(sys.prefix).resolve(), Path(picluster.__file__).resolve().parent.parent}
    tmp = Path("/tmp")
    kept = sorted(str(p) for p in paths if tmp in p.parents)
    # A directory inside another kept one comes along with it.
    return [p for p in kept if not any(p != q and p.startswith(q + "/") for q in kept)]


def known_ids(root: Path | None = None) -> list[str]:
    """Labs with a state dir under `root`, plus any whose kernel objects exist on this machine."""
    root = Path(root) if root else state_root()
    ids = set()
    if root.is_dir():
        ids |= {p.name for p in root.iterdir() if naming.ID_PATTERN.match(p.name) and p.is_dir()}
    ids |= {i for i in map(naming.lab_of_netns, netns.netns_names()) if i}
    ids |= {i for i in map(naming.lab_of_link, netns.link_names()) if i}
    if shutil.which("nft"):
        ids |= {i for i in map(naming.lab_of_link, links.tables()) if i}
    return sorted(ids)


def open_lab(lab_id: str, root: Path | None = None) -> Lab:
    """The lab from its state file, or a bare one that can only sweep away what is named after it."""
    try:
        return Lab.load(lab_id, root)
    except (UsageError, ClusterError, KeyError):
        lab = Lab(1, lab_id=lab_id, owned=False, root=root)
        lab.phase = "unknown"
        lab._created = True
        return lab


def teardown(lab_id: str, root: Path | None = None) -> bool:
    """Tear lab `lab_id` down; False when nothing of it existed."""
    if lab_id not in known_ids(root):
        return False
    open_lab(lab_id, root).down()
    return True


def down_all(root: Path | None = None) -> list[str]:
    done, problems = [], []
    for lab_id in known_ids(root):
        try:
            open_lab(lab_id, root).down()
            done.append(lab_id)
        except ClusterError as exc:
            problems.append(str(exc))
    if problems:
        raise ClusterError("; ".join(problems))
    return done


def reap_orphans(root: Path | None = None) -> list[str]:
    """Tear down labs whose owning process is gone (killed before it could clean up)."""
    reaped = []
    for lab_id in known_ids(root):
        try:
            lab = Lab.load(lab_id, root)
        except (UsageError, ClusterError, KeyError):
            continue
        if lab.owner and not _owner_alive(lab.owner):
            lab.down()
            reaped.append(lab_id)
    return reaped


def _owner() -> dict:
    return {"pid": os.getpid(), "started": psutil.Process().create_time()}


def _owner_alive(owner: dict) -> bool:
    try:
        return abs(psutil.Process(owner["pid"]).create_time() - owner["started"]) < 0.01
    except psutil.NoSuchProcess:
        return False


@contextlib.contextmanager
def _lab_lock():
    # Two labs starting at once must not pick the same id or subnet.
    _LOCK.parent.mkdir(parents=True, exist_ok=True)
    with open(_LOCK, "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def _check_subnet(text: str, nodes: int) -> ipaddress.IPv4Network:
    try:
        subnet = ipaddress.IPv4Network(text)
    except ValueError as exc:
        raise UsageError(f"subnet {text!r}: {exc}") from None
    if subnet.num_addresses < FIRST_HOST_OCTET + nodes + 1:
        raise UsageError(f"subnet {subnet} is too small for {nodes} hosts from .{FIRST_HOST_OCTET} on")
    return subnet


def _read_db(path: str) -> dict[str, list[str]]:
    """name -> all fields, for /etc/passwd and /etc/group."""
    entries = {}
    with open(path) as f:
        for line in f:
            fields = line.rstrip("\n").split(":")
            if len(fields) >= 3 and not line.startswith("#"):
                entries[fields[0]] = fields
    return entries


def _mount_targets() -> list[str]:
    with open("/proc/self/mountinfo") as f:
        return [line.split()[4].encode().decode("unicode_escape") for line in f]


def _name_range(names: list[str]) -> str:
    if len(names) == 1:
        return names[0]
    prefix = naming.HOST_PREFIX
    return f"{prefix}[{names[0][len(prefix):]}-{names[-1][len(prefix):]}]"


def _toml(value: str) -> str:
    # A JSON string is a valid TOML basic string.
    return json.dumps(value)
