"""Jobs as listings (``picluster jobs``, ``jobs JOB``, ``cancel``) and a launched job's closing summary.

One row schema for every job, picluster's own records and Slurm's alike (``picluster.jobs/1``,
docs/scripting.md): its ``id`` is what ``logs`` and ``cancel`` take (``12``, ``slurm:40``).  The
records and Slurm's queue are two tables for people (their columns differ), one list for machines.
The rows take duck-typed jobs (``JobRecord``, ``SlurmJob``): views sit below the jobs layer.
"""

import sys

from rich.console import Console
from rich.text import Text

from picluster.model import nodeset
from picluster.views.listing import Column, Fitted, Listing, Row, dash, iso, when
from picluster.views.listing import duration as duration  # the jobs' one way to write a duration

STATE_STYLE = {"PENDING": "yellow", "RUNNING": "cyan", "COMPLETED": "green", "FAILED": "red", "CANCELLED": "magenta",
               "TIMEOUT": "red", "NODE_FAIL": "red", "OUT_OF_MEMORY": "red"}
# The parsable form's columns; free text (the reason) last, where a '|' in it cannot shift the others.
JOB_FIELDS = ("id", "user", "name", "kind", "mode", "state", "nodes", "node_count", "submitted", "started", "ended",
              "elapsed_s", "time_limit_s", "exit_code", "exit_codes", "reason")
TASK_FIELDS = ("job", "task", "node", "state", "exit_codes", "log")
CANCEL_FIELDS = ("id", "was", "state", "stopped", "error", "said")


def codes_text(codes: list[int | None]) -> str:
    return ",".join("?" if c is None else str(c) for c in codes) or "-"


def exit_codes(tasks: dict[str, list[int | None]]) -> str:
    """``worker:[0-1,3]=0 worker:2=137,0``: tasks with the same exit codes folded together."""
    groups: dict[str, list[str]] = {}
    for label, codes in tasks.items():
        if codes:
            groups.setdefault(codes_text(codes), []).append(label)
    return " ".join(f"{nodeset.fold(labels)}={codes}" for codes, labels in groups.items()) or "-"


def _state(state: str, reason: str | None = None) -> Text:
    text = Text(state, style=STATE_STYLE.get(state, ""))
    if reason:
        text.append(f" ({reason})")
    return text


# -- rows --------------------------------------------------------------------------------------------

def record_row(job, user: str) -> Row:
    """One of picluster's own jobs (a ``JobRecord``); ``user``: whose records these are."""
    return {
        "id": str(job.id), "user": user, "name": job.name, "kind": job.kind, "mode": job.mode or None, "state": job.state,
        "nodes": job.nodes or None, "node_count": len({t.node for t in job.tasks}) or None,
        "submitted": iso(job.created), "started": iso(job.started), "ended": iso(job.ended),
        "elapsed_s": None if job.elapsed_s is None else round(job.elapsed_s, 1), "time_limit_s": None,
        "exit_code": None, "exit_codes": {t.label: t.exit_codes for t in job.tasks if t.exit_codes},
        "reason": job.reason or None,
    }


def slurm_row(job) -> Row:
    """A job of Slurm's queue (a ``SlurmJob``): Slurm's ``None`` reason is no reason."""
    return {
        "id": job.ref, "user": job.user, "name": job.name, "kind": "slurm", "mode": None, "state": job.state,
        "nodes": job.nodelist or None, "node_count": job.nodes, "submitted": iso(job.submitted), "started": iso(job.started),
        "ended": iso(job.ended), "elapsed_s": job.elapsed_s, "time_limit_s": job.limit_s, "exit_code": job.exit_code,
        "exit_codes": {}, "reason": None if job.reason in ("", "None") else job.reason,
    }


# -- tables for people -------------------------------------------------------------------------------

# picluster's own jobs at 80 columns: id, name, state, start and the reason (wrapped) first; the
# others as the width allows (elapsed, nodes, kind, exit codes, mode); id, name and state always.
RECORD_COLUMNS = [
    Column("id", lambda r: r["id"], right=True),
    Column("name", lambda r: r["name"]),
    Column("kind", lambda r: r["kind"], drop=5),
    Column("mode", lambda r: dash(r["mode"]), drop=7),
    Column("state", lambda r: _state(r["state"])),
    Column("nodes", lambda r: dash(r["nodes"]), drop=4),
    Column("start", lambda r: when(r["started"] or r["submitted"]), drop=2),
    Column("elapsed", lambda r: duration(r["elapsed_s"]), right=True, drop=3),
    Column("exit codes", lambda r: exit_codes(r["exit_codes"]), drop=6, wrap=True),
    Column("reason", lambda r: r["reason"] or "", wrap=True, drop=1),
]
# Slurm's, as squeue has them: the state with Slurm's reason, ``PENDING (Resources)``.
QUEUE_COLUMNS = [
    Column("id", lambda r: r["id"]),
    Column("name", lambda r: r["name"]),
    Column("user", lambda r: r["user"], drop=2),
    Column("state", lambda r: _state(r["state"], r["reason"]), wrap=True),
    Column("nodes", lambda r: r["nodes"] if r["nodes"] and r["state"] != "PENDING" else str(r["node_count"]), drop=1),
    Column("time", lambda r: duration(r["elapsed_s"]), right=True, drop=4),
    Column("limit", lambda r: duration(r["time_limit_s"]) if r["time_limit_s"] is not None else "UNLIMITED", right=True, drop=3),
    Column("start", lambda r: when(r["started"]), drop=5),
    Column("exit", lambda r: dash(r["exit_code"]), right=True, drop=6),
]
TASK_COLUMNS = [
    Column("task", lambda r: r["task"]),
    Column("node", lambda r: dash(r["node"])),
    Column("state", lambda r: _state(r["state"])),
    Column("exit codes", lambda r: codes_text(r["exit_codes"])),
    Column("log", lambda r: dash(r["log"]), wrap=True),
]


def records_listing(jobs: list, user: str, damaged: list[str], empty: str) -> Listing:
    """picluster's own jobs, oldest first (as ``sacct`` reads): the reason is in the last column."""
    rows = [record_row(job, user) for job in jobs]
    return Listing("jobs/1", "jobs", JOB_FIELDS, rows, [Fitted(RECORD_COLUMNS, rows, empty=empty)],
                   {"damaged": damaged} if damaged else {})


def queue_listing(jobs: list, title: str, slurm: dict, notes: list[str]) -> Listing:
    """Slurm's jobs under ``title``; ``slurm``: the queue's own facts for --json (partition,
    nodes it cannot use); ``notes``: lines for people after the table."""
    rows = [slurm_row(job) for job in jobs]
    return Listing("jobs/1", "jobs", JOB_FIELDS, rows, [Fitted(QUEUE_COLUMNS, rows, title=title, empty=f"{title}: empty"), *notes],
                   {"slurm": slurm})


def merged(listings: list[Listing]) -> Listing:
    """The records' listing and the queue's as one (--json, --parsable): rows one after the other."""
    first = listings[0]
    rows = [row for one in listings for row in one.rows]
    meta = {key: value for one in listings for key, value in one.meta.items()}
    meta.setdefault("slurm", None)
    meta.setdefault("damaged", [])
    return Listing(first.schema, first.key, first.fields, rows, [part for one in listings for part in one.human], meta)


def task_rows(job) -> list[Row]:
    return [{"job": str(job.id), "task": t.label, "node": t.node or None, "state": t.state, "exit_codes": t.exit_codes,
             "log": t.log or None} for t in job.tasks]


def job_detail(job, user: str) -> Listing:
    """One of picluster's jobs: its row, and a line per task (node, state, exit codes per attempt, log)."""
    rows = task_rows(job)
    title = f"job {job.id} {job.name}: {job.state}" + (f" ({job.reason})" if job.reason else "")
    return Listing("job/1", "tasks", TASK_FIELDS, rows, [Fitted(TASK_COLUMNS, rows, title=title, empty=f"{title}; no tasks")],
                   {"job": record_row(job, user)})


def slurm_detail(job, title: str) -> Listing:
    """One of Slurm's jobs: its row; its one task is the batch script, on the node that ran it."""
    row = slurm_row(job)
    tasks = [{"job": job.ref, "task": "batch", "node": job.batch_host or None, "state": job.state,
              "exit_codes": [] if job.exit_code is None else [job.exit_code], "log": None}]
    return Listing("job/1", "tasks", TASK_FIELDS, tasks, [Fitted(QUEUE_COLUMNS, [row], title=title)], {"job": row})


def cancel_listing(done: list) -> Listing:
    """What ``cancel`` did (jobs.ledger.Cancelled), a line per job: its state before and after,
    in words; for people, the jobs it could not cancel are left to the error that follows."""
    rows = [{"id": c.ref, "was": c.was, "state": c.state, "stopped": c.error is None and c.state != c.was,
             "error": None if c.error is None else str(c.error), "said": c.said} for c in done]
    return Listing("cancel/1", "jobs", CANCEL_FIELDS, rows, [row["said"] for row in rows if row["error"] is None])


def print_outcome(outcome, console: Console | None = None) -> None:
    """How the job ended, its exit codes, then its tasks' last lines folded across nodes."""
    out = console or Console(file=sys.stdout, highlight=False, soft_wrap=True)
    restarts = f", {outcome.restarts} restart(s)" if outcome.restarts else ""
    out.print(Text(f"job {outcome.job_id} {outcome.state} in {outcome.elapsed_s:.1f} s{restarts}: "
                   f"exit codes {exit_codes(outcome.exit_codes)}"), style=STATE_STYLE.get(outcome.state, ""))
    if outcome.summary:
        out.print("last lines, folded across tasks:")
        for line in outcome.summary:
            out.print(Text(f"  {line}"))
    out.print(f"logs: picluster logs {outcome.job_id} [--task LABEL]  ({outcome.log_dir})")
