"""A job's output: each task's log kept here, one stream with node prefixes, a folded summary.

Every line a task prints (its stdout and stderr, through the tether) is appended to the task's
log in the job directory (``<state>/jobs/<id>/worker-3.log``), to the job's combined log
(``output.log``, as streamed: ``node03: ...``) and handed to the display.  The last lines of each
task are kept for the summary, which folds identical lines across nodes the way ``clush -b``
gathers output: ``node[02-09]: done``.
"""

import threading
from collections import deque
from collections.abc import Callable
from pathlib import Path
from typing import TextIO

from picluster.model import nodeset
from picluster.util import tflog

SUMMARY_LINES = 5
OWN_PREFIX = "picluster"  # lines picluster adds (the tether's notes, restarts): in the logs, not in summaries


def log_name(label: str) -> str:
    return f"{label.replace(':', '-')}.log"


class Output:
    def __init__(self, job_dir: Path, emit: Callable[[str], None], keep: int = SUMMARY_LINES) -> None:
        self.job_dir = job_dir
        self.emit = emit
        self.keep = keep
        self._lock = threading.Lock()
        self._combined = open(job_dir / "output.log", "a", encoding="utf-8")  # noqa: SIM115  (open for the whole job; close() ends it)
        self._logs: dict[str, TextIO] = {}
        self._tails: dict[str, deque[str]] = {}
        self._prefix: dict[str, str] = {}

    def add(self, label: str, prefix: str) -> Path:
        """A task whose lines will be shown as ``prefix: line``; returns its log's path."""
        path = self.job_dir / log_name(label)
        with self._lock:
            self._logs[label] = open(path, "a", encoding="utf-8")  # noqa: SIM115
            self._tails[label] = deque(maxlen=self.keep)
            self._prefix[label] = prefix
        return path

    def line(self, label: str, text: str) -> None:
        text = text.rstrip("\r\n")
        shown = f"{self._prefix[label]}: {text}"
        with self._lock:
            log = self._logs[label]
            log.write(text + "\n")
            log.flush()
            self._combined.write(shown + "\n")
            self._combined.flush()
            # TensorFlow's C++ log lines (time, thread id) never fold: logs only.  The lines every
            # import prints are not shown either (picluster.util.tflog); its warnings and errors are.
            if text.strip() and not text.startswith(OWN_PREFIX) and not tflog.cpp_line(text):
                self._tails[label].append(text)
            if not tflog.startup_line(text):
                self.emit(shown)  # under the lock: lines from several tasks never interleave mid-line

    def note(self, label: str, text: str) -> None:
        """picluster's own line in a task's log and stream (a restart, say)."""
        self.line(label, f"{OWN_PREFIX}: {text}")

    def tail(self, label: str) -> list[str]:
        with self._lock:
            return list(self._tails.get(label, ()))

    def summary(self) -> list[str]:
        with self._lock:
            tails = {self._prefix[label]: list(lines) for label, lines in self._tails.items()}
        return fold_lines(tails)

    def close(self) -> None:
        with self._lock:
            for log in self._logs.values():
                log.close()
            self._combined.close()


def fold_lines(tails: dict[str, list[str]]) -> list[str]:
    """``{"node02": [...], "node03": [...]}`` -> ``["node[02-03]: same line", "node02: its own"]``.

    Each distinct line once, under every source that printed it; lines that more sources share
    come first (what the whole job said), each source's own after, in the order printed.
    """
    sources: dict[str, list[str]] = {}
    for source, lines in tails.items():
        for line in dict.fromkeys(lines):
            sources.setdefault(line, []).append(source)
    ordered = sorted(sources.items(), key=lambda item: -len(item[1]))  # stable: printed order within a count
    return [f"{nodeset.fold(names)}: {line}" for line, names in ordered]
