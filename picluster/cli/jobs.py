"""``picluster jobs [JOB]``, ``picluster logs JOB [--task LABEL]``, ``picluster cancel JOB``."""

import sys

import click

from picluster.cli.options import JobRef, Whole, jobs_inventory_option, option

INT64_MAX = 2**63 - 1  # SQLite's integers: a larger job id or --limit is a usage error, not an OverflowError


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

    from picluster.jobs.ledger import Ledger

    # Piped (to grep, to a file): wide enough that no column is cut.
    console = Console(highlight=False, width=None if sys.stdout.isatty() else 200)
    ledger = Ledger(inventory)
    if job_id is not None:
        console.print(ledger.detail(job_id))
        return
    for item in ledger.listing(limit, everyone):
        if isinstance(item, str):
            click.echo(item)
        else:
            console.print(item)
    problem = ledger.problem()
    if problem:
        from picluster.util.errors import UsageError

        raise UsageError(problem)


@click.command()
@jobs_inventory_option
@click.argument("job_id", metavar="JOB", type=JobRef())
@option("--task", "label", default=None, help="One task's log, e.g. worker:3 or chief.")
def logs(inventory, job_id, label) -> None:
    """Print a job's output as it was streamed (node prefixes), or one task's log; a Slurm job's
    (slurm:ID) output file from the node that ran it."""
    from picluster.jobs.ledger import Ledger

    Ledger(inventory).output(job_id, label, sys.stdout, lambda line: click.echo(line, err=True))


@click.command()
@jobs_inventory_option
@click.argument("job_id", metavar="JOB", type=JobRef())
def cancel(inventory, job_id) -> None:
    """Stop a running job: SIGTERM to its tasks, SIGKILL after its grace period; nothing is left running.
    A Slurm job (slurm:ID) is cancelled with scancel, pending or running."""
    from picluster.jobs.ledger import Ledger

    click.echo(Ledger(inventory).cancel(job_id))
