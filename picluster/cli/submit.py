"""``picluster submit [--nodes N] [--ps P] [--cpus C] [--time T] [--mem M] [--nodelist NODES] [--name NAME] -- COMMAND...``
or ``picluster submit [options] SCRIPT``: a job script with #SBATCH or SGE #$ lines."""

import os
from pathlib import Path

import click

from picluster.cli.options import Whole, node_inventory_option


@click.command(context_settings={"ignore_unknown_options": False})
@node_inventory_option
@click.option("--nodes", "-N", type=Whole(1, 4096), default=None, help="nodes for the job [default: 1, or the --nodelist's]")
@click.option("--ps", type=Whole(0, 4096), default=None, help="ps tasks among them [default: one per 12 nodes]")
@click.option("--cpus", "-c", type=Whole(1, 1024), default=None,
              help="CPUs per node, leaving the rest to other jobs [default: whole nodes]")
@click.option("--time", "-t", "time_limit", default=None, help="run-time limit: minutes, MM:SS, HH:MM:SS, D-HH[:MM[:SS]] (SGE's h_rt)")
@click.option("--mem", default=None, help="memory per node: 512M, 2G (SGE's mem_free) [default: the CPUs' share]")
@click.option("--nodelist", "-w", default=None, help="these nodes, e.g. node[01-04] (SGE's -l h=)")
@click.option("--name", "-J", default=None, help="the job's name in the queue (SGE's -N) [default: from the command]")
@click.argument("command", nargs=-1, required=True, type=click.UNPROCESSED)
def submit(inventory, nodes, ps, cpus, time_limit, mem, nodelist, name, command) -> None:
    """Queue COMMAND, or a job SCRIPT, with Slurm on the inventory's cluster and print its job id (slurm:ID).

    Inside the job, `picluster run`, `train` and `launch` use the nodes Slurm gave it.  A SCRIPT
    (one file, no arguments) keeps its #SBATCH lines; its SGE #$ lines are translated, each said.
    Example: picluster submit --nodes 8 --time 30 -- picluster run montecarlo --samples 1e8 --nodes 8
    """
    from picluster.errors import UsageError
    from picluster.jobs.slurm import batch, queue, script

    if inventory is None:
        raise UsageError("submit needs an inventory with a [slurm] table: give --inventory (or PICLUSTER_INVENTORY)")
    job_script = None
    if len(command) == 1 and Path(command[0]).is_file():
        try:
            data = Path(command[0]).read_bytes()
        except OSError as exc:
            raise UsageError(f"{command[0]}: {exc.strerror}") from None
        if inventory.slurm is not None:
            job_script = script.read(inventory, command[0], data, os.getcwd())
    req = batch.check(inventory, () if job_script else tuple(command), nodes, ps, time_limit, mem, nodelist, name, cpus, job_script)
    queued = queue.submit(inventory, req)
    job = queued.id
    click.echo(f"slurm:{job}")
    for line in job_script.said if job_script else ():  # once queued: a refusal stays one line
        click.echo(line, err=True)
    size = "" if job_script else f", {req.nodes} node{'s' if req.nodes != 1 else ''}"
    click.echo(f"queued as Slurm job {job} ({req.name}{size}); "
               f"'picluster jobs slurm:{job}' shows it, 'picluster logs slurm:{job}' its output, "
               f"'picluster cancel slurm:{job}' stops it", err=True)
    if queued.unavailable:
        click.echo(f"note: not available now: {queue.describe(queued.unavailable)}: Slurm starts no job there", err=True)
