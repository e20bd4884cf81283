"""``picluster launch SCRIPT [ARGS...]``: your own TensorFlow program on the running cluster."""

import sys
from pathlib import Path

import click

from picluster.cli.options import Real, Whole, inventory_option, option
from picluster.jobs.launch.config import DEFAULT_GRACE_S, MODES


@click.command(context_settings={"ignore_unknown_options": True, "allow_interspersed_args": False})
@inventory_option
@option("--mode", type=click.Choice(MODES), default="coordinator", show_default=True,
        help="coordinator: SCRIPT runs here as TF 2's ParameterServerStrategy chief; each-worker: SCRIPT runs beside every worker (between-graph).")
@option("--dir", "folder", type=click.Path(file_okay=False, path_type=Path), default=None,
        show_default="SCRIPT alone", help="each-worker: the folder staged with SCRIPT on every worker node.")
@option("--restart-limit", type=Whole(0, 1000), default=0, show_default=True,
        help="Restarts for the whole job of tasks killed by a signal (exit 128-255); exit 1-127 is never retried.")
@option("--grace", type=Real(0, 3600), default=DEFAULT_GRACE_S, show_default=True,
        help="Seconds between SIGTERM and SIGKILL when tasks are stopped.")
@option("--name", default=None, show_default="SCRIPT's name", help="The job's name.")
@option("--live/--no-live", default=True, show_default=True, help="Live node panel (on a terminal).")
@click.argument("script", type=click.Path(path_type=Path))
@click.argument("args", nargs=-1, type=click.UNPROCESSED)
def launch(inventory, mode, folder, restart_limit, grace, name, live, script, args) -> None:
    """Run SCRIPT with its ARGS on the running cluster, with TF_CONFIG written for each task.

    Each task's output is streamed with its node's name, kept under the job's id
    ('picluster logs JOB') and summarised at the end; 'picluster jobs' lists every job.
    """
    from rich.text import Text

    from picluster.jobs import controller
    from picluster.jobs.launch import config as launch_config
    from picluster.jobs.launch.launcher import Launch
    from picluster.util.errors import ClusterError
    from picluster.views.jobs import print_outcome
    from picluster.views.live import JobDisplay

    config = launch_config.make(script, args, mode, folder, launch_config.Restarts(restart_limit, grace), name)
    display = JobDisplay(f"launch {config.name}", "tasks", live=live)
    launcher = Launch(config)
    try:
        outcome = controller.run(launcher, inventory, display=display)
    except (KeyboardInterrupt, SystemExit):
        if launcher.job_id is not None:  # its tasks are stopped by now, and the record says why
            message = f"job {launcher.job_id} CANCELLED: every task stopped"
            if display.live:
                display.console.print(Text(message, style="dim"))
            else:
                print(message, file=sys.stderr, flush=True)
        raise
    print_outcome(outcome, display.console if display.live else None)
    if outcome.state != "COMPLETED":
        raise ClusterError(outcome.reason)  # the summary above already showed the tasks' last lines
