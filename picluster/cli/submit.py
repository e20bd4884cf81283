"""``picluster submit [--nodes N] [--ps P] [--cpus C] [--time T] [--mem M] [--nodelist NODES] [-x NODES] [--name NAME] -- COMMAND...``
or ``picluster submit [options] SCRIPT``: a job script with #SBATCH or SGE #$ lines."""

from pathlib import Path

import click

from picluster.cli.options import Whole, complete_nodes, node_inventory_option, option, other_spelling


class _Submit(click.Command):
    """Remembers whether ``--`` came before the command: ``-- ./a.out`` is a command, as sbatch
    --wrap's, even when it is one file; without ``--`` one file is a job script."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        ctx.meta["submit.dashes"] = "--" in args
        return super().parse_args(ctx, args)


@click.command(cls=_Submit, context_settings={"ignore_unknown_options": False})
@node_inventory_option
@option("--nodes", "-N", type=Whole(1, 4096), default=None, show_default="1, or the --nodelist's", help="Nodes (machines) for the job, its ps nodes among them.")
@option("--ps", type=Whole(0, 4096), default=None, show_default="1", help="Parameter-server (ps) tasks among them.")
@option("--cpus", "-c", type=Whole(1, 1024), default=None,
        show_default="whole nodes", help="CPUs per node, leaving the rest to other jobs.")
@option("--time", "-t", "time_limit", default=None, help="Run-time limit: minutes, MM:SS, HH:MM:SS, D-HH[:MM[:SS]] (SGE's h_rt).")
@option("--mem", default=None, show_default="the CPUs' share", help="Memory per node: 512M, 2G (SGE's mem_free).")
@option("--nodelist", "-w", default=None, metavar="NODESET", shell_complete=complete_nodes,
        help="These nodes, a node set: node[01-04], @workers!node03 (SGE's -l h=).")
@option("--exclude", "-x", "exclude", multiple=True, metavar="NODESET", shell_complete=complete_nodes,
        help="Never these nodes, a node set (as sbatch -x and clush -x); may be given more than once.")
@option("--name", "-J", default=None, show_default="from the command", help="The job's name in the queue (SGE's -N).")
@click.argument("command", nargs=-1, required=True, type=click.UNPROCESSED)
@other_spelling("--workers", "submit counts the job's nodes, its ps nodes among them: give --nodes N (and --ps for how many are ps)")
def submit(inventory, nodes, ps, cpus, time_limit, mem, nodelist, exclude, name, command) -> None:
    """Queue COMMAND, or a job SCRIPT, with Slurm on the inventory's cluster and print its job id (slurm:ID).

    Inside the job, `picluster run`, `train` and `launch` use the nodes Slurm gave it.  A SCRIPT
    (one file, no arguments) keeps its #SBATCH lines; its SGE #$ lines are translated, each said.
    Example: picluster submit --nodes 8 --time 30 -- picluster run montecarlo --samples 1e8 --nodes 8
    """
    from picluster.jobs.slurm import batch, origin, queue, script
    from picluster.util.errors import UsageError

    if inventory is None:
        raise UsageError("submit needs an inventory with a [slurm] table: give --inventory (or PICLUSTER_INVENTORY)")
    job_script = None
    typed = origin.of(inventory) if inventory.slurm is not None else None
    if len(command) == 1 and not click.get_current_context().meta.get("submit.dashes") and Path(command[0]).is_file():
        try:
            data = Path(command[0]).read_bytes()
        except OSError as exc:
            raise UsageError(f"{command[0]}: {exc.strerror}") from None
        if typed is not None:
            job_script = script.read(inventory, command[0], data, typed)
    asked = batch.Asked(nodes=nodes, ps=ps, time=time_limit, mem=mem, nodelist=nodelist, name=name, cpus=cpus, exclude=exclude)
    req = batch.check(inventory, () if job_script else tuple(command), asked, job_script, typed)
    queued = queue.submit(inventory, req)
    job = queued.id
    click.echo(f"slurm:{job}")
    for line in req.said:  # once queued: a refusal stays one line
        click.echo(line, err=True)
    size = "" if job_script else f", {req.nodes} node{'s' if req.nodes != 1 else ''}"
    click.echo(f"queued as Slurm job {job} ({req.name}{size}); "
               f"'picluster jobs slurm:{job}' shows it, 'picluster logs slurm:{job}' its output, "
               f"'picluster cancel slurm:{job}' stops it", err=True)
    if queued.unavailable:
        click.echo(f"note: not available now: {queue.describe(queued.unavailable)}: Slurm starts no job there", err=True)
