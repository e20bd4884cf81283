"""Node sets in ClusterShell's notation: ``node[01-16]``, ``192.168.1.[16-31]``, ``a[1-2]b[1-3],c``.

``expand`` turns a pattern into names; ``fold`` turns names back into the shortest such pattern,
and ``fold_by`` folds the names that share a value (ClusterShell's folded output).
Patterns come from inventories and command lines, so expansion is bounded.
"""

import itertools
import re
from collections.abc import Hashable, Iterable, Mapping
from typing import TypeVar

from picluster.util.errors import UsageError

MAX_NODES = 4096
V = TypeVar("V", bound=Hashable)

_BRACKET = re.compile(r"\[([^\[\]]*)\]")
_ITEM = re.compile(r"^(\d+)(?:-(\d+))?$")
_LAST_NUMBER = re.compile(r"^(.*?)(\d+)(\D*)$")


def expand(pattern: str) -> list[str]:
    """All names of ``pattern`` in order; raises UsageError naming the bad part."""
    if not isinstance(pattern, str) or not pattern.strip():
        raise UsageError("empty node set")
    names: list[str] = []
    for part in _split_top_level(pattern):
        names.extend(_expand_one(part.strip(), pattern))
        if len(names) > MAX_NODES:
            raise UsageError(f"node set {pattern!r} has more than {MAX_NODES} nodes")
    return names


def _split_top_level(pattern: str) -> list[str]:
    parts: list[str] = []
    current: list[str] = []
    depth = 0
    for ch in pattern:
        if ch == "[":
            depth += 1
            if depth > 1:
                raise UsageError(f"node set {pattern!r}: nested '['")
        elif ch == "]":
            depth -= 1
            if depth < 0:
                raise UsageError(f"node set {pattern!r}: ']' without '['")
        if ch == "," and depth == 0:
            parts.append("".join(current))
            current = []
        else:
            current.append(ch)
    if depth:
        raise UsageError(f"node set {pattern!r}: '[' without ']'")
    parts.append("".join(current))
    if any(not p.strip() for p in parts):
        raise UsageError(f"node set {pattern!r}: empty element")
    return parts


def _expand_one(part: str, whole: str) -> list[str]:
    pieces = _BRACKET.split(part)  # literal, range, literal, range, ..., literal
    literals, ranges = pieces[0::2], pieces[1::2]
    if any("[" in lit or "]" in lit for lit in literals):
        raise UsageError(f"node set {whole!r}: unbalanced brackets")
    choices = [_expand_range(r, whole) for r in ranges]
    total = 1
    for c in choices:
        total *= len(c)
    if total > MAX_NODES:
        raise UsageError(f"node set {whole!r} has more than {MAX_NODES} nodes")
    names = []
    for combo in itertools.product(*choices):
        name = literals[0]
        for value, literal in zip(combo, literals[1:]):
            name += value + literal
        names.append(name)
    return names


def _expand_range(spec: str, whole: str) -> list[str]:
    values: list[str] = []
    for item in spec.split(","):
        match = _ITEM.match(item.strip())
        if not match:
            raise UsageError(f"node set {whole!r}: bad range {item!r} (write e.g. [01-16] or [1,3,5-7])")
        start_text, end_text = match.group(1), match.group(2) or match.group(1)
        start, end = int(start_text), int(end_text)
        if end < start:
            raise UsageError(f"node set {whole!r}: range {item!r} runs backwards")
        if end - start >= MAX_NODES:
            raise UsageError(f"node set {whole!r} has more than {MAX_NODES} nodes")
        width = len(start_text) if start_text.startswith("0") and len(start_text) > 1 else 0
        values.extend(str(n).zfill(width) for n in range(start, end + 1))
    return values


def fold(names: Iterable[str]) -> str:
    """The shortest pattern for ``names``: ``["node03", "node07"]`` -> ``node[03,07]``."""
    names = list(dict.fromkeys(names))
    groups: dict[tuple[str, str], list[str]] = {}
    plain: list[str] = []
    for name in names:
        match = _LAST_NUMBER.match(name)
        if match:
            groups.setdefault((match.group(1), match.group(3)), []).append(match.group(2))
        else:
            plain.append(name)
    out = sorted(plain)
    for (prefix, suffix), digits in sorted(groups.items()):
        for width, numbers in _by_width(digits).items():
            out.append(_fold_group(prefix, suffix, width, numbers))
    return ",".join(out)


def _by_width(digits: list[str]) -> dict[int, list[int]]:
    # "09" fixes a width of 2; "10" then belongs to it, "7" would not.
    padded = {len(d) for d in digits if len(d) > 1 and d.startswith("0")}
    by_width: dict[int, list[int]] = {}
    for d in digits:
        width = len(d) if len(d) in padded else 0
        if d.startswith("0") and len(d) > 1:
            width = len(d)
        by_width.setdefault(width, []).append(int(d))
    return dict(sorted(by_width.items()))


def _fold_group(prefix: str, suffix: str, width: int, numbers: list[int]) -> str:
    numbers = sorted(set(numbers))
    if len(numbers) == 1:
        return f"{prefix}{str(numbers[0]).zfill(width)}{suffix}"
    runs, start, prev = [], numbers[0], numbers[0]
    for n in numbers[1:] + [None]:
        if n is not None and n == prev + 1:
            prev = n
            continue
        a, b = str(start).zfill(width), str(prev).zfill(width)
        runs.append(a if start == prev else f"{a}-{b}")
        if n is not None:
            start = prev = n
    return f"{prefix}[{','.join(runs)}]{suffix}"


def fold_by(values: Mapping[str, V]) -> dict[V, str]:
    """Names grouped by their value, each group folded, in the order the values first appear:
    ``{"node02": "down", "node03": "idle", "node07": "down"}`` -> ``{"down": "node[02,07]", "idle": "node03"}``."""
    groups: dict[V, list[str]] = {}
    for name, value in values.items():
        groups.setdefault(value, []).append(name)
    return {value: fold(names) for value, names in groups.items()}

