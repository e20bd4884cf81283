"""``picluster exec NODESET [-x NODESET] [-b|-B] [--sudo] -- COMMAND...``: one command on many
nodes, as clush runs it: each output line after its node's name, or (-b) outputs folded."""

import sys
import threading

import click

from picluster.cli.options import Real, Whole, complete_nodes, exclude_option, node_inventory_option, option
from picluster.model.fanout import FANOUT


@click.command("exec")
@node_inventory_option
@exclude_option
@option("-b", "--gather", "gather", is_flag=True, help="Fold the outputs: nodes with the same output under one header, as clush -b (stderr stays line by line).")
@option("-B", "--gather-all", "gather_all", is_flag=True, help="As -b, with each node's stderr folded after its stdout, as clush -B.")
@option("--sudo", is_flag=True, help="Run it as root (sudo -n: the inventory's user needs password-less sudo).")
@option("--timeout", type=Real(1, 86400), default=60.0, show_default=True, help="Seconds the command may run on each node.")
@option("--fanout", type=Whole(1, 256), default=FANOUT, show_default=True, help="Nodes asked at once.")
@click.argument("nodeset_", metavar="NODESET", shell_complete=complete_nodes)
@click.argument("command", nargs=-1, required=True, type=click.UNPROCESSED)
def execute(inventory, exclude, gather, gather_all, sudo, timeout, fanout, nodeset_, command) -> None:
    """Run COMMAND on every node of NODESET at once, each line of output after its node's name
    as clush prints it, or folded by node set with -b as clush -b.

    Each node's lines come as its command ends ("node03: up 2 days"), its stdout to stdout and
    its stderr to stderr.  With -b, nodes with the same output are under one header.

    NODESET is 'all' or nodes of the inventory in ClusterShell's notation: node[01-04],node07,
    node[01-08]!node03 (and & ^), groups @all @ps @workers @nfs @controller.  COMMAND goes to each
    node's shell as ssh passes it: quote pipes and redirections ('uptime | cut -d, -f1').  Nodes
    whose command exits non-zero, or that cannot be reached, are named on stderr, and the exit
    code is then 1.  Example: picluster exec @workers -x node03 -- uptime
    """
    from picluster.cluster.shell import Ran, run_on
    from picluster.model.fanout import fold
    from picluster.model.nodegroups import select
    from picluster.util.errors import UsageError
    from picluster.views.folded import exit_lines, folded, prefixed

    if inventory is None:
        raise UsageError("'picluster exec' needs an inventory (--inventory, PICLUSTER_INVENTORY or ./picluster.toml)")
    if gather and gather_all:
        raise UsageError("give -b or -B, not both")
    names = select(inventory, nodeset_, exclude)
    lock = threading.Lock()

    def show(node: str, ran: Ran) -> None:  # as each node ends, from its thread; -B shows nothing yet
        with lock:
            for line in [] if gather or gather_all else prefixed(node, ran.stdout):
                click.echo(line)
            for line in [] if gather_all else prefixed(node, ran.stderr):
                click.echo(line, err=True)

    results = run_on(inventory, names, " ".join(command), sudo=sudo, timeout=timeout, fanout=fanout, on_done=show)
    ran = results.succeeded
    if gather or gather_all:
        for line in folded({node: r.output if gather_all else r.stdout for node, r in ran.items()}):
            click.echo(line)
    problems = exit_lines({node: r.code for node, r in ran.items()}) + fold(results.failed)
    for line in problems:
        click.echo(f"picluster: {line}", err=True)
    if problems:
        sys.exit(1)
