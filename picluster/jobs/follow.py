"""A job's output as it is written (``picluster logs -f``), until the job ends, and how it ended.

picluster's own jobs (on the local cluster or the inventory's nodes: their coordinator runs here
and writes their logs here) are followed in their files, read from where the last read stopped;
the record says when the job has ended, and the files are read to their end after that.  A
Slurm job's file is followed on the cluster (jobs/slurm/follow.py).  Either way the command ends
with the job, and its exit status says how the job ended (``Ended.exit_status``).
"""

import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from picluster.util.errors import UsageError

POLL_S = 0.25  # how often the files and the record are read again; a local read is cheap


@dataclass(frozen=True)
class Source:
    """Where a piece of output comes from: a task (``worker:1``; ``batch`` for a Slurm job's
    script; ``output`` for a job's combined stream, whose lines name their nodes), its node, its file."""

    task: str
    node: str | None
    log: str | None


Emit = Callable[[Source, bytes], None]


@dataclass(frozen=True)
class Ended:
    """How a followed job stands when the following stops: its end, or (without waiting) now."""

    ref: str  # "12", "slurm:40"
    state: str
    reason: str | None
    exit_code: int | None  # the job's own, where it keeps one (a Slurm batch script's)
    active: bool = False

    def said(self) -> str:
        """``job 12 COMPLETED``; ``slurm:40 FAILED (NonZeroExitCode), exit code 3``."""
        who = f"job {self.ref}" if self.ref.isdigit() else self.ref
        why = f" ({self.reason})" if self.reason else ""
        code = f", exit code {self.exit_code}" if self.exit_code not in (None, 0) else ""
        return f"{who} {self.state}{why}{code}"

    def exit_status(self) -> int:
        """The exit status of ``logs -f``: 0 when the job COMPLETED, its own exit code when it
        kept a non-zero one (a Slurm batch script's), else 1 (FAILED, CANCELLED, TIMEOUT, ...)."""
        if self.state == "COMPLETED":
            return 0
        if self.exit_code is not None and 0 < self.exit_code < 256:
            return self.exit_code
        return 1


class Tail:
    """One file, read from where the last read stopped; a file not there yet reads as nothing."""

    def __init__(self, source: Source) -> None:
        assert source.log is not None
        self.source = source
        self.path = Path(source.log)
        self.offset = 0

    def read(self) -> bytes:
        try:
            with open(self.path, "rb") as f:
                f.seek(self.offset)
                data = f.read()
        except FileNotFoundError:
            return b""
        except OSError as exc:
            raise UsageError(f"cannot read {self.path}: {exc.strerror}") from None
        self.offset += len(data)
        return data


def record_sources(job, label: str | None, per_task: bool) -> list[Source]:
    """What to follow of one of picluster's jobs (a ``JobRecord``): one task's log (``label``);
    each task's (``per_task``: the machine forms, whose lines say their task); else the job's
    combined stream when it keeps one (a launch), else each task's log."""
    if label is not None:
        task = job.task(label)
        if not task.log:
            raise UsageError(f"job {job.id}: {label} keeps no log of its own (a server of the cluster: see 'picluster cluster status')")
        return [Source(task.label, task.node or None, task.log)]
    combined = Path(job.log_dir) / "output.log" if job.log_dir else None
    if not per_task and combined is not None and combined.is_file():
        return [Source("output", None, str(combined))]
    return [Source(t.label, t.node or None, t.log) for t in job.tasks if t.log]


def follow_record(read: Callable[[], object], label: str | None, emit: Emit, per_task: bool, wait: bool,
                  poll_s: float = POLL_S):
    """Each new piece of the job's logs through ``emit`` until the job has ended (``wait``), or
    once; the job's record at the end.  ``read``: the record, read again (its tasks and logs
    appear as it starts)."""
    tails: dict[str, Tail] = {}
    combined: bool | None = None  # decided at the first sources seen: the combined stream, or the tasks' logs
    while True:
        job = read()
        active = job.active  # type: ignore[attr-defined]
        sources = record_sources(job, label, per_task or combined is False)
        if sources and combined is None:
            combined = sources[0].task == "output"
        for source in sources:
            if source.log not in tails and (source.task == "output") == combined:
                tails[source.log] = Tail(source)  # type: ignore[index]
        for tail in tails.values():
            data = tail.read()
            if data:
                emit(tail.source, data)
        if not (wait and active):
            return job  # read after the job had ended: every line of it has been read
        time.sleep(poll_s)
