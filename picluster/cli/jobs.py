"""``picluster jobs [JOB]``, ``picluster logs JOB [--task LABEL] [-f]``, ``picluster cancel [JOB]...``."""

import sys

import click

from picluster.cli import output
from picluster.cli.confirm import confirm, yes_option
from picluster.cli.options import JobRef, Real, Whole, jobs_inventory_option, option
from picluster.cli.output import Form, human, output_options, show
from picluster.util.errors import ClusterError, UsageError

INT64_MAX = 2**63 - 1  # SQLite's integers: a larger job id or --limit is a usage error, not an OverflowError
_FILTERS = ("--state", "--user", "--name", "--since")


def _filter_options(command):
    command = option("--since", default=None, metavar="WHEN",
                     help="Jobs queued or running at some moment since WHEN: 2h, 30m, 3d, 1w ago, or 2026-12-01[T14:00].")(command)
    command = option("--name", "names", multiple=True, metavar="NAME",
                     help="Jobs of this name, or pattern ('har*'); repeat for several.")(command)
    command = option("--user", "users", multiple=True, metavar="USER",
                     help="Jobs of this user (several comma-separated or repeated); in Slurm's queue, anyone's.")(command)
    return option("--state", "states", multiple=True, metavar="STATE",
                  help="Jobs in this state: Slurm's names or squeue's short forms, any case (running, R, pd, completed,CD, failed...).")(command)


@click.command()
@jobs_inventory_option
@click.argument("job_id", metavar="[JOB]", type=JobRef(), required=False)
@option("--limit", type=Whole(1, INT64_MAX), default=50, show_default=True, help="The newest N jobs.")
@option("--all", "everyone", is_flag=True, help="Everyone's jobs in Slurm's queue, not only yours.")
@_filter_options
@option("--watch", is_flag=True, help="Refresh until Ctrl-C (or q); not on a terminal, print again whenever the listing changes.")
@option("--interval", type=Real(0.5, 3600), default=2.0, show_default=True, help="Seconds between --watch's refreshes.")
@output_options
def jobs(inventory, job_id, limit, everyone, states, users, names, since, watch: bool, interval, form: Form) -> None:
    """List the jobs (launch, run, train) with their state and reason; with JOB, its tasks.

    With an inventory that has a [slurm] table, your jobs in Slurm's queue follow (pending,
    running, and ended in the last 10 minutes, or week with accounting); --all shows everyone's.
    JOB may then be slurm:ID.  --json and --parsable give picluster's jobs and Slurm's as one list.
    """
    from picluster.jobs.ledger import Ledger, chosen

    if job_id is not None and (states or users or names or since):
        raise UsageError(f"{', '.join(_FILTERS)} choose among the jobs listed: give them without JOB, or JOB alone")
    picked = chosen(states, users, names, since)
    ledger = Ledger(inventory)
    if watch:
        what = f"picluster jobs{'' if job_id is None else f' {job_id}'}"
        if job_id is not None:
            return output.watch(lambda: ledger.detail(job_id), form, interval, what)
        return output.watch(lambda: _whole(ledger, limit, everyone, picked), form, interval, what)
    if job_id is not None:
        show(ledger.detail(job_id), form)
        return
    if form.human:  # each source's table as soon as it answers: the records before Slurm's queue is asked
        for part in ledger.listing(limit, everyone, picked):
            human(part.human, form.header)
    else:
        show(_whole(ledger, limit, everyone, picked), form)
    problem = ledger.problem()
    if problem:
        raise UsageError(problem)


def _whole(ledger, limit, everyone, picked):
    from picluster.views.jobs import merged

    return merged(list(ledger.listing(limit, everyone, picked)))


@click.command()
@jobs_inventory_option
@click.argument("job_id", metavar="JOB", type=JobRef())
@option("--task", "label", default=None, help="One task's log, e.g. worker:3 or chief.")
@option("--follow", "-f", is_flag=True,
        help="Go on printing the output as it is written until the job ends; exit with the job's status (0: COMPLETED).")
@output_options
def logs(inventory, job_id, label, follow: bool, form: Form) -> None:
    """Print a job's output as it was streamed (node prefixes), or one task's log; a Slurm job's
    (slurm:ID) output file from the node that ran it.

    With -f, follow a pending or running job (picluster's own or slurm:ID) until it ends, say how
    it ended on stderr, and exit 0 if it COMPLETED, else its own exit code or 1.  --parsable gives
    a line per output line (task|node|text), --json one document with each task's lines."""
    from picluster.jobs.ledger import Ledger
    from picluster.views.logs import LogWriter

    def say(line: str) -> None:
        click.echo(line, err=True)

    ledger = Ledger(inventory)
    if form.human and not follow:
        ledger.output(job_id, label, sys.stdout, say)
        return
    kind = "json" if form.json else "parsable" if form.parsable else "human"
    writer = LogWriter(sys.stdout.buffer, kind, form.header, prefix=label is None)
    sys.stdout.flush()
    ended = ledger.follow(job_id, label, writer.emit, say, wait=follow, per_task=not form.human)
    writer.end(ended)
    if follow:
        say(ended.said())
        sys.exit(ended.exit_status())


@click.command()
@jobs_inventory_option
@click.argument("job_ids", metavar="[JOB]...", type=JobRef(), nargs=-1)
@_filter_options
@yes_option
@output_options
def cancel(inventory, job_ids, states, users, names, since, yes: bool, form: Form) -> None:
    """Stop jobs: SIGTERM to picluster's own (SIGKILL after their grace period; nothing is left
    running), scancel for Slurm's (slurm:ID), pending or running.

    Give the jobs (12 13 slurm:40), or choose them with --state, --user, --name, --since (your
    active jobs the filters take; with --user, theirs in Slurm's queue); given both, the named
    jobs the filters take.  Several jobs, or jobs a filter chose, are stopped only once you say
    yes (--yes: without asking; needed when not on a terminal).  Each job stopped is named."""
    from picluster.jobs.ledger import Ledger, chosen
    from picluster.views.jobs import cancel_listing

    picked = chosen(states, users, names, since)
    ledger = Ledger(inventory)
    targets = ledger.targets(list(dict.fromkeys(job_ids)), picked)
    active = [t.ref for t in targets if t.active]
    if not targets:
        if form.human:
            click.echo(f"nothing to cancel: no job of yours is active and matches ({picked.describe()})")
        else:
            show(cancel_listing([]), form)
        return
    if len(active) > 1 or (active and not job_ids):
        shown = ", ".join(active[:10]) + (f" and {len(active) - 10} more" if len(active) > 10 else "")
        confirm(f"cancel {len(active)} job{'s' if len(active) > 1 else ''} ({shown})", yes)
    done = ledger.cancel(targets)
    show(cancel_listing(done), form)
    failed = [c for c in done if c.error is not None]
    if len(failed) == 1:
        raise failed[0].error  # type: ignore[misc]
    if failed:
        kind = ClusterError if any(isinstance(c.error, ClusterError) for c in failed) else UsageError
        raise kind(f"{len(failed)} of {len(done)} jobs not cancelled: " + "; ".join(f"{c.ref}: {c.error}" for c in failed))
