"""A running job's display: a live panel (progress + nodes) on a terminal, log lines elsewhere."""

import sys
import threading
import time

from rich.console import Console
from rich.live import Live

from picluster.views.progress import JobProgress, job_panel

LOG_EVERY_S = 5.0


class JobDisplay:
    """``update(done, total, detail)`` from the job; the node panel refreshes itself once a second."""

    def __init__(self, title: str, unit: str, monitor=None, live: bool = True, console: Console | None = None) -> None:
        self.console = console or Console(highlight=False, soft_wrap=True)
        self.live = live and self.console.is_terminal
        self.monitor = monitor
        self.progress = JobProgress(title, 0, 1, 0.0, unit)
        self._start = time.perf_counter()
        self._rows = None
        self._rows_at = 0.0
        self._logged_at = 0.0
        self._lock = threading.Lock()
        self._live: Live | None = None

    def __enter__(self) -> "JobDisplay":
        self._start = time.perf_counter()
        if self.live:
            self._live = Live(get_renderable=self._render, console=self.console, refresh_per_second=2, transient=True)
            self._live.__enter__()
        return self

    def __exit__(self, *exc) -> None:
        if self._live is not None:
            self._live.__exit__(*exc)
            self._live = None

    def update(self, done: float, total: float, detail: str = "") -> None:
        with self._lock:
            self.progress.done, self.progress.total, self.progress.detail = done, total, detail
            self.progress.elapsed_s = time.perf_counter() - self._start
        if not self.live:
            now = time.perf_counter()
            if now - self._logged_at >= LOG_EVERY_S or done >= total:
                self._logged_at = now
                print(self.progress.line(), file=sys.stderr, flush=True)

    def _render(self):
        with self._lock:
            self.progress.elapsed_s = time.perf_counter() - self._start
            snapshot = JobProgress(**vars(self.progress))
        if self.monitor is not None and time.perf_counter() - self._rows_at >= 1.0:
            self._rows = self.monitor.poll()
            self._rows_at = time.perf_counter()
        return job_panel(snapshot, self._rows)
