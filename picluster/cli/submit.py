"""``picluster submit [--nodes N] [--ps P] [--time T] [--mem M] [--nodelist NODES] [--name NAME] -- COMMAND...``"""

import click

from picluster.cli.options import Whole, node_inventory_option


@click.command(context_settings={"ignore_unknown_options": False})
@node_inventory_option
@click.option("--nodes", "-N", type=Whole(1, 4096), default=None, help="whole nodes for the job [default: 1, or the --nodelist's]")
@click.option("--ps", type=Whole(0, 4096), default=None, help="ps tasks among them [default: one per 12 nodes]")
@click.option("--time", "-t", "time_limit", default=None, help="run-time limit: minutes, MM:SS, HH:MM:SS, D-HH[:MM[:SS]] (SGE's h_rt)")
@click.option("--mem", default=None, help="memory per node: 512M, 2G (SGE's mem_free) [default: the whole node]")
@click.option("--nodelist", "-w", default=None, help="these nodes, e.g. node[01-04] (SGE's -l h=)")
@click.option("--name", "-J", default=None, help="the job's name in the queue (SGE's -N) [default: from the command]")
@click.argument("command", nargs=-1, required=True, type=click.UNPROCESSED)
def submit(inventory, nodes, ps, time_limit, mem, nodelist, name, command) -> None:
    """Queue COMMAND with Slurm on the inventory's cluster and print its job id (slurm:ID).

    Inside the job, `picluster run`, `train` and `launch` use the nodes Slurm gave it.  Example:
    picluster submit --nodes 8 --time 30 -- picluster run montecarlo --samples 1e8 --nodes 8
    """
    from picluster.jobs.slurm import batch, queue

    if inventory is None:
        from picluster.errors import UsageError

        raise UsageError("submit needs an inventory with a [slurm] table: give --inventory (or PICLUSTER_INVENTORY)")
    req = batch.check(inventory, tuple(command), nodes, ps, time_limit, mem, nodelist, name)
    queued = queue.submit(inventory, req)
    job = queued.id
    click.echo(f"slurm:{job}")
    click.echo(f"queued as Slurm job {job} ({req.name}, {req.nodes} node{'s' if req.nodes != 1 else ''}); "
               f"'picluster jobs slurm:{job}' shows it, 'picluster logs slurm:{job}' its output, "
               f"'picluster cancel slurm:{job}' stops it", err=True)
    if queued.unavailable:
        click.echo(f"note: not available now: {queue.describe(queued.unavailable)}: Slurm starts no job there", err=True)
