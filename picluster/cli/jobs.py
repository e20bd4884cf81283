"""``picluster jobs [JOB]``, ``picluster logs JOB [--task LABEL]``, ``picluster cancel JOB``."""

import shutil
import sys
import time
from pathlib import Path

import click

from picluster.cli.options import JobRef, Whole, jobs_inventory_option, option

INT64_MAX = 2**63 - 1  # SQLite's integers: a larger job id or --limit is a usage error, not an OverflowError
CANCEL_WAIT_S = 120.0  # the job's grace period and the kill after it fit in this


def _slurm_inventory(inventory, job_id: str):
    from picluster.util.errors import UsageError

    if inventory is None or inventory.slurm is None:
        raise UsageError(f"{job_id} is a Slurm job: give the inventory with the [slurm] table (--inventory or PICLUSTER_INVENTORY)")
    return inventory, job_id.removeprefix("slurm:")


@click.command()
@jobs_inventory_option
@click.argument("job_id", metavar="[JOB]", type=JobRef(), required=False)
@option("--limit", type=Whole(1, INT64_MAX), default=50, show_default=True, help="The newest N jobs.")
@option("--all", "everyone", is_flag=True, help="Everyone's jobs in Slurm's queue, not only yours.")
def jobs(inventory, job_id, limit, everyone) -> None:
    """List the jobs (launch, run, train) with their state and reason; with JOB, its tasks.

    With an inventory that has a [slurm] table, your jobs in Slurm's queue follow (pending,
    running, and ended in the last 10 minutes, or week with accounting); --all shows everyone's.
    JOB may then be slurm:ID.
    """
    from rich.console import Console

    from picluster.jobs.records import JobStore
    from picluster.views.jobs import job_detail, jobs_table, queue_table

    # Piped (to grep, to a file): wide enough that no column is cut.
    console = Console(highlight=False, width=None if sys.stdout.isatty() else 200)
    if isinstance(job_id, str):
        from picluster.jobs.slurm import queue

        inv, number = _slurm_inventory(inventory, job_id)
        console.print(queue_table([queue.find(inv, number)], f"Slurm job {number} ({inv.slurm.partition} on {inv.name})"))
        return
    store = JobStore()
    if job_id is not None:
        console.print(job_detail(store.get(job_id)))
        return
    found = store.list(limit)
    if found:
        console.print(jobs_table(found))
    elif not store.damaged:
        click.echo("no jobs yet")
    if inventory is not None and inventory.slurm is not None:
        from picluster.jobs.slurm import queue

        queued, down = queue.overview(inventory, everyone)
        title = f"Slurm queue, partition {inventory.slurm.partition} on {inventory.name}" + ("" if everyone else ", your jobs (--all: everyone's)")
        if queued:
            console.print(queue_table(queued, title))
        else:
            click.echo(f"{title}: empty")
        if down:
            click.echo(f"not available: {queue.describe(down)}: Slurm starts no job there")
    if store.damaged:
        from picluster.util.errors import UsageError

        raise UsageError(f"damaged records in {store.path}, not listed: {'; '.join(store.damaged)}")


@click.command()
@jobs_inventory_option
@click.argument("job_id", metavar="JOB", type=JobRef())
@option("--task", "label", default=None, help="One task's log, e.g. worker:3 or chief.")
def logs(inventory, job_id, label) -> None:
    """Print a job's output as it was streamed (node prefixes), or one task's log; a Slurm job's
    (slurm:ID) output file from the node that ran it."""
    from picluster.jobs.records import JobStore
    from picluster.util.errors import UsageError

    if isinstance(job_id, str):
        from picluster.jobs.slurm import queue

        if label is not None:
            raise UsageError("--task is for picluster's own records; a Slurm job has one output file")
        sys.stdout.write(queue.output(*_slurm_inventory(inventory, job_id)))
        return

    job = JobStore().get(job_id)
    if label is not None:
        task = job.task(label)
        if not task.log:
            raise UsageError(f"job {job_id}: {label} keeps no log of its own (a server of the cluster: see 'picluster cluster status')")
        _copy(Path(task.log), f"job {job_id}'s log of {label}")
        return
    combined = Path(job.log_dir) / "output.log" if job.log_dir else None
    if combined is not None and combined.is_file():
        _copy(combined, f"job {job_id}'s output")
        return
    with_logs = [t for t in job.tasks if t.log]
    if not with_logs:
        click.echo(f"job {job_id} ({job.kind}) keeps no task logs", err=True)
        return
    for task in with_logs:
        try:
            with open(task.log, encoding="utf-8", errors="replace") as f:
                for line in f:
                    sys.stdout.write(f"{task.label}: {line}")
        except OSError:
            click.echo(f"{task.label}: (log {task.log} is gone)", err=True)


def _copy(path: Path, what: str) -> None:
    from picluster.util.errors import UsageError

    try:
        with open(path, "rb") as f:
            shutil.copyfileobj(f, sys.stdout.buffer)
        sys.stdout.flush()
    except FileNotFoundError:
        raise UsageError(f"{what} ({path}) is gone") from None


@click.command()
@jobs_inventory_option
@click.argument("job_id", metavar="JOB", type=JobRef())
def cancel(inventory, job_id) -> None:
    """Stop a running job: SIGTERM to its tasks, SIGKILL after its grace period; nothing is left running.
    A Slurm job (slurm:ID) is cancelled with scancel, pending or running."""
    import signal

    from picluster.jobs.records import JobStore
    from picluster.util.errors import ClusterError

    if isinstance(job_id, str):
        from picluster.jobs.slurm import queue

        inv, number = _slurm_inventory(inventory, job_id)
        was = queue.find(inv, number)
        if not was.active:
            click.echo(f"{job_id} is already {was.state}; nothing to cancel")
            return
        ended = queue.cancel(inv, number, owner=was.user)
        click.echo(f"{job_id} {ended.state}" + (f" (was {was.state})" if was.state != ended.state else ""))
        return

    store = JobStore()
    job = store.get(job_id)
    if not job.active:
        click.echo(f"job {job_id} is already {job.state}" + (f" ({job.reason})" if job.reason else "") + "; nothing to cancel")
        return
    coordinator = store.cancel_target(job_id)  # only a process proven to be the job's
    if coordinator is None:
        job = store.get(job_id)  # reading marks it FAILED: its coordinator is gone
        click.echo(f"job {job_id}: {job.state} ({job.reason})")
        return
    try:
        coordinator.send_signal(signal.SIGTERM)  # it unwinds as on Ctrl-C: stops every task, then records the end
    except PermissionError:
        raise ClusterError(f"job {job_id} runs as another user (pid {coordinator.pid}); cancel it as that user") from None
    deadline = time.monotonic() + CANCEL_WAIT_S
    while time.monotonic() < deadline:
        job = store.get(job_id)
        if not job.active:
            click.echo(f"job {job_id} {job.state}" + (f": {job.reason}" if job.reason else ""))
            return
        time.sleep(0.2)
    raise ClusterError(f"job {job_id}'s coordinator (pid {coordinator.pid}) did not stop within {CANCEL_WAIT_S:.0f} s")
