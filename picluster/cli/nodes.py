"""``picluster nodes reboot|upgrade|shutdown NODESET``: day-2 chores on the inventory's nodes."""

import time

import click

from picluster.cli.confirm import yes_option
from picluster.cli.group import Group
from picluster.cli.options import Real, Whole, complete_nodes, exclude_option, node_inventory_option, option
from picluster.util.errors import UsageError

NODESET_HELP = ("NODESET: 'all', or nodes of the inventory in ClusterShell's notation: node[02-04],node07, "
                "node[01-16]!node03, @workers (groups: @all @ps @workers @nfs @controller).  "
                "It asks before it goes on (--yes does not ask): before any shutdown, before a reboot of every node, "
                "and when the set holds the machine this command runs on.")


@click.group(cls=Group)
def nodes() -> None:
    """Reboot, upgrade or shut down the inventory's nodes, in an order that keeps the cluster
    whole: workers first, then the ps nodes, the Slurm controller, the NFS master last."""


def _common(command):
    command = option("--requeue", is_flag=True,
                           help="With Slurm: put the batch jobs running on a node back in the queue instead of waiting for them to end.")(command)
    command = yes_option(command)
    command = option("--dry-run", is_flag=True, help="Show the order and do nothing (and ask nothing).")(command)
    command = exclude_option(command)
    command = node_inventory_option(command)
    return click.argument("nodeset_", metavar="NODESET", shell_complete=complete_nodes)(command)


def _parallel(command):
    return option("--parallel", type=Whole(1, 64), default=1, show_default=True,
                        help="Nodes of one kind taken at once (the NFS master and ps nodes still wait for the others).")(command)


def _timeout(default: float):
    return option("--timeout", type=Real(1, 7200), default=default, show_default=True,
                        help="Seconds each node may take: to come back after a reboot, to go off, to get apt's lock.")


@nodes.command(epilog=NODESET_HELP)
@_common
@_parallel
@_timeout(600.0)
def reboot(nodeset_, inventory, exclude, dry_run, yes, requeue, parallel, timeout) -> None:
    """Reboot nodes one at a time; after each, wait for SSH from its new boot and for its tasks,
    agent and share (what answered before) to answer again; stop at the first that does not.
    With Slurm, each node is drained and its jobs end first, and it is resumed once back."""
    _run("reboot", "rebooted", nodeset_, exclude, inventory, dry_run, yes, requeue, parallel, timeout)


@nodes.command(epilog=NODESET_HELP)
@_common
@_parallel
@_timeout(600.0)
def upgrade(nodeset_, inventory, exclude, dry_run, yes, requeue, parallel, timeout) -> None:
    """apt-get update and dist-upgrade, one node at a time (configuration files kept); a node
    that then asks for a reboot (/var/run/reboot-required) is rebooted and checked back.  With
    Slurm, drained first and resumed after, as for reboot."""
    _run("upgrade", "upgraded", nodeset_, exclude, inventory, dry_run, yes, requeue, parallel, timeout)


@nodes.command(epilog=NODESET_HELP)
@_common
@_timeout(300.0)
def shutdown(nodeset_, inventory, exclude, dry_run, yes, requeue, timeout) -> None:
    """Power nodes off: the workers together, then the ps nodes, the NFS master last, each kind
    off before the next is asked.  With Slurm, each node is drained and its jobs end first; it
    stays drained until 'picluster nodes reboot' brings it back."""
    _run("shut down", "shut down", nodeset_, exclude, inventory, dry_run, yes, requeue, None, timeout)


def _run(verb: str, past: str, pattern: str, exclude: tuple[str, ...], inventory, dry_run: bool, yes: bool, requeue: bool,
         parallel: int | None, timeout: float) -> None:
    import sys

    from picluster.model import nodeset
    from picluster.model.nodegroups import select
    from picluster.upkeep import chores, order
    from picluster.util import verbosity

    if inventory is None:
        raise UsageError(f"'picluster nodes {verb.replace(' ', '')}' needs an inventory (--inventory, PICLUSTER_INVENTORY or ./picluster.toml)")
    names = select(inventory, pattern, exclude)
    here = order.local_nodes(inventory) & set(names)
    if not dry_run:
        _ask(verb, names, here, inventory, yes)
    plan = order.waves(inventory, names, parallel, here)
    how = "each kind at once, off before the next" if parallel is None else f"{parallel} at a time, each checked back before the next"
    click.echo(f"{'would ' + verb if dry_run else verb.capitalize() + ':'} {nodeset.fold(names)} in this order ({how}):")
    for line in order.describe(plan):
        click.echo(f"  {line}")
    if dry_run:
        return
    started = time.monotonic()
    work = {"reboot": chores.reboot, "upgrade": chores.upgrade, "shut down": chores.shutdown}[verb]
    done = work(inventory, plan, timeout, lambda line: verbosity.say(f"  {line}", sys.stdout), requeue=requeue)  # progress: not under -q
    click.echo(f"{past} {len(done)} node(s) in {time.monotonic() - started:.0f} s")


def _ask(verb: str, names: list[str], here: set[str], inventory, yes: bool) -> None:
    """What cannot be undone asks first: a shutdown (no command brings a node back), a reboot of
    every node (every job and task stops at once; a reboot of some is routine and goes on), and any
    chore that takes the machine this command runs on."""
    from picluster.cli.confirm import confirm
    from picluster.model import nodeset

    every = len(names) == len(inventory.nodes)
    if not (verb == "shut down" or (verb == "reboot" and every) or here):
        return
    what = f"{verb} {nodeset.fold(names)}" + (f", every node of {inventory.name}" if every else "")
    if here:
        what += f", {nodeset.fold(here)} among them: the machine this command runs on (it goes last)"
    confirm(what, yes)
