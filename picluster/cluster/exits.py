"""Processes that started and then died: where, how (exit status) and why (the end of their log).

One vocabulary for every place that starts something and waits for it — a server or agent in
``cluster up`` (local or over SSH), a training client of ``train har``, a task of ``launch``:
each death becomes an ``Exit`` (node, process, exit status when known, the last lines of its
log), and ``Exited`` turns several into one error line folded by node, as ClusterShell writes
``node[01-16]: ...``, with the log tails kept apart in ``details`` for the lines under it.
"""

import signal
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from picluster.model import nodeset
from picluster.util.errors import ClusterError

TAIL_LINES = 5
_LINE_LIMIT = 300


@dataclass(frozen=True)
class Exit:
    node: str
    process: str  # "ps:0", "worker:3", "agent", "chief"
    status: int | None  # exit code (>= 0), -N for signal N, None when nobody could see it
    tail: tuple[str, ...] = ()  # the last non-empty lines of its log

    @property
    def cause(self) -> str:
        """The one line that most likely says why: the last that reads like an error, else the last."""
        return telling_line(self.tail)


def status_text(status: int | None) -> str:
    """"exit code 1", "killed by SIGKILL", "exit code 137 (SIGKILL)" (a shell's way of saying it)."""
    if status is None:
        return "exit status unknown"
    if status < 0:
        return f"killed by {_signal_name(-status)}"
    if status > 128 and status - 128 < 65:
        return f"exit code {status} ({_signal_name(status - 128)})"
    return f"exit code {status}"


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


def tail_lines(text: str, count: int = TAIL_LINES) -> tuple[str, ...]:
    lines = [line.rstrip()[:_LINE_LIMIT] for line in text.splitlines() if line.strip()]
    return tuple(lines[-count:])


def file_tail(path: Path, count: int = TAIL_LINES, max_bytes: int = 64 * 1024) -> tuple[str, ...]:
    """The last lines of a local log (only its end is read: logs can be long)."""
    try:
        with open(path, "rb") as f:
            f.seek(0, 2)
            f.seek(max(0, f.tell() - max_bytes))
            return tail_lines(f.read().decode(errors="replace"), count)
    except OSError:
        return ()


def telling_line(tail: Iterable[str]) -> str:
    lines = [line.strip() for line in tail if line.strip()]
    telling = [ln for ln in lines if "error" in ln.lower() or "refusing" in ln or "not found" in ln.lower()]
    return (telling or lines or ["no output"])[-1]


class Exited(ClusterError):
    """Processes died: one line folded by node and cause; ``details``: their logs' last lines."""

    def __init__(self, what: str, exits: list[Exit], when: str = "during start-up", then: str = "") -> None:
        self.exits = exits
        self.details = tuple(_details(exits))
        super().__init__(f"{what}: {'; '.join(fold(exits, when))}" + (f"; {then}" if then else ""))


def fold(exits: list[Exit], when: str = "") -> list[str]:
    """``node[01-04]: ps:0,worker:[0-2] exited during start-up (exit code 1): <cause>``, one per cause."""
    groups: dict[tuple[str, str], list[Exit]] = {}
    for e in exits:
        groups.setdefault((status_text(e.status), e.cause), []).append(e)
    lines = []
    for (status, cause), members in groups.items():
        nodes = nodeset.fold(_unique(e.node for e in members))
        processes = nodeset.fold(_unique(e.process for e in members))
        lines.append(f"{nodes}: {processes} exited{' ' + when if when else ''} ({status}): {cause}")
    return lines


def _details(exits: list[Exit]) -> list[str]:
    """Each distinct log tail once, under the nodes and processes that left it (when it says more than the cause)."""
    groups: dict[tuple[str, ...], list[Exit]] = {}
    for e in exits:
        if e.tail and list(e.tail) != [e.cause]:
            groups.setdefault(e.tail, []).append(e)
    out = []
    for tail, members in groups.items():
        where = f"{nodeset.fold(_unique(e.node for e in members))} {nodeset.fold(_unique(e.process for e in members))}"
        out.append(f"last lines of the log of {where}:")
        out.extend(f"  {line}" for line in tail)
    return out


def _unique(items: Iterable[str]) -> list[str]:
    return list(dict.fromkeys(items))
