"""A per-node CPU and memory timeline, recorded from the agents while a job runs: ``nodes.csv``.

    with Recorder(monitor, run_dir / "nodes.csv"):
        ...   # one row per node per period; `picluster plot RUN_DIR` draws it

Its own Monitor copy: a live panel polling the same agents keeps its own previous scrapes.  The
file is appended as it goes (a run that dies keeps what it recorded).  CPU is the busy share
of the node (of its cgroup's CPU limit on a test host with one), memory what is in use and the
node's size (its cgroup limit on such a host).
"""

import csv
import threading
import time
from dataclasses import replace
from pathlib import Path

from picluster.monitor.poll import Monitor

COLUMNS = ("time", "node", "cpu_percent", "cpu_cores", "memory_used", "memory_total")


class Recorder:
    def __init__(self, monitor: Monitor, path: Path, period: float = 1.0) -> None:
        self.monitor = replace(monitor, task_states=None, _last={})
        self.path = Path(path)
        self.period = period
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="node-recorder", daemon=True)
        self.start_time = time.time()

    def __enter__(self) -> "Recorder":
        self.path.parent.mkdir(parents=True, exist_ok=True)
        if not self.path.exists():
            with open(self.path, "w", newline="") as f:
                csv.writer(f).writerow(COLUMNS)
        self.start_time = time.time()
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join(self.period + 5.0)

    def _loop(self) -> None:
        while True:
            rows = self.monitor.poll()
            now = time.time()
            lines = []
            for row in rows:
                s = row.stats
                if s is None or not s.cpu_percent:  # unreachable, or the first scrape (no rates yet)
                    continue
                busy = sum(s.cpu_percent) / len(s.cpu_percent)
                cores = (s.cgroup_cpu_limit if s.cgroup_cpu_limit else len(s.cpu_percent)) * busy / 100
                lines.append([f"{now:.3f}", row.name, f"{busy:.1f}", f"{cores:.3f}", f"{s.memory_used:.0f}", f"{s.memory_total:.0f}"])
            if lines:
                with open(self.path, "a", newline="") as f:
                    csv.writer(f).writerows(lines)
            if self._stop.wait(self.period):
                return
