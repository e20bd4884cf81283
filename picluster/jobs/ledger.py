"""Every job a user can name, answered from one place: picluster's own records (a number, ``12``)
and Slurm's queue (``slurm:123``), for ``jobs``, ``logs`` and ``cancel``.

Both sources answer the same questions (a job's detail, the listing, its output followed or not,
the jobs a filter takes, cancel); which one answers is read from the job's reference here, once,
so the commands never ask.  Listings come back as views.listing.Listing, in every form.
"""

import os
import pwd
import shutil
import signal
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO

import psutil

from picluster.jobs.filters import Filter
from picluster.jobs.filters import chosen as chosen  # the commands read their filter options through the ledger
from picluster.jobs.follow import Emit, Ended, follow_record
from picluster.jobs.records import JobStore
from picluster.model.inventory import Inventory, Slurm
from picluster.util.errors import ClusterError, PiclusterError, UsageError
from picluster.views.jobs import job_detail, queue_listing, records_listing, slurm_detail
from picluster.views.listing import Listing

CANCEL_WAIT_S = 120.0  # a job's grace period and the kill after it fit in this

Say = Callable[[str], None]
EVERY = Filter()  # no filter: every job  # a line for the user beside the output (stderr)


@dataclass(frozen=True)
class Target:
    """A job ``cancel`` was asked about: ``job`` is its record (a JobRecord) or Slurm's row (a SlurmJob)."""

    ref: str  # "12", "slurm:40"
    state: str
    active: bool
    job: object


@dataclass(frozen=True)
class Cancelled:
    """What ``cancel`` did to one job: its state before and after, in words; ``error`` when it could not."""

    ref: str
    was: str
    state: str
    said: str
    error: PiclusterError | None = None


def whoami() -> str:
    """Whose records these are: the records live in this account's state directory."""
    try:
        return pwd.getpwuid(os.geteuid()).pw_name
    except KeyError:
        return str(os.geteuid())


class Records:
    """picluster's own jobs: the records database on this machine."""

    def __init__(self) -> None:
        self.store = JobStore()
        self.user = whoami()

    def detail(self, job_id: int) -> Listing:
        return job_detail(self.store.get(job_id), self.user)

    def chosen(self, limit: int | None, chosen: Filter) -> list:
        """The newest ``limit`` jobs the filter takes, oldest first."""
        if not chosen:
            return self.store.list(limit)
        found = [job for job in self.store.list() if chosen.takes(job.state, self.user, job.name, job.ended)]
        return found[-limit:] if limit else found

    def listing(self, limit: int, everyone: bool, chosen: Filter) -> Listing:
        found = self.chosen(limit, chosen)
        empty = None if self.store.damaged else f"picluster's own jobs: none match ({chosen.describe()})" if chosen else "no jobs yet"
        return records_listing(found, self.user, self.store.damaged, empty or "")

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

    def follow(self, job_id: int, label: str | None, emit: Emit, say: Say, wait: bool, per_task: bool) -> Ended:
        job = follow_record(lambda: self.store.get(job_id), label, emit, per_task, wait)
        return Ended(str(job.id), job.state, job.reason or None, None, job.active)

    def targets(self, ids: Sequence[int], chosen: Filter) -> list[Target]:
        """The named jobs the filter takes; with none named, the active ones it takes."""
        jobs = [self.store.get(i) for i in ids] if ids else [j for j in self.chosen(None, chosen) if j.active]
        return [Target(str(j.id), j.state, j.active, j) for j in jobs
                if not ids or chosen.takes(j.state, self.user, j.name, j.ended)]

    def cancel(self, ids: Sequence[int]) -> list[Cancelled]:
        """SIGTERM to each job's coordinator, which unwinds as on Ctrl-C (stops every task, then
        records the end); all are signalled before any is waited for.  Each job's state once ended."""
        done: dict[int, Cancelled] = {}
        waiting: dict[int, tuple[str, psutil.Process]] = {}
        for job_id in ids:
            job = self.store.get(job_id)
            ref = str(job_id)
            if not job.active:
                done[job_id] = Cancelled(ref, job.state, job.state, f"job {job_id} is already {job.state}"
                                         + (f" ({job.reason})" if job.reason else "") + "; nothing to cancel")
                continue
            try:
                coordinator = self.store.cancel_target(job_id)  # only a process proven to be the job's
                if coordinator is not None:
                    coordinator.send_signal(signal.SIGTERM)
            except (PermissionError, psutil.AccessDenied):  # psutil's is not an OSError: both named
                error = ClusterError(f"job {job_id} runs as another user (pid {job.pid}); cancel it as that user")
                done[job_id] = Cancelled(ref, job.state, job.state, str(error), error)
                continue
            except ClusterError as exc:
                done[job_id] = Cancelled(ref, job.state, job.state, str(exc), exc)
                continue
            except psutil.NoSuchProcess:
                coordinator = None
            if coordinator is None:
                now = self.store.get(job_id)  # reading marks it FAILED: its coordinator is gone
                done[job_id] = Cancelled(ref, job.state, now.state, f"job {job_id}: {now.state} ({now.reason})")
                continue
            waiting[job_id] = (job.state, coordinator)
        deadline = time.monotonic() + CANCEL_WAIT_S
        while waiting:
            for job_id, (was, coordinator) in list(waiting.items()):
                job = self.store.get(job_id)
                if not job.active:
                    done[job_id] = Cancelled(str(job_id), was, job.state, f"job {job_id} {job.state}" + (f": {job.reason}" if job.reason else ""))
                    del waiting[job_id]
                elif time.monotonic() > deadline:
                    error = ClusterError(f"job {job_id}'s coordinator (pid {coordinator.pid}) did not stop within {CANCEL_WAIT_S:.0f} s")
                    done[job_id] = Cancelled(str(job_id), was, job.state, str(error), error)
                    del waiting[job_id]
            if waiting:
                time.sleep(0.2)
        return [done[i] for i in ids]


class Queue:
    """Slurm's queue, asked on the inventory's controller over SSH."""

    def __init__(self, inventory: Inventory, partition: str) -> None:
        self.inv = inventory
        self.partition = partition

    def detail(self, number: str) -> Listing:
        from picluster.jobs.slurm import queue

        shown = slurm_detail(queue.find(self.inv, number), f"Slurm job {number} ({self.partition} on {self.inv.name})")
        said = queue.why(self.inv, number)  # a job that never ran, or waits for a node: why, and what to do
        shown.meta["why"] = said or None
        if said:
            shown.human.append(said)
        return shown

    def listing(self, limit: int, everyone: bool, chosen: Filter) -> Listing:
        """Your jobs (everyone's with --all; with --user, theirs): pending, running, and recently ended."""
        from picluster.jobs.slurm import queue

        everyone = everyone or bool(chosen.users)
        queued, down = queue.overview(self.inv, everyone, chosen.since)
        shown = [job for job in queued if chosen.takes(job.state, job.user, job.name, job.ended)]
        whose = f", jobs of {','.join(sorted(chosen.users))}" if chosen.users else "" if everyone else ", your jobs (--all: everyone's)"
        title = f"Slurm queue, partition {self.partition} on {self.inv.name}{whose}"
        notes = [f"not available: {queue.describe(down)}: Slurm starts no job there"] if down else []
        notes += [f"{j.ref} failed before its script ran ({j.reason}): 'picluster logs {j.ref}' says why and what to do"
                  for j in shown if j.reason == "JobLaunchFailure"]
        facts = {"cluster": self.inv.name, "partition": self.partition, "everyone": everyone, "unavailable": down}
        return queue_listing(shown, title, facts, notes)

    def output(self, number: str, label: str | None, out: TextIO, say: Say) -> None:
        from picluster.jobs.slurm import queue

        out.write(queue.output(self.inv, number))

    def follow(self, number: str, label: str | None, emit: Emit, say: Say, wait: bool, per_task: bool) -> Ended:
        from picluster.jobs.slurm import follow

        return follow.follow(self.inv, number, emit, say, wait)

    def targets(self, numbers: Sequence[str], chosen: Filter, everyone: bool) -> list[Target]:
        """The named jobs (anyone's) the filter takes; with none named, the active ones it takes
        among the caller's (everyone's with ``everyone``; with --user, theirs)."""
        from picluster.jobs.slurm import queue

        if numbers:
            found = {job.id: job for job in queue.listing(self.inv, ",".join(numbers))}
            missing = [n for n in numbers if n not in found]
            if missing:
                raise UsageError(queue.unknown(self.inv, missing[0]))
            jobs = [found[n] for n in numbers]
        else:
            jobs = [job for job in queue.overview(self.inv, everyone or bool(chosen.users), chosen.since)[0] if job.active]
        return [Target(job.ref, job.state, job.active, job) for job in jobs if chosen.takes(job.state, job.user, job.name, job.ended)]

    def cancel(self, jobs: Sequence) -> list[Cancelled]:
        """scancel each active one (a person may cancel their own jobs; the operator anyone's)."""
        from picluster.jobs.slurm import queue

        ended, refused = queue.cancel_many(self.inv, {job.id: job.user for job in jobs if job.active}) if any(
            job.active for job in jobs) else ({}, {})
        done = []
        for job in jobs:
            if not job.active:
                done.append(Cancelled(job.ref, job.state, job.state, f"{job.ref} is already {job.state}; nothing to cancel"))
            elif job.id in refused:
                done.append(Cancelled(job.ref, job.state, job.state, str(refused[job.id]), refused[job.id]))
            else:
                now = ended[job.id]
                done.append(Cancelled(job.ref, job.state, now.state, f"{job.ref} {now.state}"
                                      + (f" (was {job.state})" if job.state != now.state else "")))
        return done


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

    def detail(self, job: int | str) -> Listing:
        source, ref = self.source(job)
        return source.detail(ref)  # type: ignore[arg-type]  # source() pairs each source with its own kind of id

    def output(self, job: int | str, label: str | None, out: TextIO, say: Say) -> None:
        """The job's output on ``out``; lines about it (a log that is gone) through ``say``."""
        self._no_task(job, label)
        source, ref = self.source(job)
        source.output(ref, label, out, say)  # type: ignore[arg-type]

    def follow(self, job: int | str, label: str | None, emit: Emit, say: Say, wait: bool = True,
               per_task: bool = False) -> Ended:
        """The job's output, each new piece through ``emit`` until it has ended (``wait``), or
        what there is now; how it stands then.  ``per_task``: each task's own log, never a
        combined stream (the machine forms, whose lines name their task)."""
        self._no_task(job, label)
        source, ref = self.source(job)
        return source.follow(ref, label, emit, say, wait, per_task)  # type: ignore[arg-type]

    @staticmethod
    def _no_task(job: int | str, label: str | None) -> None:
        if isinstance(job, str) and label is not None:  # said before asking for the inventory: --task is the mistake
            raise UsageError("--task is for picluster's own records; a Slurm job has one output file")

    def sources(self) -> list[Records | Queue]:
        return [self.records] + ([self.queue] if self.queue is not None else [])

    def listing(self, limit: int, everyone: bool, chosen: Filter = EVERY) -> Iterator[Listing]:
        """What every source lists, in turn: the records are shown before Slurm's queue is asked
        (over SSH, which may fail or take a while)."""
        for source in self.sources():
            yield source.listing(limit, everyone, chosen)

    def problem(self) -> str | None:
        """What the listing left out, asked once it is shown (said last, as an error): records
        that could not be read.  Slurm's queue leaves nothing out: it answers whole (its nodes
        Slurm cannot use are listed), or its error ends the listing."""
        return self.records.problem()

    def targets(self, jobs: Sequence[int | str], chosen: Filter, everyone: bool = False) -> list[Target]:
        """The jobs ``cancel`` is asked to stop: the named ones the filter takes (ended ones too,
        to say so), or with none named every active job the filter takes, in both sources."""
        if not jobs and not chosen:
            raise UsageError("say which jobs: give their ids (12 slurm:40), or choose them with --state, --user, --name or --since")
        numbers = [j for j in jobs if isinstance(j, int)]
        refs = [str(self.source(j)[1]) for j in jobs if isinstance(j, str)]
        found = self.records.targets(numbers, chosen) if numbers or not jobs else []
        if self.queue is not None and (refs or not jobs):
            found += self.queue.targets(refs, chosen, everyone)
        return found

    def cancel(self, targets: Sequence[Target]) -> list[Cancelled]:
        """Each target's end: the records' signalled together, then Slurm's scancelled together."""
        done = {c.ref: c for c in self.records.cancel([int(t.ref) for t in targets if t.ref.isdigit()])}
        slurm = [t.job for t in targets if not t.ref.isdigit()]
        if slurm:
            assert self.queue is not None  # a Slurm target came from the queue
            done.update({c.ref: c for c in self.queue.cancel(slurm)})
        return [done[t.ref] for t in targets]


def _copy(path: Path, what: str, out: TextIO) -> None:
    """The file's bytes as they are (a log may hold anything), after what ``out`` holds so far."""
    try:
        with open(path, "rb") as f:
            out.flush()
            shutil.copyfileobj(f, out.buffer)
        out.buffer.flush()
    except FileNotFoundError:
        raise UsageError(f"{what} ({path}) is gone") from None
