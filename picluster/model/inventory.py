"""The inventory, ``picluster.toml``: which nodes exist, where, and what each one runs.

Example::

    [cluster]
    name = "pi16"
    user = "pi"                         # SSH user on every node
    nodes = "node[01-16]"               # or [[node]] tables with name/address
    addresses = "192.168.1.[16-31]"  # or host names: "node[01-16].local" (resolved once per command)
    subnet = "192.168.1.0/24"           # optional; must contain every address
    tf_port = 2222                      # first TensorFlow port on each node
    agent_port = 19100                  # node agent (metrics) port; 9100 is node_exporter's
    share_dir = "/srv/picluster"        # NFS export on the NFS master
    data_dir = "/mnt/picluster"         # where every node mounts the share
    ssh_key = "~/.ssh/id_ed25519"       # optional private key for SSH
    venv = "picluster-venv"             # picluster's virtualenv on every node (relative: in the user's home)

    [roles]
    ps = "node01"                       # default: the first node
    worker = "node[02-16]"              # default: every node that is not ps
    nfs_master = "node01"               # default: the first ps node

    [slurm]                             # optional: Slurm as the cluster's queue (provision sets it up)
    controller = "node01"               # slurmctld's node; default: the NFS master
    partition = "picluster"             # the default partition, holding every node
    default_time = "1:00:00"            # a job's limit when it gives none (sbatch's forms)
    max_time = "1-00:00:00"             # the longest limit a job may ask for
    accounting = false                  # slurmdbd and MariaDB on the controller: sacct, fair share
    mail_prog = ""                      # the program slurmctld mails jobs' events with (SGE's -m); "": no mail

    [users]                             # optional: the people who log in and queue jobs (a class)
    alice = "ssh-ed25519 AAAA... alice@laptop"          # name = their SSH public key
    bob = { key = "ssh-ed25519 AAAA...", uid = 2002 }   # or a table, with the uid they keep

The file is untrusted input: every key is checked and errors name the key and the fix.  Strings
are checked by what they become (picluster.model.tokens): paths and names end up in /etc/exports,
/etc/fstab, /etc/hosts, firewall rules and shell commands on every node.

Over 400 lines: every table of the file is checked here, in one pass that names the key at fault,
because the checks cross tables (roles name nodes, [slurm]'s controller and [users]' uids must
fit the nodes); the string checks themselves are picluster.model.tokens'.
"""

import ipaddress
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

from picluster.model import nodeset, tokens
from picluster.util.errors import UsageError

_CLUSTER_KEYS = {
    "name", "user", "nodes", "addresses", "subnet", "tf_port", "agent_port",
    "share_dir", "data_dir", "ssh_key", "venv",
}
_ROLE_KEYS = {"ps", "worker", "nfs_master"}
_NODE_KEYS = {"name", "address"}
_SLURM_KEYS = {"controller", "partition", "scheduler", "default_time", "max_time", "accounting", "mail_prog"}
# Slurm's scheduler plugins: backfill starts a later job early when that delays no earlier one;
# builtin is first in, first out (docs/slurm.md measures the two).
SCHEDULERS = ("backfill", "builtin")
_USER_KEYS = {"key", "uid"}
_TOP_KEYS = {"cluster", "roles", "node", "slurm", "users"}
# Accounts of the system and of the daemons picluster installs: never a person of [users].
RESERVED_USERS = {"root", "daemon", "bin", "sys", "nobody", "sshd", "slurm", "munge", "mysql", "_apt", "systemd-network"}
# The uids of people: Debian's range for ordinary accounts (adduser.conf FIRST_UID..LAST_UID).
UID_RANGE = (1000, 59999)
# With [users] and no cluster.venv: the runtime outside any one account's home, so every account runs it.
SHARED_VENV = "/opt/picluster-venv"
MAX_BYTES = 1024 * 1024  # 64 nodes as [[node]] tables take about 4 KiB

# Without [roles], one ps task, on a node of its own.  A sync run's updates meet in the workers'
# all-reduce (jobs/har/config.py), where the ps holds no variable and only introduces the workers
# to each other: a second ps node would add nothing to a step and take a node from the workers.
# Runs through the ps (async, --exchange fused) gained 1.12-1.19x from a second ps host on 18
# Pi-shaped hosts, for twice its CPU (docs/lab.md, "The cost of each update"): [roles] or --ps
# name more.


def default_ps(names: list[str]) -> list[str]:
    """The ps nodes of an inventory without roles.ps: the first node."""
    return names[:1]


# The ports a worker's all-reduce listener takes one of for a run (jobs/har/exchange/group.py),
# admitted by the firewall from the cluster and the coordinator only, like the servers' ports:
# one a run a node, so runs sharing a node (Slurm jobs) find one free.  Below Linux's ephemeral
# range (32768-60999), above the servers' and Slurm's job ports.
ALLREDUCE_PORTS = (23300, 23363)

# The node agent's port: not node_exporter's 9100 (a Pi may run both), outside the 9100-9999 range
# Prometheus exporters have taken, below the ephemeral ports.
AGENT_PORT = 19100


@dataclass(frozen=True)
class Node:
    name: str
    address: str  # IPv4, as given or as its host name resolved when the inventory was read
    host: str | None = None  # the host name the inventory gave for it (node01.local), if it gave one


@dataclass(frozen=True)
class Slurm:
    """The [slurm] table: Slurm is the queue, its controller on one node, every node a compute node."""

    controller: str
    partition: str = "picluster"
    scheduler: str = "backfill"  # SchedulerType=sched/<this>
    # The partition's limits, in sbatch's forms.  A job without --time gets default_time, so the
    # backfill scheduler can plan with it (a job without a limit is never backfilled); max_time
    # bounds what anyone may ask for, so no one holds nodes for days.  An hour and a day: a class's
    # exercises take minutes, a student's training runs overnight at most.
    default_time: str = "1:00:00"
    max_time: str = "1-00:00:00"
    # slurmdbd with Debian's MariaDB on the controller: every job recorded (sacct), and priorities
    # from each user's past use (fair share).  Off by default: it costs the controller memory.
    accounting: bool = False
    # The program slurmctld mails jobs' events with (MailProg), on the controller; "" when the
    # cluster sends no mail (a Pi cluster has no mail server by default): jobs asking for mail run
    # all the same, and `picluster submit` says that none will come.
    mail_prog: str = ""


@dataclass(frozen=True)
class User:
    """A person of the [users] table: an account on every node, with the same uid (and a group of
    its own with that number as gid) everywhere, because NFS and Slurm's munge credentials carry
    numbers, not names.  uid None: provisioning keeps the one the account has, or picks one free
    on every node."""

    name: str
    key: str  # one OpenSSH public key line, their authorized_keys
    uid: int | None = None


@dataclass(frozen=True)
class Inventory:
    name: str
    user: str
    nodes: tuple[Node, ...]
    ps: tuple[str, ...]
    workers: tuple[str, ...]
    nfs_master: str
    tf_port: int = 2222
    agent_port: int = AGENT_PORT
    share_dir: Path = Path("/srv/picluster")
    data_dir: Path = Path("/mnt/picluster")
    subnet: ipaddress.IPv4Network | None = None
    ssh_key: Path | None = None
    venv: str = "picluster-venv"
    slurm: Slurm | None = None
    users: tuple[User, ...] = ()
    source: Path | None = field(default=None, compare=False)

    def node(self, name: str) -> Node:
        for n in self.nodes:
            if n.name == name:
                return n
        raise KeyError(name)

    def roles_of(self, name: str) -> list[str]:
        roles = []
        if name in self.ps:
            roles.append("ps")
        if name in self.workers:
            roles.append("worker")
        if name == self.nfs_master:
            roles.append("nfs")
        return roles

    @property
    def cluster_subnet(self) -> ipaddress.IPv4Network:
        """The declared subnet, else the smallest network holding every node."""
        if self.subnet is not None:
            return self.subnet
        addrs = [ipaddress.IPv4Address(n.address) for n in self.nodes]
        prefix = 32
        net = ipaddress.IPv4Network(f"{addrs[0]}/32")
        while not all(a in net for a in addrs):
            prefix -= 1
            net = ipaddress.IPv4Network(f"{addrs[0]}/{prefix}", strict=False)
        return net


def load_inventory(path: Path | str) -> Inventory:
    path = Path(path).expanduser()
    where = f"inventory {path}"
    try:
        with path.open("rb") as f:
            raw = f.read(MAX_BYTES + 1)  # not all of /dev/zero
    except FileNotFoundError:
        raise UsageError(f"{where}: no such file (pass --inventory or set PICLUSTER_INVENTORY)") from None
    except IsADirectoryError:
        raise UsageError(f"{where}: is a directory, expected a picluster.toml file") from None
    except OSError as exc:
        raise UsageError(f"{where}: cannot read: {exc.strerror}") from None
    if len(raw) > MAX_BYTES:
        raise UsageError(f"{where}: larger than {MAX_BYTES // 1024} KiB; not an inventory")
    try:
        data = tomllib.loads(raw.decode("utf-8"))
    except UnicodeDecodeError:
        raise UsageError(f"{where}: not UTF-8 text") from None
    except tomllib.TOMLDecodeError as exc:
        raise UsageError(f"{where}: invalid TOML: {exc}") from None
    except RecursionError:  # tomllib recurses once per nested array or inline table
        raise UsageError(f"{where}: invalid TOML: nested too deeply") from None
    return parse_inventory(data, where, source=path)


def parse_inventory(data: dict, where: str = "inventory", source: Path | None = None) -> Inventory:
    def fail(msg: str) -> UsageError:
        return UsageError(f"{where}: {msg}")

    _check_keys(data, _TOP_KEYS, "the top level", fail)
    cluster = data.get("cluster")
    if not isinstance(cluster, dict):
        raise fail("missing [cluster] table (needs at least name, user and nodes)")
    _check_keys(cluster, _CLUSTER_KEYS, "[cluster]", fail)
    roles = data.get("roles", {})
    if not isinstance(roles, dict):
        raise fail("[roles] must be a table")
    _check_keys(roles, _ROLE_KEYS, "[roles]", fail)

    name = _checked(tokens.label, _string(cluster, "name", fail, "cluster"), "cluster.name", fail)
    user = _checked(tokens.user_name, _string(cluster, "user", fail, "cluster"), "cluster.user", fail)

    nodes = _nodes(data, cluster, fail)
    names = [n.name for n in nodes]

    subnet = None
    if "subnet" in cluster:
        text = _string(cluster, "subnet", fail, "cluster")
        try:
            subnet = ipaddress.IPv4Network(text, strict=False)
        except ValueError:
            raise fail(f"cluster.subnet {text!r} is not an IPv4 network like 192.168.1.0/24") from None
        outside = [n.name for n in nodes if ipaddress.IPv4Address(n.address) not in subnet]
        if outside:
            raise fail(f"cluster.subnet {subnet} does not contain {nodeset.fold(outside)}")

    def role_set(key: str, default: list[str]) -> list[str]:
        if key not in roles:
            return default
        value = roles[key]
        if not isinstance(value, str):
            raise fail(f"roles.{key} must be a node set string like \"node[02-16]\"")
        try:
            members = set(nodeset.expand(value))
        except UsageError as exc:
            raise fail(f"roles.{key}: {exc}") from None
        unknown = members - set(names)
        if unknown:
            raise fail(f"roles.{key}: {nodeset.fold(unknown)} not in the node list")
        return [n for n in names if n in members]  # a node set has no order of its own: the inventory's

    ps = role_set("ps", default_ps(names))
    default_workers = [n for n in names if n not in ps] or names[:]
    workers = role_set("worker", default_workers)
    if not workers:
        raise fail("roles.worker is empty: at least one node must run a worker")
    masters = role_set("nfs_master", ps[:1] or names[:1])
    if len(masters) != 1:
        raise fail("roles.nfs_master must name exactly one node")

    tf_port = _port(cluster, "tf_port", 2222, fail)
    agent_port = _port(cluster, "agent_port", AGENT_PORT, fail)
    if agent_port in (tf_port, tf_port + 1):
        raise fail("cluster.agent_port clashes with the TensorFlow ports (tf_port and tf_port+1)")

    users = _users(data, user, fail)
    if users and isinstance(cluster.get("venv"), str) and not cluster["venv"].startswith("/"):
        raise fail(f"cluster.venv {tokens.show(cluster['venv'])} is in {user}'s home, which the accounts of [users] cannot use: "
                   f"give an absolute path such as {SHARED_VENV!r} (the default with [users])")
    venv = cluster.get("venv", SHARED_VENV if users else "picluster-venv")

    return Inventory(
        name=name,
        user=user,
        nodes=tuple(nodes),
        ps=tuple(ps),
        workers=tuple(workers),
        nfs_master=masters[0],
        tf_port=tf_port,
        agent_port=agent_port,
        share_dir=Path(_checked(tokens.node_path, cluster.get("share_dir", "/srv/picluster"), "cluster.share_dir", fail)),
        data_dir=Path(_checked(tokens.node_path, cluster.get("data_dir", "/mnt/picluster"), "cluster.data_dir", fail)),
        subnet=subnet,
        ssh_key=Path(_checked(tokens.local_path, cluster["ssh_key"], "cluster.ssh_key", fail)).expanduser() if "ssh_key" in cluster else None,
        venv=_checked(venv_path, venv, "cluster.venv", fail),
        slurm=_slurm(data, names, masters[0], fail),
        users=users,
        source=source,
    )


def _slurm(data: dict, names: list[str], nfs_master: str, fail) -> Slurm | None:
    if "slurm" not in data:
        return None
    table = data["slurm"]
    if not isinstance(table, dict):
        raise fail("[slurm] must be a table (controller, partition, scheduler, default_time, max_time, accounting, mail_prog)")
    _check_keys(table, _SLURM_KEYS, "[slurm]", fail)
    controller = table.get("controller", nfs_master)
    if not isinstance(controller, str) or controller not in names:
        raise fail(f"slurm.controller {tokens.show(controller)} is not a node of the inventory (one of {nodeset.fold(names)})")
    partition = _checked(tokens.label, table.get("partition", "picluster"), "slurm.partition", fail)
    scheduler = table.get("scheduler", "backfill")
    if scheduler not in SCHEDULERS:
        raise fail(f"slurm.scheduler {tokens.show(scheduler)} must be \"backfill\" or \"builtin\" (first in, first out)")
    default_time = table.get("default_time", Slurm.default_time)
    max_time = table.get("max_time", Slurm.max_time)
    default_s = _checked(tokens.slurm_seconds, default_time, "slurm.default_time", fail)
    max_s = _checked(tokens.slurm_seconds, max_time, "slurm.max_time", fail)
    if default_s > max_s:
        raise fail(f"slurm.default_time {default_time} is longer than slurm.max_time {max_time}: lower it or raise max_time")
    accounting = table.get("accounting", False)
    if not isinstance(accounting, bool):
        raise fail(f"slurm.accounting {tokens.show(accounting)} must be true or false")
    mail_prog = table.get("mail_prog", "")  # "": no mail
    mail_prog = _checked(tokens.node_path, mail_prog, "slurm.mail_prog", fail) if mail_prog != "" else ""
    return Slurm(controller=controller, partition=partition, scheduler=scheduler, default_time=default_time, max_time=max_time,
                 accounting=accounting, mail_prog=mail_prog)


def _users(data: dict, admin: str, fail) -> tuple[User, ...]:
    """[users]: name = "public key", or name = { key = "...", uid = N }."""
    if "users" not in data:
        return ()
    table = data["users"]
    if not isinstance(table, dict):
        raise fail('[users] must be a table of name = "ssh-ed25519 AAAA..." (or name = { key = "...", uid = 2001 })')
    users: list[User] = []
    uids: dict[int, str] = {}
    for name, entry in table.items():
        _checked(tokens.user_name, name, "[users] name", fail)
        if name == admin:
            raise fail(f"users.{name} is cluster.user, the account picluster itself logs in as: list only the other people in [users]")
        if name in RESERVED_USERS:
            raise fail(f"users.{name}: {name!r} is a system account's name; choose another name")
        if isinstance(entry, str):
            key, uid = entry, None
        elif isinstance(entry, dict):
            _check_keys(entry, _USER_KEYS, f"users.{name}", fail)
            if "key" not in entry:
                raise fail(f'users.{name}.key is missing (their SSH public key, e.g. "ssh-ed25519 AAAA... {name}@laptop")')
            key, uid = entry["key"], entry.get("uid")
            if uid is not None and (isinstance(uid, bool) or not isinstance(uid, int) or not UID_RANGE[0] <= uid <= UID_RANGE[1]):
                raise fail(f"users.{name}.uid {tokens.show(uid)} must be a number from {UID_RANGE[0]} to {UID_RANGE[1]} "
                           "(the range Debian keeps for people)")
            if uid in uids:
                raise fail(f"users.{name}.uid {uid} is users.{uids[uid]}'s too: every person needs a uid of their own")
            if uid is not None:
                uids[uid] = name
        else:
            raise fail(f'users.{name} must be their SSH public key ("ssh-ed25519 AAAA...") or a table {{ key = "...", uid = 2001 }}')
        key = _checked(tokens.public_key_line, key.strip() if isinstance(key, str) else key, f"users.{name} key", fail)
        users.append(User(name, key, uid))
    return tuple(users)


def _nodes(data, cluster, fail) -> list[Node]:
    if "node" in data:
        if "nodes" in cluster or "addresses" in cluster:
            raise fail("give nodes either as cluster.nodes/addresses or as [[node]] tables, not both")
        table = data["node"]
        if not isinstance(table, list) or not table:
            raise fail("[[node]] must be a list of tables with name and address")
        pairs = []
        for i, entry in enumerate(table, 1):
            if not isinstance(entry, dict):
                raise fail(f"[[node]] #{i} must be a table")
            _check_keys(entry, _NODE_KEYS, f"[[node]] #{i}", fail)
            pairs.append((_string(entry, "name", fail, f"node #{i}"), _string(entry, "address", fail, f"node #{i}")))
    else:
        if "nodes" not in cluster:
            raise fail("no nodes: set cluster.nodes = \"node[01-16]\" and cluster.addresses, or add [[node]] tables")
        try:
            names = nodeset.in_order(_string(cluster, "nodes", fail, "cluster"))
        except UsageError as exc:
            raise fail(f"cluster.nodes: {exc}") from None
        if "addresses" not in cluster:
            raise fail("cluster.addresses is missing (e.g. \"192.168.1.[16-31]\", one per node)")
        try:
            addresses = nodeset.in_order(_string(cluster, "addresses", fail, "cluster"))
        except UsageError as exc:
            raise fail(f"cluster.addresses: {exc}") from None
        if len(addresses) != len(names):
            raise fail(f"cluster.nodes has {len(names)} names but cluster.addresses has {len(addresses)} addresses")
        pairs = list(zip(names, addresses))

    nodes: list[Node] = []
    seen_names: dict[str, bool] = {}
    seen_addrs: dict[str, str] = {}
    for name, address in pairs:
        _checked(tokens.hostname, name, "node name", fail)
        host = None
        try:
            addr = ipaddress.IPv4Address(address)
        except ValueError:
            if not isinstance(address, str) or all(c.isdigit() or c == "." for c in address):
                # 192.168.1.256, or 10.1 (which a resolver would take as 10.0.0.1): a mistyped address, not a name
                raise fail(f"node {name}: address {tokens.show(address)} is not an IPv4 address") from None
            host = _checked(tokens.hostname, address, f"node {name}: address", fail)
            addr = _resolve(name, host, fail)
        if addr.is_unspecified or addr.is_multicast:
            raise fail(f"node {name}: address {address} cannot be a node address")
        key = name.lower()
        if key in seen_names:
            raise fail(f"duplicate node name {name!r}")
        if str(addr) in seen_addrs:
            raise fail(f"duplicate address {addr} (nodes {seen_addrs[str(addr)]} and {name})")
        seen_names[key] = True
        seen_addrs[str(addr)] = name
        nodes.append(Node(name=name, address=str(addr), host=host))
    return nodes


def _resolve(name: str, host: str, fail) -> ipaddress.IPv4Address:
    """A node's host name (node01.local through mDNS, a DNS name, /etc/hosts) as its IPv4 address,
    once, as the inventory is read: every later use (SSH, ClusterSpec, slurm.conf, the firewall's
    subnet) sees one address, and a name that stops resolving mid-command cannot split the cluster."""
    import socket

    try:
        found = socket.getaddrinfo(host, None, family=socket.AF_INET, type=socket.SOCK_STREAM)
    except (socket.gaierror, UnicodeError) as exc:
        why = exc.strerror if isinstance(exc, socket.gaierror) else "not a name a resolver takes"
        raise fail(f"node {name}: address {host!r} does not resolve ({why}): check the name (a .local name needs "
                   "mDNS on this machine: Debian's libnss-mdns), or give the node's IPv4 address") from None
    return ipaddress.IPv4Address(found[0][4][0])


def venv_path(value: object, key: str = "venv") -> str:
    """picluster's virtualenv on the nodes: absolute, or under the user's home (``x`` or ``~/x``)."""
    return tokens.node_path(value, key, relative=True)


def _checked(check, value, key: str, fail):
    """``check(value, key)``, its UsageError prefixed with the inventory's name."""
    try:
        return check(value, key)
    except UsageError as exc:
        raise fail(str(exc)) from None


def _check_keys(table: dict, known: set[str], where: str, fail) -> None:
    unknown = sorted(set(table) - known)
    if unknown:
        raise fail(f"unknown key {unknown[0]!r} in {where} (known: {', '.join(sorted(known))})")


def _string(table: dict, key: str, fail, where: str) -> str:
    if key not in table:
        raise fail(f"{where}.{key} is missing")
    value = table[key]
    if not isinstance(value, str) or not value.strip():
        raise fail(f"{where}.{key} must be a non-empty string")
    return value.strip()


def _port(table: dict, key: str, default: int, fail) -> int:
    value = table.get(key, default)
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= 65534:
        raise fail(f"cluster.{key} must be a port number 1-65534, got {value!r}")
    return value

