"""A running job's display: a live panel (progress + nodes) on a terminal, log lines elsewhere."""

import sys
import threading
import time

from rich.console import Console
from rich.live import Live

from picluster.util import verbosity
from picluster.views.progress import JobProgress, job_panel

LOG_EVERY_S = 5.0


class JobDisplay:
    """``update(done, total, detail)`` from the job; the node panel refreshes itself once a second."""

    def __init__(self, title: str, unit: str, monitor=None, live: bool = True, console: Console | None = None) -> None:
        self.console = console or Console(highlight=False, soft_wrap=True)
        # -q: no panel and no progress lines (-v's log lines go above a panel: rich's Live holds stderr).
        self.quiet = verbosity.quiet()
        self.live = live and self.console.is_terminal and not self.quiet
        self.monitor = monitor
        self.progress = JobProgress(title, 0, 1, 0.0, unit)
        self._start = time.perf_counter()
        self._rows = None
        self._logged_at = 0.0
        self._lock = threading.Lock()
        self._live: Live | None = None
        self._stop = threading.Event()

    def __enter__(self) -> "JobDisplay":
        self._start = time.perf_counter()
        if self.live:
            # Scrapes run beside the redraws: an agent that is slow to answer must not stall the bar.
            self._stop.clear()
            threading.Thread(target=self._poll_nodes, name="node-panel", daemon=True).start()
            self._live = Live(get_renderable=self._render, console=self.console, refresh_per_second=2, transient=True)
            self._live.__enter__()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        if self._live is not None:
            self._live.__exit__(*exc)
            self._live = None

    def _poll_nodes(self) -> None:
        """Every second, the nodes' rows (``monitor`` may be set once the cluster is up)."""
        while True:
            monitor = self.monitor
            if monitor is not None:
                rows = monitor.poll()
                with self._lock:
                    self._rows = rows
            if self._stop.wait(1.0):
                return

    def update(self, done: float, total: float, detail: str = "") -> None:
        with self._lock:
            self.progress.done, self.progress.total, self.progress.detail = done, total, detail
            self.progress.elapsed_s = time.perf_counter() - self._start
        if not self.live and not self.quiet:
            now = time.perf_counter()
            if now - self._logged_at >= LOG_EVERY_S or done >= total:
                self._logged_at = now
                print(self.progress.line(), file=sys.stderr, flush=True)

    def _render(self):
        with self._lock:
            self.progress.elapsed_s = time.perf_counter() - self._start
            snapshot = JobProgress(**vars(self.progress))
            rows = self._rows
        return job_panel(snapshot, rows)
