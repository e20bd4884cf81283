"""Job records as tables (``picluster jobs``, ``jobs JOB``) and a launched job's closing summary."""

import sys
import time

from rich import box
from rich.console import Console
from rich.table import Table
from rich.text import Text

from picluster.model import nodeset

STATE_STYLE = {"PENDING": "yellow", "RUNNING": "cyan", "COMPLETED": "green", "FAILED": "red", "CANCELLED": "magenta",
               "TIMEOUT": "red", "NODE_FAIL": "red", "OUT_OF_MEMORY": "red"}


def codes_text(codes: list[int | None]) -> str:
    return ",".join("?" if c is None else str(c) for c in codes) or "-"


def exit_codes(tasks: dict[str, list[int | None]]) -> str:
    """``worker:[0-1,3]=0 worker:2=137,0``: tasks with the same exit codes folded together."""
    groups: dict[str, list[str]] = {}
    for label, codes in tasks.items():
        if codes:
            groups.setdefault(codes_text(codes), []).append(label)
    return " ".join(f"{nodeset.fold(labels)}={codes}" for codes, labels in groups.items()) or "-"


def duration(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    seconds = round(seconds)
    if seconds < 3600:
        return f"{seconds // 60}:{seconds % 60:02d}"
    return f"{seconds // 3600}:{seconds // 60 % 60:02d}:{seconds % 60:02d}"


def _when(epoch: float | None) -> str:
    if epoch is None:
        return "-"
    return time.strftime("%m-%d %H:%M:%S", time.localtime(epoch))


def _state(job) -> Text:
    return Text(job.state, style=STATE_STYLE.get(job.state, ""))


def jobs_table(jobs: list) -> Table:
    """One row per job, oldest first (as ``sacct`` reads): the reason is in the last column."""
    table = Table(box=box.SIMPLE_HEAD, pad_edge=False)
    for name in ("id", "name", "kind", "mode", "state", "nodes", "start", "elapsed", "exit codes", "reason"):
        table.add_column(name, justify="right" if name == "id" else "left", no_wrap=name in _WHOLE,
                         min_width=len(name) if name in _WHOLE else None, overflow="fold")
    for job in jobs:
        codes = exit_codes({t.label: t.exit_codes for t in job.tasks})
        table.add_row(str(job.id), job.name, job.kind, job.mode or "-", _state(job), job.nodes or "-",
                      _when(job.started or job.created), duration(job.elapsed_s), codes, job.reason or "")
    return table


_WHOLE = ("id", "state", "start", "elapsed")  # never wrapped or cut


def job_detail(job) -> Table:
    """One job: a line per task (node, state, exit codes per attempt, log)."""
    table = Table(title=f"job {job.id} {job.name}: {job.state}" + (f" ({job.reason})" if job.reason else ""),
                  box=box.SIMPLE_HEAD, pad_edge=False, title_justify="left")
    for name in ("task", "node", "state", "exit codes", "log"):
        table.add_column(name, no_wrap=name != "log")
    for t in job.tasks:
        table.add_row(t.label, t.node, Text(t.state, style=STATE_STYLE.get(t.state, "")), codes_text(t.exit_codes), t.log or "-")
    return table


def queue_table(jobs: list, title: str) -> Table:
    """Slurm's jobs as squeue has them: the state with Slurm's reason, ``PENDING (Resources)``."""
    table = Table(title=title, box=box.SIMPLE_HEAD, pad_edge=False, title_justify="left")
    for name in ("id", "name", "user", "state", "nodes", "time", "limit"):
        table.add_column(name, no_wrap=name in ("id", "state", "time", "limit"), overflow="fold")
    for job in jobs:
        state = Text(job.state, style=STATE_STYLE.get(job.state, ""))
        if job.reason and job.reason != "None":
            state.append(f" ({job.reason})")
        nodes = job.nodelist if job.nodelist and job.state != "PENDING" else str(job.nodes)
        table.add_row(job.ref, job.name, job.user, state, nodes, job.used, job.limit)
    return table


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
