"""Which nodes a chore takes, and in what order: the nodes others depend on go last.

    names = select(inv, "node[02-03]")        # (nodegroups.py) UsageError naming what it lacks
    for wave in waves(inv, names, parallel=1, here=local_nodes(inv)):
        ...                                   # wave.nodes, all of one rank; wave.rank says which

A worker (or a node with no role) serves nobody but its own replica; a ps serves every worker;
the Slurm controller serves the queue; the NFS master serves every node's share and venv; the
node this command runs on is the coordinator itself.  So the ranks run in that order, for
reboot and upgrade (the others carry on while one goes) as for shutdown (nothing is left waiting
on a node that is gone).  A wave never mixes ranks: with ``--parallel 4`` the NFS master still
goes alone, after every other node is back.
"""

from dataclasses import dataclass

from picluster.model import nodeset
from picluster.model.inventory import Inventory

RANKS = ("worker", "ps", "slurm controller", "NFS master", "this machine")


@dataclass(frozen=True)
class Wave:
    nodes: tuple[str, ...]
    rank: str  # one of RANKS


def rank(inv: Inventory, name: str, here: set[str] | frozenset[str]) -> int:
    """The index in RANKS of what ``name`` is, the last that applies."""
    if name in here:
        return 4
    if name == inv.nfs_master:
        return 3
    if inv.slurm is not None and name == inv.slurm.controller:
        return 2
    if name in inv.ps:
        return 1
    return 0


def waves(inv: Inventory, names: list[str], parallel: int | None, here: set[str] | frozenset[str] = frozenset()) -> list[Wave]:
    """``names`` rank by rank, at most ``parallel`` at a time (None: a whole rank at once)."""
    out: list[Wave] = []
    for index, what in enumerate(RANKS):
        group = [n for n in names if rank(inv, n, here) == index]
        step = parallel or len(group) or 1
        out.extend(Wave(tuple(group[i:i + step]), what) for i in range(0, len(group), step))
    return out


def local_nodes(inv: Inventory) -> set[str]:
    """The nodes whose address is one of this machine's: the coordinator runs there."""
    from picluster.model.clusterspec import local_ipv4_addresses

    mine = set(local_ipv4_addresses())
    return {n.name for n in inv.nodes if n.address in mine}


def describe(plan: list[Wave]) -> list[str]:
    """One line per wave: "1. node[02-03]  worker"."""
    return [f"{i}. {nodeset.fold(w.nodes)}  {w.rank}" for i, w in enumerate(plan, 1)]
