"""A lab: N test hosts on a private bridge of this machine, with a state file so any process can end it.

    lab = Lab(nodes=4)            # hosts in namespaces of this kernel; Lab(3, vm=True): VMs
    lab.up()                      # every host answers a real SSH login with the run's key
    lab.write_inventory(path)     # picluster.toml for the rest of picluster
    ...
    lab.down()                    # no namespace, link, process, VM, mount or file left

State lives in ``registry.state_root() / <id>``: the run's key, known_hosts, the hosts' layers
(or disks) and logs, and state.json, which `Lab.load(id)` (and `picluster lab down`) read.
registry.py knows which labs exist on this machine; plan.py decides what a new one will be;
kinds.py is what differs between namespace hosts and VM hosts (lab/vm/).

Over 400 lines (about 470): ``Lab`` is the one handle tests and
``picluster lab`` hold for a lab's whole life (up, faults, status, down), so its methods stay
together; every part that stands alone lives beside it (plan, registry, kinds, ssh, inventory, host).
"""

import atexit
import ipaddress
import json
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from picluster.cluster import hostkeys, knownhosts
from picluster.cluster.ssh import connect
from picluster.lab import cgroups, keys, kinds, links, naming, netns, registry, ssh
from picluster.lab import limits as limits_module
from picluster.lab.host import HostOptions, User
from picluster.lab.inventory import inventory_text
from picluster.lab.plan import Plan, check_run_dir, check_subnet, check_user_name, pick_user
from picluster.lab.snapshot import Change
from picluster.model import nodeset
from picluster.util import atomic
from picluster.util.errors import ClusterError, UsageError

STATE_VERSION = 1
Which = str | int | Any  # a host by name ("node02"), by number (2), or the host itself


@dataclass(frozen=True)
class HostStatus:
    name: str
    address: str
    machine: str  # "netns pcl-ab12-node01" or "vm, qemu pid 4242 (tcg)"
    state: str  # "running" or "stopped": the host's sshd, or its qemu
    link: str  # "up", "down" (cut), "drop" (black-holed) or "missing"
    shaping: str  # the qdisc on the host's link, "" when unshaped
    limits: str = ""  # "0.05 CPU, 1 GiB", "" when unlimited
    usage: dict | None = None  # the host's cgroup: memory, memory_peak, cpu_seconds, oom_kills, ... (cgroups.Cgroup.usage)


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
        limits: "limits_module.Limits | None" = None,
        vm: bool = False,
        arch: str = kinds.NATIVE_ARCH,
        say=None,
    ) -> None:
        """owned: this process owns the lab, which goes down when it exits, however it exits
        (atexit, and the kernel kills the sshds or VMs if it dies; that tie is to the *thread*
        calling up(), so call it from one that outlives the lab).  `picluster lab up` passes
        False so the lab outlives the command.  limits: the CPU and memory every host may use (a
        host's own HostOptions.limits win); checked against this machine here, before anything is
        made (namespace hosts only).  vm: the hosts are VMs with their own kernel (lab/vm/);
        arch: their Debian architecture, "amd64" or "arm64" (the Pi's, emulated; VMs only);
        say(line) hears what they print while starting (the accelerator, a build)."""
        if not 1 <= nodes <= naming.MAX_NODES:
            raise UsageError(f"a lab has 1 to {naming.MAX_NODES} hosts, not {nodes}")
        self.nodes = nodes
        self.user_name = check_user_name(user)
        self.host_options = dict(host_options or {})
        unknown = set(self.host_options) - {naming.host_name(i) for i in range(1, nodes + 1)}
        if unknown:
            raise UsageError(f"host_options name hosts this lab does not have: {', '.join(sorted(unknown))}")
        self.limits = limits or limits_module.Limits()
        if self.limits:
            if vm:
                raise UsageError("--cpu, --memory and --profile limit namespace hosts, not VMs: drop --vm or the limits")
            limits_module.resolve(nodes, self.limits.cpu, self.limits.memory)
        self.wanted_subnet = check_subnet(subnet, nodes) if subnet else None
        self.id = naming.check_id(lab_id) if lab_id is not None else None
        self.owned = owned
        self.root = Path(root) if root else registry.state_root()
        # Before the kind, which may refuse for a missing emulator: this is refused whatever is installed.
        if arch != kinds.NATIVE_ARCH and any(o.coordinator_python for o in self.host_options.values()):
            raise UsageError(f"this machine's venv holds {kinds.NATIVE_ARCH} programs, which {arch} VMs cannot run: leave out --share-venv or --arch")
        self.kind = kinds.make(kinds.VM if vm else kinds.NETNS, say, arch)
        self.arch = arch
        self.plan: Plan | None = None  # decided by up() under the lab lock, or read by load()
        self.hosts: list = []  # Host, or VMHost for a VM lab
        self.phase = "new"
        self._children: list = []
        self._atexit_registered = False
        # True once this object made something (or was loaded from a state file): only then may
        # down() act, since an id given to Lab() may name somebody else's lab.
        self._created = False
        self.owner: dict | None = None
        self.pinned_in: Path | None = None  # picluster's known_hosts that holds the hosts' keys (up() pins them)

    def __repr__(self) -> str:
        return f"<Lab {self.id} {self.plan.subnet if self.plan else None} {len(self.hosts)} hosts {self.phase}>"

    # -- names and paths: from the id alone, so down() works on a lab known only by name --------

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

    def _require_id(self) -> str:
        if self.id is None:
            raise ClusterError("this lab has no id yet: call up() first")
        return self.id

    # -- from the plan ------------------------------------------------------------------------

    @property
    def subnet(self) -> ipaddress.IPv4Network:
        return self._plan().subnet

    @property
    def user(self) -> User:
        return self._plan().user

    @property
    def gateway(self) -> str:
        """The bridge's address: the coordinator as the hosts see it."""
        return self._plan().gateway

    def _plan(self) -> Plan:
        if self.plan is None:
            raise ClusterError("this lab has no plan yet: call up() first")
        return self.plan

    def host(self, which):
        """A host by name ("node02"), by number (2) or itself."""
        if not isinstance(which, str | int):
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
            "kind": self.kind.name,
            **({"arch": self.arch} if self.kind.name == kinds.VM else {}),
            "phase": self.phase,
            "subnet": str(self.plan.subnet) if self.plan else None,
            "user": vars(self.plan.user) if self.plan else {"name": self.user_name},
            "owner": self.owner,
            **({"pinned_in": str(self.pinned_in)} if self.pinned_in else {}),
            "hosts": [host.to_dict() for host in self.hosts],
        }
        self.run_dir.mkdir(parents=True, exist_ok=True)
        atomic.write_json(self.run_dir / "state.json", state)

    @classmethod
    def load(cls, lab_id: str, root: Path | None = None) -> "Lab":
        """The lab `lab_id` as its state file describes it (possibly half up or half down)."""
        root = Path(root) if root else registry.state_root()
        lab_id = naming.check_id(lab_id)
        try:
            state = json.loads((root / lab_id / "state.json").read_text())
        except FileNotFoundError:
            raise UsageError(f"no lab named {lab_id} (no {root / lab_id / 'state.json'})") from None
        except json.JSONDecodeError as exc:
            raise ClusterError(f"state of lab {lab_id} is unreadable: {exc}") from None
        try:
            kind = state.get("kind", kinds.NETNS)
            count = len(state.get("hosts", []))
            user = state["user"]
            # State files from before arm64 VMs have no arch: their VMs are amd64.
            arch = state.get("arch", kinds.NATIVE_ARCH)
            lab = cls(max(count, 1), lab_id=lab_id, user=user["name"], owned=False, root=root, vm=kind == kinds.VM, arch=arch)
            if state.get("subnet") and "uid" in user:
                lab.plan = Plan(lab_id, count, ipaddress.IPv4Network(state["subnet"]), User(**user))
            lab.hosts = [lab.kind.host_from_dict(h, lab) for h in state.get("hosts", [])]
        except (TypeError, KeyError, ValueError, AttributeError, UsageError) as exc:
            # Another picluster version on this machine may have written it (other fields): such a
            # lab is not this version's to judge, and a reader must not crash on it.
            raise ClusterError(f"state of lab {lab_id} has a shape this version does not know: {exc!r}") from None
        lab.phase = state.get("phase", "unknown")
        lab.owner = state.get("owner")
        lab.pinned_in = Path(state["pinned_in"]) if isinstance(state.get("pinned_in"), str) else None
        lab._created = True
        return lab

    @classmethod
    def remains(cls, lab_id: str, root: Path | None = None) -> "Lab":
        """A lab known only by its id (no readable state): down() sweeps what is named after it."""
        lab = cls(1, lab_id=lab_id, owned=False, root=root)
        lab.phase = "unknown"
        lab._created = True
        return lab

    # -- up ------------------------------------------------------------------------------------

    def up(self, timeout: float | None = None, on_progress: Callable[[str], None] | None = None) -> "Lab":
        """Create the hosts and wait until each answers SSH (by default, within 60 s for
        namespace hosts and 600 s for VMs); on any failure, tear down and raise.
        ``on_progress(line)`` as each stage ends ("node[01-03]: answers SSH")."""
        if self.phase != "new":
            raise ClusterError(f"lab {self.id} was already brought up once; make a new Lab")
        self.kind.check(self.nodes, self.host_options)  # refusals come before anything exists
        timeout = self.kind.default_timeout if timeout is None else timeout
        try:
            say = on_progress or (lambda line: None)
            self._create_network()
            say(f"lab {self.id}: network {self.subnet} made")
            self._start_hosts()
            say(f"{nodeset.fold(h.name for h in self.hosts)}: started")
            self._wait_ready(timeout, on_ready=lambda names: say(f"{nodeset.fold(names)}: answers SSH"))
            self.kind.ready(self)
            self._pin_keys()
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
        with registry.lock():
            taken = set(registry.known_ids(self.root))
            if self.id is None:
                self.id = naming.new_id(taken)
            elif self.id in taken:
                raise UsageError(
                    f"a lab named {self.id} exists already: `picluster lab down --name {self.id}`"
                )
            check_run_dir(self.run_dir)
            subnet = self.wanted_subnet
            if subnet is None:
                subnet = netns.pick_subnet(netns.used_networks())
            elif any(subnet.overlaps(net) for net in netns.used_networks()):
                raise UsageError(f"subnet {subnet} overlaps a network this machine already uses")
            self.plan = plan = Plan(self.id, self.nodes, subnet, pick_user(self.user_name))
            self.hosts = [self.kind.new_host(self, i) for i in range(1, self.nodes + 1)]
            self.phase = "starting"
            self.run_dir.mkdir(parents=True, exist_ok=False)
            self._created = True
            self.run_dir.chmod(0o700)
            # Until up() returns, this process owns the lab even when the lab is to outlive it:
            # a lab whose owner died half-way is an orphan that reap_orphans() removes.
            self.owner = registry.this_owner()
            atexit.register(self._down_at_exit)
            self._atexit_registered = True
            self.save()
            # The bridge claims the subnet for the next lab's pick_subnet: create it under the lock.
            netns.create_bridge(self.bridge, ipaddress.IPv4Interface(f"{plan.gateway}/{subnet.prefixlen}"))
        self.kind.create(self)

    def _start_hosts(self) -> None:
        login = keys.make_keypair(self.key_path, f"picluster-lab-{self.id}")
        known = self.kind.start(self, login.public_line)  # saves the state after each start
        self.known_hosts_path.write_text("\n".join(known) + "\n")
        self.ssh_config_path.write_text(
            "".join(ssh.config_entry(h, self.user.name, self.key_path, self.known_hosts_path) for h in self.hosts))

    def _pin_keys(self) -> None:
        """The hosts' keys in picluster's own known_hosts, in place of any a former lab left at these
        addresses: the CLI then trusts exactly these hosts.  down() removes them again; reset()
        leaves the old key there, as a card written afresh finds it."""
        self.pinned_in = hostkeys.own_file()
        for line in self.known_hosts_path.read_text().splitlines():
            address, key_line = line.split(" ", 1)
            knownhosts.replace(self.pinned_in, address, key_line)

    def adopt(self, child) -> None:
        """A host's process this lab started (reaped at teardown)."""
        self._children.append(child)

    def _wait_ready(self, timeout: float, on_ready: Callable[[list[str]], None] | None = None) -> None:
        ssh.wait_for_logins(self.hosts, self.user.name, self.key_path, self.known_hosts_path, timeout, f"lab {self.id}",
                            on_ready=on_ready)

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
        problems = registry.sweep(self.id, self.run_dir, self.hosts, self._children)
        if self.pinned_in is not None:
            knownhosts.forget(self.pinned_in, [h.address for h in self.hosts])
        self.phase = "down"
        if problems:
            raise ClusterError(f"lab {self.id}: teardown incomplete: {'; '.join(problems)}")

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
                    machine=host.describe(),
                    state="running" if host.alive() else "stopped",
                    link=link,
                    shaping=links.qdisc(host.veth) if up is not None else "",
                    limits=host.options.limits.describe() if host.options.limits else "",
                    usage=cgroups.Cgroup(host.cgroup).usage() if host.cgroup else None,
                )
            )
        return result

    def ssh_command(self, which: Which) -> list[str]:
        """How a person reaches a host with OpenSSH's client."""
        return ["ssh", "-F", str(self.ssh_config_path), self.host(which).name]

    def connect(self, which: Which, key: Path | None = None, timeout: float = 10.0):
        """A fabric.Connection to a host as the cluster user (with the run's key unless `key`)."""
        host = self.host(which)
        return connect(host.address, self.user.name, key or self.key_path, timeout, hostkeys.strict(self.known_hosts_path))

    def changes(self) -> dict[str, list[Change]]:
        """Per host, what changed in its private layers since the lab came up (namespace hosts)."""
        return {host.name: host.changes() for host in self.hosts}

    def reboot(self, *which: Which, timeout: float | None = None) -> dict[str, float]:
        """Reboot hosts (all by default) together, VM hosts only; seconds until each answered SSH."""
        hosts = [self.host(w) for w in which] or self.hosts
        return dict(self.kind.reboot(self, hosts, self.kind.default_timeout if timeout is None else timeout))

    def reset(self, which: Which, timeout: float | None = None) -> str:
        """A host as a freshly written card (VM hosts only): its disk back to the image and a new
        host key, which is returned; the others keep running, and known_hosts keeps the old key."""
        return self.kind.reset(self, self.host(which), self.kind.default_timeout if timeout is None else timeout)

    # -- faults and limits ---------------------------------------------------------------------

    def make_unreachable(self, which: Which, how: str = "down") -> None:
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

    def restore(self, which: Which) -> None:
        host = self.host(which)
        links.unblock(self.nft_table, host.veth)
        netns.set_link(host.veth, up=True)

    def shape(
        self,
        which: Which,
        rate: str | None = "100mbit",
        delay: str | None = None,
        loss: str | None = None,
    ) -> None:
        """Limit both directions of a host's link; delay and loss need tc netem (see links.py)."""
        links.shape(self._shapeable(which).veth, self._shapeable(which).netns, rate, delay, loss)

    def set_limits(self, which: Which, new: "limits_module.Limits") -> None:
        """Change a limited host's CPU and memory while it runs, as if it were moved to another board."""
        host = self.host(which)
        if not host.cgroup:
            raise UsageError(f"{host.name} has no cgroup: bring the lab up with limits to change them later")
        limits_module.resolve(1, new.cpu, new.memory)
        cgroups.Cgroup(host.cgroup).create(new)
        host.options.limits = new
        self.save()

    def netem_supported(self) -> bool:
        """Whether shape() can add delay and loss on this kernel (rate always works)."""
        return links.netem_supported(self._shapeable(1).netns)

    def unshape(self, which: Which) -> None:
        host = self._shapeable(which)
        links.unshape(host.veth, host.netns)

    def _shapeable(self, which: Which):
        host = self.host(which)
        if host.netns is None:  # both ends of the link are shaped; a VM's end is in its own kernel
            raise UsageError("shaping works on namespace hosts only, not on VM hosts")
        return host

    # -- inventory -----------------------------------------------------------------------------

    def inventory_text(self) -> str:
        return inventory_text(self._plan(), self.hosts, str(self.key_path))

    def write_inventory(self, path: Path) -> Path:
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(self.inventory_text())
        return path
