"""``picluster cluster up|status|down`` and ``picluster server`` (one task in the foreground)."""

import sys

import click
from rich.console import Console

from picluster.cli.options import Whole, inventory_option, node_inventory_option
from picluster.errors import UsageError
from picluster.views.status import local_tasks_table, node_tasks_table


@click.group()
def cluster() -> None:
    """Start, inspect and stop the ps/worker servers."""


@cluster.command()
@inventory_option
@click.option("--ps", "ps", type=Whole(0, 16), default=1, show_default=True, help="ps tasks (local cluster)")
@click.option("--workers", type=Whole(1, 63), default=2, show_default=True, help="worker tasks (local cluster)")
@click.option("--port", type=Whole(1024, 65535), default=None, help="first port: the tasks' ports, then the agent's (local cluster; default: free ports)")
def up(inventory, ps, workers, port) -> None:
    """Start the servers and wait until every task answers."""
    if inventory is not None:
        from picluster.cluster import nodes
        from picluster.inventory import load_inventory

        inv = load_inventory(inventory)
        started = sum(len(processes) for processes in nodes.up(inv).values())
        _print_remote_status(inv, Console())
        click.echo(f"started {started} process(es)" if started else "already up")
        return
    from picluster.cluster.local import LocalCluster

    running = LocalCluster.open()
    if running is not None and any(s.state != "down" for s in running.status()):
        if len(running.layout.ps) != ps or len(running.layout.workers) != workers:
            raise UsageError(
                f"a local cluster with {len(running.layout.ps)} ps and {len(running.layout.workers)} workers "
                "is already running; 'picluster cluster down' first"
            )
        restarted = running.restart_missing()
        _print_status(running, Console())
        click.echo(f"restarted {len(restarted)} task(s)" if restarted else "already up")
        return
    if running is not None:
        running.stop()  # a stale state file from a cluster that died
    cluster_ = LocalCluster.start(ps=ps, workers=workers, base_port=port)
    _print_status(cluster_, Console())


@cluster.command()
@inventory_option
def status(inventory) -> None:
    """Show each task, its node and whether it answers."""
    if inventory is not None:
        from picluster.inventory import load_inventory

        if not _print_remote_status(load_inventory(inventory), Console()):
            sys.exit(3)
        return
    from picluster.cluster.local import LocalCluster

    running = LocalCluster.open()
    if running is None:
        click.echo("no local cluster (start one with 'picluster cluster up')")
        sys.exit(3)
    _print_status(running, Console())
    if not running.is_up():
        sys.exit(3)


@cluster.command()
@inventory_option
def down(inventory) -> None:
    """Stop every server and leave nothing running."""
    if inventory is not None:
        from picluster.cluster import nodes
        from picluster.inventory import load_inventory

        stopped = nodes.down(load_inventory(inventory))
        click.echo(f"stopped {sum(len(processes) for processes in stopped.values())} process(es) on {len(stopped)} node(s)")
        return
    from picluster.cluster.local import LocalCluster

    running = LocalCluster.open()
    if running is None:
        click.echo("no local cluster running")
        return
    count = sum(1 for s in running.status() if s.state != "down")
    running.stop()
    click.echo(f"stopped {count} task(s)")


def _print_remote_status(inv, console: Console) -> bool:
    from picluster.cluster import nodes

    states = nodes.status(inv)
    console.print(node_tasks_table(states))
    return all(state == "up" for _, state in states)


def _print_status(cluster_, console: Console) -> None:
    from picluster.cluster.local import AGENT

    rows = [(s.task.label, s.task.node, s.task.address, s.pid, s.state, s.log) for s in cluster_.status()]
    if cluster_.agent_port is not None:
        rows.append(("agent", "localhost", f"127.0.0.1:{cluster_.agent_port}", cluster_.pids.get(AGENT),
                     cluster_.agent_state(), cluster_.run_dir / "agent.log"))
    console.print(local_tasks_table(rows))


@click.command()
@node_inventory_option
@click.option("--job", type=click.Choice(["ps", "worker"]), default=None, help="task's job (default: from this node's address)")
@click.option("--task", "index", type=Whole(0), default=None, help="task's index within its job")
@click.option("--threads", type=Whole(0, 256), default=0, help="intra-op threads (0: all cores)")
def server(inventory, job, index, threads) -> None:
    """Run this node's TensorFlow task in the foreground (as the thesis's per-Pi script did)."""
    import os

    from picluster import atomic
    from picluster.clusterspec import from_inventory, local_ipv4_addresses, resolve_tasks
    from picluster.inventory import load_inventory
    from picluster.paths import state_dir

    if inventory is None:
        raise UsageError("'picluster server' needs an inventory (--inventory, PICLUSTER_INVENTORY or ./picluster.toml); without one use 'picluster cluster up'")
    layout = from_inventory(load_inventory(inventory))
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
