"""``picluster top``: one row per node, refreshed every second; q or Ctrl-C quits."""

import sys
import time

import click
from rich.console import Console

from picluster.cli.options import Real, inventory_option, option
from picluster.cli.output import Form, output_options, show


@click.command()
@inventory_option
@option("--once", is_flag=True, help="Print one snapshot and exit (the default when stdout is not a terminal, and with --json or --parsable).")
@option("--interval", type=Real(0.2, 60), default=1.0, show_default=True, help="Seconds between refreshes.")
@output_options
def top(inventory, once, interval, form: Form) -> None:
    """Per-node CPU, load, memory, temperature, network and TensorFlow task states."""
    from picluster.cluster.attach import find
    from picluster.monitor.poll import Monitor
    from picluster.views.panel import nodes_listing, nodes_table

    monitor = Monitor.of(find(inventory))
    console = Console()
    if once or not console.is_terminal or not form.human:
        monitor.poll()
        time.sleep(min(interval, 1.0))  # two scrapes give network rates
        show(nodes_listing(monitor.poll(), title=monitor.title), form)  # a log or a pipe: no width, nothing squeezed
        return
    from rich.live import Live

    from picluster.cli.keys import QuitKey

    with QuitKey() as quit_key, Live(nodes_table(monitor.poll(), title=monitor.title), console=console,
                                     auto_refresh=False, screen=False) as live:
        try:
            while not quit_key.pressed(timeout=interval):
                live.update(nodes_table(monitor.poll(), title=monitor.title), refresh=True)
        except KeyboardInterrupt:
            pass
    sys.stdout.flush()
