"""Job records: every job picluster runs (``launch``, ``run montecarlo``, ``train har``), in SQLite.

One database in the state directory (``<state>/jobs.db``) holds, per job, its name, kind, mode,
state — PENDING, RUNNING, COMPLETED, FAILED or CANCELLED, as Slurm names them, with a reason —
nodes, times, the coordinator process that runs it, and per task its node, log and exit codes
(one per attempt).  SQLite makes every change atomic, and with a write-ahead log and a busy
timeout two picluster commands (a ``launch`` and a ``jobs``, two ``launch``es, a ``cancel``) can
use it at once.  A job whose coordinator vanished without recording the end (killed with
SIGKILL, a power cut) is marked FAILED the next time anyone reads the records.  The file is
untrusted input (record_schema.py): a foreign or newer database is refused untouched, a damaged
row named by its job id.  A coordinator is signalled only when processes.same_process proves it
(pid, start time, command line).
"""

import json
import os
import sqlite3
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil

from picluster.jobs import record_schema as schema
from picluster.jobs.record_schema import STATES, DamagedRow
from picluster.util.errors import ClusterError, PiclusterError, StorageError, UsageError
from picluster.util.paths import state_dir
from picluster.util.processes import same_process

ACTIVE = ("PENDING", "RUNNING")
BUSY_S = 30.0  # how long a command waits for another's transaction


@dataclass
class TaskRecord:
    label: str  # "chief", "worker:3"
    node: str
    log: str
    state: str
    exit_codes: list[int | None]  # one per attempt; None: status unknown


@dataclass
class JobRecord:
    id: int
    name: str
    kind: str  # "launch", "montecarlo", "har"
    mode: str
    state: str
    reason: str
    cluster: str
    nodes: str
    command: list[str]
    log_dir: str
    pid: int | None
    created: float
    started: float | None
    ended: float | None
    restarts: int
    cancel_requested: float | None
    tasks: list[TaskRecord] = field(default_factory=list)

    @property
    def elapsed_s(self) -> float | None:
        if self.started is None:
            return None
        return (self.ended or time.time()) - self.started

    @property
    def active(self) -> bool:
        return self.state in ACTIVE

    def task(self, label: str) -> TaskRecord:
        for t in self.tasks:
            if t.label == label:
                return t
        from picluster.model import nodeset

        have = nodeset.fold(t.label for t in self.tasks) if self.tasks else "none"
        raise UsageError(f"job {self.id} has no task {label} (its tasks: {have})")


def database() -> Path:
    return state_dir() / "jobs.db"


class JobStore:
    """The records; each method is one short transaction, so commands never wait on each other long."""

    def __init__(self, path: Path | None = None) -> None:
        self.path = path or database()
        self._prepared = False
        self.damaged: list[str] = []  # "job 7: command is not JSON", from the last list()

    @contextmanager
    def _tx(self, write: bool = True) -> Iterator[sqlite3.Connection]:
        self._make_folder()
        try:
            conn = sqlite3.connect(self.path, timeout=BUSY_S, isolation_level=None)
        except sqlite3.Error as exc:
            raise ClusterError(f"cannot open the job records {self.path}: {exc}") from None
        try:
            conn.row_factory = sqlite3.Row
            if not self._prepared:
                schema.prepare(conn, self.path)  # checked once per store: a foreign file is refused untouched
                self._prepared = True
            conn.execute("BEGIN IMMEDIATE" if write else "BEGIN")
            try:
                yield conn
                conn.execute("COMMIT")
            except BaseException:
                conn.execute("ROLLBACK")
                raise
        except sqlite3.OperationalError as exc:
            if "locked" in str(exc) or "busy" in str(exc):
                raise ClusterError(f"job records {self.path} stayed locked for {BUSY_S:.0f} s; is a picluster command hung?") from None
            raise ClusterError(f"job records {self.path}: {exc}") from None
        except sqlite3.DatabaseError as exc:  # not a database, a malformed page: the file, not the cluster
            raise UsageError(f"job records {self.path}: {exc} (move the file away to start new records)") from None
        finally:
            conn.close()

    def _make_folder(self) -> None:
        folder = self.path.parent
        if folder.is_dir():
            return
        if folder.exists() or any(p.exists() and not p.is_dir() for p in folder.parents):
            raise UsageError(f"state directory {folder} is not a directory: move that file away, "
                             "or set PICLUSTER_STATE_DIR to a folder")
        try:
            folder.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise StorageError(folder, exc) from None

    # -- writing --------------------------------------------------------------------------

    def create(self, name: str, kind: str, mode: str = "", cluster: str = "", command: list[str] | None = None,
               log_dir: str = "") -> int:
        me = psutil.Process()
        with self._tx() as db:
            cur = db.execute(
                "INSERT INTO jobs (name, kind, mode, state, cluster, command, log_dir, pid, pid_start, pid_cmdline, created)"
                " VALUES (?, ?, ?, 'PENDING', ?, ?, ?, ?, ?, ?, ?)",
                (name, kind, mode, cluster, json.dumps(command or []), log_dir, os.getpid(), me.create_time(),
                 json.dumps(me.cmdline()), time.time()),
            )
            assert cur.lastrowid is not None
            return cur.lastrowid

    def set_log_dir(self, job_id: int, log_dir: str) -> None:
        with self._tx() as db:
            db.execute("UPDATE jobs SET log_dir = ? WHERE id = ?", (log_dir, job_id))

    def running(self, job_id: int, nodes: str, tasks: Sequence[tuple[str, str, str]] = ()) -> None:
        """The job's tasks (label, node, log) are starting; the job is RUNNING from now."""
        with self._tx() as db:
            db.execute("UPDATE jobs SET state = 'RUNNING', nodes = ?, started = ? WHERE id = ?", (nodes, time.time(), job_id))
            db.executemany("INSERT OR REPLACE INTO tasks (job_id, label, node, log, state) VALUES (?, ?, ?, ?, 'RUNNING')",
                           [(job_id, label, node, log) for label, node, log in tasks])

    def task_exited(self, job_id: int, label: str, code: int | None, state: str) -> None:
        """One attempt of a task ended with ``code``; ``state``: the task's state now."""
        with self._tx() as db:
            row = db.execute("SELECT exit_codes FROM tasks WHERE job_id = ? AND label = ?", (job_id, label)).fetchone()
            try:
                codes = schema.exit_codes(row) if row else []
            except DamagedRow:
                codes = []  # our own job's row: its earlier attempts are lost, this one is still recorded
            db.execute("UPDATE tasks SET exit_codes = ?, state = ? WHERE job_id = ? AND label = ?",
                       (json.dumps(codes + [code]), state, job_id, label))

    def task_state(self, job_id: int, label: str, state: str) -> None:
        with self._tx() as db:
            db.execute("UPDATE tasks SET state = ? WHERE job_id = ? AND label = ?", (state, job_id, label))

    def restarted(self, job_id: int, label: str) -> None:
        with self._tx() as db:
            db.execute("UPDATE jobs SET restarts = restarts + 1 WHERE id = ?", (job_id,))
            db.execute("UPDATE tasks SET state = 'RUNNING' WHERE job_id = ? AND label = ?", (job_id, label))

    def finish(self, job_id: int, state: str, reason: str = "") -> None:
        if state not in STATES or state in ACTIVE:
            raise ValueError(f"not an end state: {state}")
        with self._tx() as db:
            db.execute("UPDATE jobs SET state = ?, reason = ?, ended = ? WHERE id = ? AND state IN ('PENDING', 'RUNNING')",
                       (state, " ".join(reason.split()), time.time(), job_id))
            db.execute("UPDATE tasks SET state = ? WHERE job_id = ? AND state IN ('PENDING', 'RUNNING')",
                       ("CANCELLED" if state == "CANCELLED" else "FAILED" if state == "FAILED" else "COMPLETED", job_id))

    def forget(self, job_id: int) -> None:
        with self._tx() as db:
            db.execute("DELETE FROM tasks WHERE job_id = ?", (job_id,))
            db.execute("DELETE FROM jobs WHERE id = ?", (job_id,))

    def request_cancel(self, job_id: int) -> JobRecord:
        with self._tx() as db:
            db.execute("UPDATE jobs SET cancel_requested = ? WHERE id = ? AND cancel_requested IS NULL", (time.time(), job_id))
        return self.get(job_id)

    # -- reading --------------------------------------------------------------------------

    def get(self, job_id: int) -> JobRecord:
        schema.job_id_arg(job_id)
        self._reap()
        with self._tx(write=False) as db:
            row = db.execute("SELECT * FROM jobs WHERE id = ?", (job_id,)).fetchone()
            if row is None:
                raise UsageError(f"no job {job_id} in {self.path} ('picluster jobs' lists them)")
            try:
                return self._job(db, row)
            except DamagedRow as exc:
                raise UsageError(f"job {job_id}'s record in {self.path} is damaged: {exc}") from None

    def list(self, limit: int | None = None) -> list[JobRecord]:
        """The newest ``limit`` jobs, oldest first; damaged rows are left out and named in ``damaged``."""
        if limit is not None:
            schema.job_id_arg(limit, "--limit")
        self._reap()
        self.damaged = []
        found = []
        with self._tx(write=False) as db:
            rows = db.execute("SELECT * FROM jobs ORDER BY id DESC" + (" LIMIT ?" if limit else ""),
                              (limit,) if limit else ()).fetchall()
            for row in reversed(rows):
                try:
                    found.append(self._job(db, row))
                except DamagedRow as exc:
                    self.damaged.append(f"job {row['id']}: {exc}")
        return found

    def _job(self, db: sqlite3.Connection, row: sqlite3.Row) -> JobRecord:
        job_id = schema.integer(row, "id", low=1)
        tasks = []
        for t in db.execute("SELECT * FROM tasks WHERE job_id = ? ORDER BY rowid", (job_id,)):
            try:
                tasks.append(TaskRecord(schema.text(t, "label"), schema.text(t, "node"), schema.text(t, "log"),
                                        schema.state(t), schema.exit_codes(t)))
            except DamagedRow as exc:
                raise DamagedRow(f"a task's {exc}") from None
        return JobRecord(job_id, schema.text(row, "name"), schema.text(row, "kind"), schema.text(row, "mode"), schema.state(row),
                         schema.text(row, "reason"), schema.text(row, "cluster"), schema.text(row, "nodes"),
                         schema.strings(row, "command"), schema.text(row, "log_dir"), schema.optional_integer(row, "pid", 1),
                         schema.moment(row, "created"), schema.optional_moment(row, "started"), schema.optional_moment(row, "ended"),
                         schema.integer(row, "restarts"), schema.optional_moment(row, "cancel_requested"), tasks)

    def _reap(self) -> None:
        """Jobs whose coordinator is gone but that still read PENDING or RUNNING: FAILED, saying so.
        A record without the coordinator's start time cannot tell it from a process that took its
        pid since: that job's process cannot be found either."""
        if not self.path.exists():
            return
        with self._tx(write=False) as db:
            active = db.execute("SELECT id, pid, pid_start, pid_cmdline FROM jobs WHERE state IN ('PENDING', 'RUNNING')").fetchall()
        for row in active:
            try:
                pid, started = schema.optional_integer(row, "pid", 1), schema.optional_moment(row, "pid_start")
                cmdline = schema.optional_strings(row, "pid_cmdline")
            except DamagedRow as exc:
                self.finish(row["id"], "FAILED", f"cannot find the job's process: its record is damaged ({exc})")
                continue
            if pid is not None and started is None:
                self.finish(row["id"], "FAILED", f"cannot find the job's process: pid {pid} has no recorded start time, "
                                                 "so it cannot be told from a process that took the pid since")
            elif not same_process(pid, started, cmdline):
                self.finish(row["id"], "FAILED", f"its coordinator (pid {pid}) ended without recording how the job ended")

    def cancel_target(self, job_id: int) -> psutil.Process | None:
        """The process to signal to cancel an active job, proven to be its coordinator; None when it is
        gone.  One that cannot be proven (a record without the start time or command line) is not
        signalled: the record is marked FAILED, saying so, and a ClusterError tells the user."""
        job = self.request_cancel(job_id)
        proc = self.coordinator(job)
        if proc is not None or not self.get(job_id).active:  # reading reaps a job whose coordinator is gone
            return proc
        reason = (f"cannot find the job's process: pid {job.pid} is alive but its record lacks the start time or "
                  "command line that would prove it is the job's; nothing was signalled")
        self.finish(job_id, "FAILED", reason)
        raise ClusterError(f"job {job_id}: {reason} (the record is marked FAILED)")

    def coordinator(self, job: JobRecord) -> psutil.Process | None:
        """The job's coordinator, only if pid, start time and command line all prove it is; else None."""
        with self._tx(write=False) as db:
            row = db.execute("SELECT pid, pid_start, pid_cmdline FROM jobs WHERE id = ?", (job.id,)).fetchone()
        try:
            pid, started = schema.integer(row, "pid", 1), schema.moment(row, "pid_start")
            cmdline = schema.strings(row, "pid_cmdline")
        except (DamagedRow, TypeError):
            return None
        if not same_process(pid, started, cmdline):
            return None
        try:
            return psutil.Process(pid)
        except psutil.Error:
            return None


class Recorder:
    """One job's record, as the command that runs it sees it."""

    def __init__(self, store: JobStore, job_id: int) -> None:
        self.store = store
        self.id = job_id
        self.ended = False
        self.ran = False  # it got as far as RUNNING

    def running(self, nodes: str, tasks: Sequence[tuple[str, str, str]] = ()) -> None:
        self.store.running(self.id, nodes, list(tasks))
        self.ran = True

    def end(self, state: str, reason: str = "") -> None:
        """Record how the job ended (the first call counts: a later one changes nothing)."""
        if not self.ended:
            self.store.finish(self.id, state, reason)
            self.ended = True

    def forget(self) -> None:
        """The job never started (it got no cluster): no record of it is kept."""
        if not self.ended and not self.ran:
            self.store.forget(self.id)
            self.ended = True

    def cancel_requested(self) -> bool:
        return self.store.get(self.id).cancel_requested is not None


@contextmanager
def recorded(name: str, kind: str, store: JobStore | None = None, keep_rejected: bool = False, **entry: Any) -> Iterator[Recorder]:
    """Record the job run inside: COMPLETED when the block ends, FAILED with the error's line when it
    raises, CANCELLED on Ctrl-C or SIGTERM (``picluster cancel`` sends SIGTERM).  ``entry``: the
    record's other fields, as JobStore.create takes them (mode, cluster, command, log_dir).

    Bad input found before the job ran (a UsageError while it is PENDING, e.g. more nodes than
    the cluster has) leaves no record, unless ``keep_rejected`` (the user was shown the job's id).
    """
    store = store or JobStore()
    job = Recorder(store, store.create(name, kind, **entry))
    try:
        yield job
    except UsageError as exc:
        if not keep_rejected and not job.ended and not job.ran:
            store.forget(job.id)
        else:
            job.end("FAILED", str(exc))
        raise
    except KeyboardInterrupt:
        job.end("CANCELLED", "interrupted (Ctrl-C)")
        raise
    except SystemExit as exc:
        if exc.code in (0, None):
            job.end("COMPLETED")
        elif not job.ended:
            job.end("CANCELLED", "cancelled with 'picluster cancel'" if job.cancel_requested() else f"stopped (exit {exc.code})")
        raise
    except PiclusterError as exc:
        job.end("FAILED", str(exc))
        raise
    except BaseException as exc:
        job.end("FAILED", f"{type(exc).__name__}: {exc}")
        raise
    else:
        job.end("COMPLETED")
