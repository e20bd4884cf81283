"""``picluster cluster up|status|down`` and ``picluster server`` (one task in the foreground)."""

import sys

import click

from picluster.cli.group import Group
from picluster.cli.options import Real, Whole, inventory_option, node_inventory_option, option, other_spelling
from picluster.cli.output import Form, human, output_options, show
from picluster.util.errors import UsageError
from picluster.views.status import status_listing


@click.group(cls=Group)
def cluster() -> None:
    """Start, inspect and stop the ps/worker servers."""


@cluster.command()
@inventory_option
@option("--ps", "ps", type=Whole(0, 16), default=1, show_default=True, help="Parameter-server (ps) tasks (local cluster).")
@option("--workers", type=Whole(1, 63), default=2, show_default=True, help="Worker tasks (local cluster).")
@option("--port", type=Whole(1024, 65535), default=None, show_default="free ports", help="First port: the tasks' ports, then the agent's (local cluster).")
# 3600: cluster.nodecluster.MAX_TIMEOUT_S, written out so the command line loads without the SSH side.
@option("--timeout", type=Real(1, 3600), default=120.0, show_default=True,
        help="Seconds every task may take to answer (inventory; TensorFlow loads slowly on small boards).")
@other_spelling("--nodes", "cluster up counts tasks: give --workers {value} (and --ps) for the local cluster; an inventory's nodes start as its [roles] say")
def up(inventory, ps, workers, port, timeout) -> None:
    """Start the servers and wait until every task answers."""
    from picluster.cluster import attach

    running, done = attach.up(inventory, ps, workers, port, timeout)
    human(status_listing(running.status(), running.name).human)
    if done is not None:
        click.echo(done)


@cluster.command()
@inventory_option
@output_options
def status(inventory, form: Form) -> None:
    """Show each task, its node and whether it answers; exit 3 when one does not (or none runs)."""
    from picluster.cluster.attach import find

    running = find(inventory, stale=True)  # a stale local cluster: show what is down
    if running is None:
        if form.human:
            click.echo("no local cluster (start one with 'picluster cluster up')")
        else:
            show(status_listing([], None), form)
        sys.exit(3)
    listing = status_listing(running.status(), running.name)
    show(listing, form)
    if not listing.meta["up"]:
        sys.exit(3)


@cluster.command()
@inventory_option
def down(inventory) -> None:
    """Stop every server and leave nothing running."""
    from picluster.cluster import attach

    click.echo(attach.down(inventory))


@click.command()
@node_inventory_option
@option("--job", type=click.Choice(["ps", "worker"]), default=None, show_default="from this node's address", help="The task's job.")
@option("--task", "index", type=Whole(0), default=None, show_default="from this node's address", help="The task's index within its job.")
@option("--threads", type=Whole(0, 256), default=0, show_default="0: all cores", help="Intra-op threads.")
def server(inventory, job, index, threads) -> None:
    """Run this node's TensorFlow task in the foreground (as the thesis's per-Pi script did)."""
    import os

    from picluster.model.clusterspec import from_inventory, local_ipv4_addresses, resolve_tasks
    from picluster.util import atomic
    from picluster.util.paths import state_dir

    if inventory is None:
        raise UsageError("'picluster server' needs an inventory (--inventory, PICLUSTER_INVENTORY or ./picluster.toml); without one use 'picluster cluster up'")
    layout = from_inventory(inventory)
    tasks = resolve_tasks(layout, job, index, local_ipv4_addresses())
    if len(tasks) > 1:
        labels = ", ".join(t.label for t in tasks)
        raise UsageError(f"this node runs several tasks ({labels}); start each with --job and --task")
    task = tasks[0]
    # One file per node, replaced in place: restarting the task leaves no temporary files behind.
    spec = state_dir() / "server" / "cluster.json"
    spec.parent.mkdir(parents=True, exist_ok=True)
    atomic.write_json(spec, {"layout": layout.to_json()})
    argv = [sys.executable, "-m", "picluster.cluster.server", "--cluster-file", str(spec),
            "--job", task.job, "--task", str(task.index), "--threads", str(threads)]
    os.execv(sys.executable, argv)
