"""Where `picluster submit` was typed, and so the folder a job starts in on its nodes.

A job starts in a folder of the node that runs its batch script, and writes its relative output
files there; a folder only the submitting machine has makes Slurm fail the job before it starts
(its output file cannot be opened) or run it in /tmp.  Every node has two folders a person's job
may use: the share, at data_dir, and their home (the same path everywhere, not the same files).
So the submit folder is kept only when the nodes see it; otherwise the job runs in the person's
work folder on the share (``<data_dir>/users/<name>``, with [users]), else in their home, and
`submit` says so in one line.
"""

import os
import pwd
from dataclasses import dataclass
from pathlib import PurePosixPath

from picluster.cluster.here import holds
from picluster.model.inventory import Inventory


@dataclass(frozen=True)
class Origin:
    """The folder submit was typed in, and whom the job runs as: the person typing when sbatch runs
    here (this machine is Slurm's controller), else the inventory's user over SSH."""

    cwd: str
    here: bool  # sbatch runs on this machine, Slurm's controller
    on_node: bool  # this machine is one of the cluster's nodes (it mounts the share at data_dir)
    account: str  # whom the job runs as
    home: str = ""  # their home, when known before connecting (here); over SSH sbatch starts in it


@dataclass(frozen=True)
class Folder:
    """Where the job starts: ``path`` for --chdir, or None for the home sbatch starts in over SSH."""

    path: str | None
    why: str  # for the line submit prints

    @property
    def option(self) -> list[str]:
        return [f"--chdir={self.path}"] if self.path is not None else []

    @property
    def shown(self) -> str:
        return self.path if self.path is not None else "your home on the job's nodes"


def of(inv: Inventory) -> Origin:
    """This machine's origin for a submit to ``inv``'s cluster (nothing connects)."""
    assert inv.slurm is not None
    here = holds(inv.node(inv.slurm.controller).address)
    on_node = here or any(holds(n.address) for n in inv.nodes)
    if here:
        me = pwd.getpwuid(os.geteuid())
        return Origin(os.getcwd(), True, True, me.pw_name, me.pw_dir)
    return Origin(os.getcwd(), False, on_node, inv.user)


def _under(path: str, folder: str) -> bool:
    return PurePosixPath(path) == PurePosixPath(folder) or PurePosixPath(folder) in PurePosixPath(path).parents


def seen(inv: Inventory, origin: Origin) -> bool:
    """Whether the nodes see the submit folder: on the share, typed on a node; or the home, here."""
    return (origin.on_node and _under(origin.cwd, str(inv.data_dir))) or (origin.here and origin.cwd == origin.home)


def work_folder(inv: Inventory, account: str) -> str | None:
    """The person's work folder on the share, which the users step makes for everyone of [users]
    and the inventory's user."""
    if inv.users and account in {inv.user, *(u.name for u in inv.users)}:
        return f"{inv.data_dir}/users/{account}"
    return None


def elsewhere(inv: Inventory, origin: Origin) -> Folder:
    """Where a job runs whose submit folder the nodes do not see."""
    not_seen = f"{origin.cwd} is {'not on the share the nodes mount' if origin.on_node else 'on this machine only'}"
    work = work_folder(inv, origin.account)
    if work is not None:
        return Folder(work, f"your work folder on the share: {not_seen}")
    home = origin.home if origin.here else None
    return Folder(home, f"your home on the job's nodes: {not_seen}, and the cluster has no work folders on its share ([users])")


def for_cwd(inv: Inventory, origin: Origin) -> Folder:
    """SGE's -cwd: the submit folder when the nodes see it, else the person's work folder or home."""
    if seen(inv, origin):
        where = "on the share every node mounts" if _under(origin.cwd, str(inv.data_dir)) else "your home, on every node"
        return Folder(origin.cwd, f"the folder you submitted from, {where}")
    return elsewhere(inv, origin)


def default(inv: Inventory, origin: Origin, sge: bool) -> Folder | None:
    """Where a job runs that names no folder, when sbatch alone would start it elsewhere (None:
    sbatch's own start serves).  An SGE script runs in the home, as SGE runs it; anything else in
    the submit folder, as sbatch runs it, when the nodes see that folder."""
    if not origin.here:
        return None  # sbatch runs over SSH, in the home: SGE's place, and one every node has
    if sge:
        if origin.cwd == origin.home:
            return None
        return Folder(origin.home, "no -cwd: your home, as SGE runs a job (#$ -cwd runs it in the folder you submit from)")
    if seen(inv, origin):
        return None
    return elsewhere(inv, origin)
