"""Progress of work done in steps on many nodes (``picluster provision``): which step each node set
is in and how long it has taken.

On a terminal a live table redraws twice a second (running nodes with the time so far, nodes done
with the step, nodes that stopped earlier); when a step has ended on every node its lines are
printed above it and stay.  Elsewhere (a log, a pipe) only those lines appear, one per node set and
outcome:

    node[01-03]: packages: done in 41 s
    node02: nfs-client: failed after 3 s

A node set's time is its slowest node's.  The methods are called from the worker threads.
"""

import threading
import time
from collections.abc import Callable

from rich.console import Console
from rich.live import Live
from rich.table import Table

from picluster.model import nodeset

# A step's status on one node (picluster.provision.result.Status values) as the progress says it.
_WORD = {"ok": "done", "changed": "done", "failed": "failed", "skipped": "skipped"}
_STYLE = {"running": "cyan", "done": "green", "failed": "bold red", "skipped": "dim", "stopped": "red"}


def finished_lines(step: str, results: dict[str, tuple[str, float]]) -> list[str]:
    """One line per set of nodes that ended ``step`` alike (``results``: node -> (status, seconds)),
    in the order of each set's first node."""
    groups: dict[str, list[str]] = {}
    for node, (status, _) in results.items():
        groups.setdefault(_WORD.get(status, status), []).append(node)
    lines = []
    for word, nodes in groups.items():
        slowest = max(results[n][1] for n in nodes)
        when = {"done": f" in {slowest:.0f} s", "failed": f" after {slowest:.0f} s"}.get(word, "")
        lines.append(f"{nodeset.fold(nodes)}: {step}: {word}{when}")
    return lines


class StepProgress:
    """``step_started(step, nodes)`` then ``node_finished(node, step, status, seconds)`` per node;
    use as a context manager around the work (the live table lives inside it)."""

    def __init__(self, console: Console, steps: list[str], title: str = "picluster provision",
                 live: bool | None = None, clock: Callable[[], float] = time.monotonic) -> None:  # fmt: skip
        self.console = console
        self.steps = steps
        self.title = title
        self.live = console.is_terminal if live is None else live
        self._clock = clock
        self._lock = threading.Lock()
        self._step: str | None = None
        self._started = 0.0
        self._pending: list[str] = []
        self._results: dict[str, tuple[str, float]] = {}
        self._nodes: list[str] = []  # every node, from the first step
        self._stopped: dict[str, str] = {}  # node -> the last step it ran
        self._live: Live | None = None

    def __enter__(self) -> "StepProgress":
        if self.live:
            self._live = Live(get_renderable=self.render, console=self.console, refresh_per_second=2, transient=True)
            self._live.__enter__()
        return self

    def __exit__(self, *exc) -> None:
        if self._live is not None:
            self._live.__exit__(*exc)
            self._live = None

    def step_started(self, step: str, nodes: list[str]) -> None:
        with self._lock:
            if not self._nodes:
                self._nodes = list(nodes)
            if self._step is not None:
                for node in self._results:
                    if node not in nodes:
                        self._stopped[node] = self._step
            self._step, self._started = step, self._clock()
            self._pending, self._results = list(nodes), {}

    def node_finished(self, node: str, step: str, status: str, seconds: float) -> None:
        with self._lock:
            if step != self._step or node not in self._pending:
                return
            self._pending.remove(node)
            self._results[node] = (status, seconds)
            ended = not self._pending
            lines = finished_lines(step, dict(sorted(self._results.items(), key=self._order))) if ended else []
        for line in lines:  # above the live table, which the console redraws after it
            self.console.print(line, markup=False, highlight=False, soft_wrap=True)

    def _order(self, item: tuple[str, object]) -> int:
        return self._nodes.index(item[0]) if item[0] in self._nodes else len(self._nodes)

    def render(self) -> Table:
        """The live table: the step, then one row per node set and state."""
        with self._lock:
            step, elapsed = self._step, self._clock() - self._started
            pending, results, stopped = list(self._pending), dict(self._results), dict(self._stopped)
        number = f"{self.steps.index(step) + 1}/{len(self.steps)} " if step in self.steps else ""
        grid = Table(title=f"{self.title}: step {number}{step or '(starting)'}", title_justify="left")
        for name, justify in (("nodes", "left"), ("step", "left"), ("state", "left"), ("time", "right")):
            grid.add_column(name, justify=justify, no_wrap=True)  # type: ignore[arg-type]
        if pending:
            grid.add_row(nodeset.fold(pending), step, _styled("running"), f"{elapsed:.0f} s")
        by_word: dict[str, list[str]] = {}
        for node, (status, _) in results.items():
            by_word.setdefault(_WORD.get(status, status), []).append(node)
        for word, nodes in by_word.items():
            grid.add_row(nodeset.fold(nodes), step, _styled(word), f"{max(results[n][1] for n in nodes):.0f} s")
        by_step: dict[str, list[str]] = {}
        for node, last in stopped.items():
            by_step.setdefault(last, []).append(node)
        for last, nodes in by_step.items():
            grid.add_row(nodeset.fold(nodes), last, _styled("stopped"), "")
        return grid


def _styled(word: str) -> str:
    return f"[{_STYLE.get(word, '')}]{word}[/]" if word in _STYLE else word
