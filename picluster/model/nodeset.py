"""Node sets in ClusterShell's notation, by ClusterShell's own library: ``node[01-16]``,
``192.168.1.[16-31]``, ``a[1-2]b[1-3],c``, with its operators between sets (``,`` union, ``!``
difference, ``&`` intersection, ``^`` either but not both) and, where groups are given, ``@name``.

``expand`` turns a node set into names, sorted and each once (as ClusterShell does), and
``mentioned`` gives every name its terms name (to check them all against an inventory); ``in_order``
keeps the order a list was written in (the inventory pairs names and addresses by position);
``fold`` turns names back into the shortest node set, and ``fold_by`` folds the names that share
a value (ClusterShell's folded output).

Node sets come from inventories and command lines.  ClusterShell builds every range at once
(``node[1-100000000]`` is 10^8 strings, minutes), so a node set is measured here before it is
parsed: no more than MAX_NODES nodes in the result nor in any one of its terms; every error of
ClusterShell's, and an unknown group, becomes one UsageError line.
"""

import re
from collections.abc import Hashable, Iterable, Mapping, Sequence
from typing import NamedTuple, TypeVar

from ClusterShell.NodeSet import RESOLVER_NOGROUP, NodeSet, NodeSetException
from ClusterShell.NodeUtils import GroupResolver, GroupResolverError, GroupSource, GroupSourceError, GroupSourceQueryFailed
from ClusterShell.RangeSet import RangeSetException

from picluster.util.errors import UsageError

MAX_NODES = 4096
# What all of a node set's terms may add up to before the operators reduce it (node[1-4000]!node[2-4000]).
MAX_WORK = 4 * MAX_NODES
SOURCE = "picluster"  # the group source's name: @picluster:workers is @workers
V = TypeVar("V", bound=Hashable)

OPERATORS = ",!&^"
_BRACKET = re.compile(r"\[([^\[\]]*)\]")
# One item of a range as ClusterShell reads it: 5, 01-16, 1-9/2 (spaces allowed).
_ITEM = re.compile(r"\s*(\d+)\s*(?:-\s*(\d+)\s*(?:/\s*(\d+)\s*)?)?")
_LONG_NUMBER = re.compile(r"\d{31,}")
_NEGATIVE = re.compile(r"[\d\s/-]*")  # -5, -0-3, -8--4: ClusterShell's negative indexes
# A name with one of these is not folded: ClusterShell would read it as a node set of its own,
# or strip its leading or trailing blank.  A blank inside ("worker:0 client") folds as any letter.
_NOT_FOLDED = re.compile(r"[,!&^\[\]@*?%\t\n\r\f\v]|^\s|\s$")
_CLUSTERSHELL_ERRORS = (NodeSetException, RangeSetException, GroupResolverError, GroupSourceError, ValueError, IndexError)


def expand(pattern: str, groups: Mapping[str, Sequence[str]] | None = None) -> list[str]:
    """The names of ``pattern``, sorted as ClusterShell sorts them and each once; ``groups``
    (name -> names) are the ``@name`` it may use.  UsageError for a malformed or empty set, an
    unknown group, or more than MAX_NODES names."""
    if not isinstance(pattern, str) or not pattern.strip():
        raise UsageError("empty node set: name nodes such as node[01-04]")
    _measure(pattern)
    if groups is None and any(term.text.strip().startswith("@") for term in _terms(pattern)):
        raise UsageError(f"node set {shown(pattern)}: no groups here: name the nodes (node[01-04])")
    source = _Groups(groups) if groups is not None else None
    try:
        nodes = NodeSet(pattern, resolver=GroupResolver(source) if source else RESOLVER_NOGROUP)
    except _CLUSTERSHELL_ERRORS as exc:
        raise UsageError(_why(pattern, exc, source)) from None
    if len(nodes) > MAX_NODES:
        raise UsageError(f"node set {shown(pattern)} has more than {MAX_NODES} nodes")
    if not len(nodes):
        raise UsageError(f"node set {shown(pattern)} names no node")
    return list(nodes)


def mentioned(pattern: str, groups: Mapping[str, Sequence[str]] | None = None) -> set[str]:
    """Every name ``pattern`` names in any of its terms, those it takes away included: a name
    mistyped after a ``!`` would otherwise take nothing away, and no one would hear of it."""
    expand(pattern, groups)  # whole and well formed first
    names: set[str] = set()
    for term in _terms(pattern):
        names |= set(expand(term.text, groups))
    return names


def in_order(pattern: str) -> list[str]:
    """The names of a list whose positions matter, in the order written: its comma-separated parts
    one after the other, each expanded by ClusterShell, a name given twice kept twice (for the
    caller to name).  No operators: a difference has no order.  A range must run upwards
    (node[01-16], not node[16,01]): ClusterShell gives its names in that order."""
    if not isinstance(pattern, str) or not pattern.strip():
        raise UsageError("empty node set: name nodes such as node[01-16]")
    _measure(pattern)
    names: list[str] = []
    for part in _terms(pattern):
        if part.operator not in ("", ","):
            raise UsageError(f"node set {shown(pattern)}: a list paired by position takes no {part.operator!r}: "
                             "list the names (node[01-16],node20)")
        for content in _BRACKET.findall(part.text):
            if not _upwards(content):
                raise UsageError(f"node set {shown(pattern)}: write [{content}] upwards (as [01-16] or [1,3,5-7]): "
                                 "its names pair with the other list's by position")
        names.extend(expand(part.text))
        if len(names) > MAX_NODES:
            raise UsageError(f"node set {shown(pattern)} has more than {MAX_NODES} nodes")
    return names


def fold(names: Iterable[str]) -> str:
    """The shortest node set for ``names``, as ClusterShell folds it: ``["node03", "node07"]`` ->
    ``node[03,07]``, ``a1b1,a1b2,a2b1,a2b2`` -> ``a[1-2]b[1-2]``.  Never fails: a name ClusterShell
    would read as a set of its own (one with a comma or a bracket) is listed as it is."""
    names = list(dict.fromkeys(names))
    literal = sorted(n for n in names if not n or _NOT_FOLDED.search(n))
    plain = [n for n in names if n and not _NOT_FOLDED.search(n)]
    try:
        folded = [str(NodeSet.fromlist(plain, resolver=RESOLVER_NOGROUP))] if plain else []
    except _CLUSTERSHELL_ERRORS:  # e.g. a number of 200 digits (remote output folded by node)
        folded = sorted(plain)
    return ",".join(folded + literal)


def fold_by(values: Mapping[str, V]) -> dict[V, str]:
    """Names grouped by their value, each group folded, in the order the values first appear:
    ``{"node02": "down", "node03": "idle", "node07": "down"}`` -> ``{"down": "node[02,07]", "idle": "node03"}``."""
    groups: dict[V, list[str]] = {}
    for name, value in values.items():
        groups.setdefault(value, []).append(name)
    return {value: fold(names) for value, names in groups.items()}


class _Groups(GroupSource):
    """Groups held in memory (the inventory's roles): no groups.conf is read and no command runs.
    A group it lacks is an error, not the empty set ClusterShell's GroupSource answers."""

    def __init__(self, groups: Mapping[str, Sequence[str]]) -> None:
        every = groups.get("all")
        super().__init__(SOURCE, {name: ",".join(members) for name, members in groups.items()},
                         ",".join(every) if every is not None else None)
        self.missing: str | None = None

    def resolv_map(self, group: str) -> str:
        if group not in self.groups:
            self.missing = group
            raise GroupSourceQueryFailed(f"no group @{group}", self)
        return self.groups[group]


def shown(pattern: str) -> str:
    """A node set as a message quotes it: whole, or its start when it is long."""
    return repr(pattern) if len(pattern) <= 80 else repr(pattern[:60]) + f"... ({len(pattern)} characters)"


def _why(pattern: str, exc: BaseException, source: _Groups | None) -> str:
    said = f"node set {shown(pattern)}"
    if source is not None and source.missing is not None:
        return f"{said}: no group @{source.missing} (the groups: {', '.join('@' + g for g in sorted(source.groups))})"
    text = " ".join(str(exc).split())
    if isinstance(exc, GroupResolverError | GroupSourceError):
        return f"{said}: no group source {text!r} (the groups are the inventory's, as @workers or @{SOURCE}:workers)"
    padding = re.search(r'padding length mismatch : "([^"]*)"', text)
    if padding:
        return f"{said}: [{padding.group(1)}] pads one end and not the other: pad both alike (node[01-12] or node[1-12])"
    values = re.search(r'invalid values in range : "([^"]*)"', text)
    backwards = _ITEM.fullmatch(values.group(1)) if values else None
    if backwards and backwards.group(2) and int(backwards.group(2)) < int(backwards.group(1)):
        start, end = backwards.group(1), backwards.group(2)
        return f"{said}: [{start}-{end}] runs backwards: write [{end}-{start}]"
    return f"{said}: {text or type(exc).__name__} (write e.g. node[01-16], node[1,3,5-7], node[01-16]!node03, @workers)"


class _Term(NamedTuple):
    operator: str  # the one before it ("" for the first)
    text: str


def _terms(pattern: str) -> list[_Term]:
    """The terms between operators outside brackets, each with the operator before it."""
    terms: list[_Term] = []
    current: list[str] = []
    operator, depth = "", 0
    for ch in pattern:
        depth += (ch == "[") - (ch == "]")
        if depth <= 0 and ch in OPERATORS:
            terms.append(_Term(operator, "".join(current)))
            operator, current = ch, []
        else:
            current.append(ch)
    terms.append(_Term(operator, "".join(current)))
    return terms


def _measure(pattern: str) -> None:
    """Refuse a node set too large to build, before ClusterShell builds it."""
    digits = _LONG_NUMBER.search(pattern)
    if digits:
        raise UsageError(f"node set {shown(pattern)}: a number of {len(digits.group())} digits: no node is numbered so")
    work = 0
    for term in _terms(pattern):
        size = 1
        for content in _BRACKET.findall(term.text):
            size *= _range_size(content, pattern)
            if size > MAX_NODES:
                raise UsageError(f"node set {shown(pattern)} has more than {MAX_NODES} nodes (in {shown(term.text.strip())})")
        work += size
        if work > MAX_WORK:
            raise UsageError(f"node set {shown(pattern)} is too large: its terms add up to more than {MAX_WORK} nodes")


def _range_size(content: str, pattern: str) -> int:
    """How many numbers ``[content]`` holds, or more (the bound is what matters)."""
    count = 0
    for item in content.split(","):
        match = _ITEM.fullmatch(item)
        if match and all(len(g) <= 18 for g in match.groups() if g):
            start = int(match.group(1))
            end = int(match.group(2) or start)
            step = int(match.group(3) or 1)
            count += (end - start) // step + 1 if end >= start and step > 0 else 1  # ClusterShell refuses the rest
        elif _NEGATIVE.fullmatch(item) and all(len(n) <= 18 for n in re.findall(r"\d+", item)):
            count += sum(int(n) for n in re.findall(r"\d+", item)) + 1
        elif match or _NEGATIVE.fullmatch(item):
            return MAX_NODES + 1  # numbers of 19 digits and more
        else:
            raise UsageError(f"node set {shown(pattern)}: bad range {item.strip()!r} in [{content}] "
                             "(write numbers: node[01-16], node[1,3,5-7], node[1-9/2])")
    return count


def _upwards(content: str) -> bool:
    """Whether a range's items come in the order ClusterShell gives their numbers: by length as
    written, then by value (node[9-10], node[08-12], node[7,08-09]; not node[16,01] nor node[01,2])."""
    last: tuple[int, int] = (-1, -1)
    for item in content.split(","):
        match = _ITEM.fullmatch(item)
        if not match:
            return True  # ClusterShell names what is wrong with it
        first, end = match.group(1), match.group(2) or match.group(1)
        if (len(first), int(first)) <= last:
            return False
        last = (len(end), int(end))
    return True
