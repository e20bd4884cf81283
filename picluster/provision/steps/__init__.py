"""The provisioning steps, in order.  Each is a generator of Items run against one node's Context."""

import shlex
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from picluster.cluster.ssh import Remote
from picluster.model.inventory import Inventory, Node
from picluster.provision.facts import Facts
from picluster.provision.result import Item, Status

NO_NFS = "no NFS support in this kernel"
NO_SYSTEMD = "no systemd on this host"
NOT_A_PI = "not a Raspberry Pi"


@dataclass(frozen=True)
class Runtime:
    """What the runtime step puts in each node's venv.  By default picluster (its wheel, built on
    the coordinator) and its dependencies, TensorFlow among them; `requirements` names another
    set instead (the VM tests install psutil and prometheus-client: TensorFlow under emulation
    would take most of an hour)."""

    requirements: tuple[str, ...] = ()
    imports: tuple[str, ...] = ("picluster", "tensorflow")

    def describe(self) -> str:
        return ", ".join(self.requirements) if self.requirements else "picluster and TensorFlow"


@dataclass(frozen=True)
class Options:
    dry_run: bool = False
    only: tuple[str, ...] | None = None  # step names; facts always runs
    venv: str = "picluster-venv"  # on each node; relative paths are under the user's home
    runtime: Runtime = Runtime()
    nfsd_threads: int | None = None  # None: max(8, number of nodes)
    extra_packages: tuple[str, ...] = ()
    known_hosts: Path | None = None
    replaced: tuple[str, ...] = ()  # nodes written afresh: their new host keys are pinned first (cluster/hostkeys.py)
    rotate_munge_key: bool = False  # a new munge key for the whole cluster (steps/munge.py)
    fanout: int = 8
    timeout: float = 120.0  # one command (installs get longer)
    connect_timeout: float = 10.0
    source_dir: Path | None = None  # picluster's source, for the nodes' wheel; None: the checkout this runs from, else the installed files


@dataclass
class Shared:
    """What every node's steps share: the coordinator's public key, picluster's wheel built once,
    the wheels downloaded once per kind of node (or why that failed), the cluster's munge key."""

    public_key: str | None
    lock: threading.Lock = field(default_factory=threading.Lock)
    facts: dict[str, Facts] = field(default_factory=dict)  # node -> its facts (slurm.conf lists every node's)
    wheel: Path | None = None
    bundles: dict[str, Any] = field(default_factory=dict)
    munge: Any = None  # the cluster's munge key as steps/munge.py's prepare decided it
    users: dict[str, int | str] = field(default_factory=dict)  # [users]: name -> uid, or why none (steps/users.py)


@dataclass
class Context:
    inv: Inventory
    node: Node
    remote: Remote
    facts: Facts
    options: Options
    shared: Shared

    @property
    def dry_run(self) -> bool:
        return self.options.dry_run

    @property
    def is_master(self) -> bool:
        return self.node.name == self.inv.nfs_master

    @property
    def master_address(self) -> str:
        return self.inv.node(self.inv.nfs_master).address


def file_item(ctx: Context, name: str, path: str, content: str, **kwargs) -> Item:
    """Write `path` when its content differs: changed, else ok."""
    if ctx.remote.write(path, content, **kwargs):
        return Item(name, Status.CHANGED, f"{'would write' if ctx.dry_run else 'wrote'} {path}")
    return Item(name, Status.OK, path)


def action_item(ctx: Context, name: str, command: str, what: str, *, sudo: bool = True, timeout: float | None = None) -> Item:
    """Run `command` (unless a dry run): changed."""
    if ctx.dry_run:
        return Item(name, Status.CHANGED, f"would {what}")
    ctx.remote.run(command, sudo=sudo, timeout=timeout)
    return Item(name, Status.CHANGED, what)


def q(text: str) -> str:
    return shlex.quote(str(text))


def managed_line(text: str | None, line: str, same) -> str:
    """`text` with every line for which same(line) holds replaced by one `line` (appended if none)."""
    lines = (text or "").splitlines()
    out, placed = [], False
    for old in lines:
        if same(old):
            if not placed:
                out.append(line)
                placed = True
            continue
        out.append(old)
    if not placed:
        out.append(line)
    return "\n".join(out) + "\n"
