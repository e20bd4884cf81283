"""The inventory's nodes by node set, as clush takes them: ``node[01-04]!node03``, the groups its
roles make (``@workers``), and nodes left out with ``-x``.

The groups, from the inventory in memory (ClusterShell's group source ``picluster``; no
groups.conf is read):

    @all         every node
    @ps          the ps nodes (roles.ps)
    @workers     the worker nodes (roles.worker)
    @nfs         the NFS master (roles.nfs_master)
    @controller  Slurm's controller (slurm.controller), with [slurm]

``all`` alone is every node too; in an expression it is ``@all`` (``@all!@ps``).
"""

from collections.abc import Iterable

from picluster.model import nodeset
from picluster.model.inventory import Inventory
from picluster.util.errors import UsageError

EVERY = ("all", "@all")


def groups(inv: Inventory) -> dict[str, list[str]]:
    """Group name -> its nodes, in inventory order."""
    table = {
        "all": [n.name for n in inv.nodes],
        "ps": list(inv.ps),
        "workers": list(inv.workers),
        "nfs": [inv.nfs_master],
    }
    if inv.slurm is not None:
        table["controller"] = [inv.slurm.controller]
    return table


def select(inv: Inventory, pattern: str, exclude: Iterable[str] = ()) -> list[str]:
    """The inventory's nodes that ``pattern`` names (``all``, or a node set such as
    ``node[02-04],node07`` or ``@workers!node03``) less those of each ``exclude`` node set, in
    inventory order.  A name the inventory lacks is refused wherever it stands, after a ``!`` and in
    ``exclude`` too (a mistyped exclusion must not take the node it meant to spare); so is a
    selection left empty."""
    known = [n.name for n in inv.nodes]
    exclude = list(exclude)
    wanted = _named(inv, pattern, groups(inv), known, "node set") - excluded(inv, exclude)
    if not wanted:
        raise UsageError(f"node set {nodeset.shown(pattern)} less -x {','.join(exclude)} leaves no node")
    return [name for name in known if name in wanted]


def excluded(inv: Inventory, exclude: Iterable[str]) -> set[str]:
    """The nodes the ``-x`` node sets name, each name checked against the inventory."""
    known, table = [n.name for n in inv.nodes], groups(inv)
    return {name for other in exclude for name in _named(inv, other, table, known, "-x")}


def _named(inv: Inventory, pattern: str, table: dict[str, list[str]], known: list[str], what: str) -> set[str]:
    if isinstance(pattern, str) and pattern.strip() in EVERY:
        return set(known)
    try:
        wanted = set(nodeset.expand(pattern, table))  # a malformed one is refused there, in one line
        named = nodeset.mentioned(pattern, table)  # node[01-16]!node3: node3 is no node, and node03 was meant
    except UsageError as exc:
        raise UsageError(f"-x: {exc}" if what == "-x" else str(exc)) from None
    unknown = sorted(named - set(known))
    if unknown:
        hint = "; every node is @all in an expression" if "all" in unknown else ""
        raise UsageError(f"{what} {nodeset.shown(pattern)} names {nodeset.fold(unknown)}, not in the inventory {inv.name} "
                         f"(its nodes: {nodeset.fold(known)}; its groups: {', '.join('@' + g for g in sorted(table))}{hint})")
    return wanted
