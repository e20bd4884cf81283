"""Every job a user can name, answered from one place: picluster's own records (a number, ``12``)
and Slurm's queue (``slurm:123``), for ``jobs``, ``logs`` and ``cancel``.

Both sources answer the same questions (a job's detail, the listing, its output, cancel); which one
answers is read from the job's reference here, once, so the commands never ask.
"""

import shutil
import signal
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TextIO

from rich.console import RenderableType

from picluster.jobs.records import JobStore
from picluster.model.inventory import Inventory, Slurm
from picluster.util.errors import ClusterError, UsageError
from picluster.views.jobs import job_detail, jobs_table, queue_table

CANCEL_WAIT_S = 120.0  # a job's grace period and the kill after it fit in this

Shown = RenderableType | str  # a table, or a plain line (printed as it is, never as markup)
Say = Callable[[str], None]  # a line for the user beside the output (stderr)


class Records:
    """picluster's own jobs: the records database on this machine."""

    def __init__(self) -> None:
        self.store = JobStore()

    def detail(self, job_id: int) -> Shown:
        return job_detail(self.store.get(job_id))

    def listing(self, limit: int, everyone: bool) -> list[Shown]:
        found = self.store.list(limit)
        if found:
            return [jobs_table(found)]
        return [] if self.store.damaged else ["no jobs yet"]

    def problem(self) -> str | None:
        """What the listing left out, read after it: records that could not be read."""
        if self.store.damaged:
            return f"damaged records in {self.store.path}, not listed: {'; '.join(self.store.damaged)}"
        return None

    def output(self, job_id: int, label: str | None, out: TextIO, say: Say) -> None:
        job = self.store.get(job_id)
        if label is not None:
            task = job.task(label)
            if not task.log:
                raise UsageError(f"job {job_id}: {label} keeps no log of its own (a server of the cluster: see 'picluster cluster status')")
            _copy(Path(task.log), f"job {job_id}'s log of {label}", out)
            return
        combined = Path(job.log_dir) / "output.log" if job.log_dir else None
        if combined is not None and combined.is_file():
            _copy(combined, f"job {job_id}'s output", out)
            return
        with_logs = [t for t in job.tasks if t.log]
        if not with_logs:
            say(f"job {job_id} ({job.kind}) keeps no task logs")
            return
        for task in with_logs:
            try:
                with open(task.log, encoding="utf-8", errors="replace") as f:
                    for line in f:
                        out.write(f"{task.label}: {line}")
            except OSError:
                say(f"{task.label}: (log {task.log} is gone)")

    def cancel(self, job_id: int) -> str:
        """SIGTERM to the job's coordinator, which unwinds as on Ctrl-C (stops every task, then
        records the end); the job's state once it has ended."""
        job = self.store.get(job_id)
        if not job.active:
            return f"job {job_id} is already {job.state}" + (f" ({job.reason})" if job.reason else "") + "; nothing to cancel"
        coordinator = self.store.cancel_target(job_id)  # only a process proven to be the job's
        if coordinator is None:
            job = self.store.get(job_id)  # reading marks it FAILED: its coordinator is gone
            return f"job {job_id}: {job.state} ({job.reason})"
        try:
            coordinator.send_signal(signal.SIGTERM)
        except PermissionError:
            raise ClusterError(f"job {job_id} runs as another user (pid {coordinator.pid}); cancel it as that user") from None
        deadline = time.monotonic() + CANCEL_WAIT_S
        while time.monotonic() < deadline:
            job = self.store.get(job_id)
            if not job.active:
                return f"job {job_id} {job.state}" + (f": {job.reason}" if job.reason else "")
            time.sleep(0.2)
        raise ClusterError(f"job {job_id}'s coordinator (pid {coordinator.pid}) did not stop within {CANCEL_WAIT_S:.0f} s")


class Queue:
    """Slurm's queue, asked on the inventory's controller over SSH."""

    def __init__(self, inventory: Inventory, partition: str) -> None:
        self.inv = inventory
        self.partition = partition

    def detail(self, number: str) -> Shown:
        from rich.console import Group
        from rich.text import Text

        from picluster.jobs.slurm import queue

        table = queue_table([queue.find(self.inv, number)], f"Slurm job {number} ({self.partition} on {self.inv.name})")
        said = queue.why(self.inv, number)  # a job that never ran, or waits for a node: why, and what to do
        return Group(table, Text(said)) if said else table

    def listing(self, limit: int, everyone: bool) -> list[Shown]:
        """Your jobs (everyone's with --all): pending, running, and recently ended."""
        from picluster.jobs.slurm import queue

        queued, down = queue.overview(self.inv, everyone)
        title = f"Slurm queue, partition {self.partition} on {self.inv.name}" + ("" if everyone else ", your jobs (--all: everyone's)")
        shown: list[Shown] = [queue_table(queued, title) if queued else f"{title}: empty"]
        if down:
            shown.append(f"not available: {queue.describe(down)}: Slurm starts no job there")
        shown += [f"{j.ref} failed before its script ran ({j.reason}): 'picluster logs {j.ref}' says why and what to do"
                  for j in queued if j.reason == "JobLaunchFailure"]
        return shown

    def output(self, number: str, label: str | None, out: TextIO, say: Say) -> None:
        from picluster.jobs.slurm import queue

        out.write(queue.output(self.inv, number))

    def cancel(self, number: str) -> str:
        from picluster.jobs.slurm import queue

        was = queue.find(self.inv, number)
        if not was.active:
            return f"slurm:{number} is already {was.state}; nothing to cancel"
        ended = queue.cancel(self.inv, number, owner=was.user)
        return f"slurm:{number} {ended.state}" + (f" (was {was.state})" if was.state != ended.state else "")


class Ledger:
    """The records, then Slurm's queue when the inventory has a [slurm] table."""

    def __init__(self, inventory: Inventory | None) -> None:
        self.records = Records()
        # Whether there is a queue to ask, not which kind of cluster a job runs on (the jobs
        # layer's rule, tests/test_layers.py): an inventory with a [slurm] table has one.
        self.queue: Queue | None = None
        match inventory:
            case Inventory(slurm=Slurm(partition=partition)):
                self.queue = Queue(inventory, partition)

    def source(self, job: int | str) -> tuple[Records | Queue, int | str]:
        """Who answers for ``job`` (a record's number, or ``slurm:ID``), and its id there."""
        if isinstance(job, int):
            return self.records, job
        if self.queue is None:
            raise UsageError(f"{job} is a Slurm job: give the inventory with the [slurm] table (--inventory or PICLUSTER_INVENTORY)")
        return self.queue, job.removeprefix("slurm:")

    def detail(self, job: int | str) -> Shown:
        source, ref = self.source(job)
        return source.detail(ref)  # type: ignore[arg-type]  # source() pairs each source with its own kind of id

    def output(self, job: int | str, label: str | None, out: TextIO, say: Say) -> None:
        """The job's output on ``out``; lines about it (a log that is gone) through ``say``."""
        if isinstance(job, str) and label is not None:  # said before asking for the inventory: --task is the mistake
            raise UsageError("--task is for picluster's own records; a Slurm job has one output file")
        source, ref = self.source(job)
        source.output(ref, label, out, say)  # type: ignore[arg-type]

    def cancel(self, job: int | str) -> str:
        source, ref = self.source(job)
        return source.cancel(ref)  # type: ignore[arg-type]

    def sources(self) -> list[Records | Queue]:
        return [self.records] + ([self.queue] if self.queue is not None else [])

    def listing(self, limit: int, everyone: bool) -> Iterator[Shown]:
        """What every source lists, in turn: the records are shown before Slurm's queue is asked
        (over SSH, which may fail or take a while)."""
        for source in self.sources():
            yield from source.listing(limit, everyone)

    def problem(self) -> str | None:
        """What the listing left out, asked once it is shown (said last, as an error): records
        that could not be read.  Slurm's queue leaves nothing out: it answers whole (its nodes
        Slurm cannot use are listed), or its error ends the listing."""
        return self.records.problem()


def _copy(path: Path, what: str, out: TextIO) -> None:
    """The file's bytes as they are (a log may hold anything), after what ``out`` holds so far."""
    try:
        with open(path, "rb") as f:
            out.flush()
            shutil.copyfileobj(f, out.buffer)
        out.buffer.flush()
    except FileNotFoundError:
        raise UsageError(f"{what} ({path}) is gone") from None
