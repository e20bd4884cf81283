"""``picluster exec NODESET [-x NODESET] [--sudo] -- COMMAND...``: one command on many nodes, outputs folded."""

import sys

import click

from picluster.cli.options import Real, Whole, exclude_option, node_inventory_option, option
from picluster.model.fanout import FANOUT


@click.command("exec")
@node_inventory_option
@exclude_option
@option("--sudo", is_flag=True, help="Run it as root (sudo -n: the inventory's user needs password-less sudo).")
@option("--timeout", type=Real(1, 86400), default=60.0, show_default=True, help="Seconds the command may run on each node.")
@option("--fanout", type=Whole(1, 256), default=FANOUT, show_default=True, help="Nodes asked at once.")
@click.argument("nodeset_", metavar="NODESET")
@click.argument("command", nargs=-1, required=True, type=click.UNPROCESSED)
def execute(inventory, exclude, sudo, timeout, fanout, nodeset_, command) -> None:
    """Run COMMAND on every node of NODESET at once and print their outputs folded: nodes with the
    same output under one header, as clush -b does.

    NODESET is 'all' or nodes of the inventory in ClusterShell's notation: node[01-04],node07,
    node[01-08]!node03 (and & ^), groups @all @ps @workers @nfs @controller; -x leaves nodes
    out.  COMMAND goes to each node's shell as ssh passes it: quote pipes and redirections
    ('uptime | cut -d, -f1').  Nodes whose command exits non-zero, or that cannot be reached, are
    named on stderr, and the exit code is then 1.  Example: picluster exec all -- uptime
    """
    from picluster.cluster.shell import run_on
    from picluster.model.fanout import fold
    from picluster.model.nodegroups import select
    from picluster.util.errors import UsageError
    from picluster.views.folded import exit_lines, folded

    if inventory is None:
        raise UsageError("'picluster exec' needs an inventory (--inventory, PICLUSTER_INVENTORY or ./picluster.toml)")
    names = select(inventory, nodeset_, exclude)
    results = run_on(inventory, names, " ".join(command), sudo=sudo, timeout=timeout, fanout=fanout)
    ran = results.succeeded
    for line in folded({node: r.output for node, r in ran.items()}):
        click.echo(line)
    problems = exit_lines({node: r.code for node, r in ran.items()}) + fold(results.failed)
    for line in problems:
        click.echo(f"picluster: {line}", err=True)
    if problems:
        sys.exit(1)
