"""``picluster run montecarlo``: the distributed Monte-Carlo estimate of pi, timed like a benchmark."""

import json
import secrets
import time
from pathlib import Path

import click

from picluster.cli.group import Group
from picluster.cli.options import Count, CountList, inventory_option, option, other_spelling
from picluster.util import atomic
from picluster.util.errors import StorageError, UsageError

MAX_NODES = 64


@click.group(cls=Group)
def run() -> None:
    """Run a job on the cluster (a temporary local one when none is running)."""


@run.command()
@inventory_option
@option("--samples", type=Count(), default="1e8", show_default=True, help="Points to draw, e.g. 1e8.")
@option("--nodes", type=Count(1, MAX_NODES), default=None, show_default="every node with a server; locally one per core",
        help="Nodes that draw points, one server on each: its worker, or its ps where it runs no worker "
             "(the embedded local cluster's worker tasks stand in for nodes).")
@option("--seed", type=Count(0), default=None, show_default="random", help="RNG seed: the same seed and --nodes give the same count.")
@option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
@option("--live/--no-live", default=True, show_default=True, help="Live node panel and progress (on a terminal; else log lines).")
@option("--sweep", type=CountList(Count()), default=None, help="Sample sizes for a table, e.g. 1e7,2e7,5e7,1e8.")
@option("--nodes-list", type=CountList(Count(1, MAX_NODES)), default=None, help="Node counts for --sweep, e.g. 1,2,4,8,16 (as --nodes).")
@option("--csv", "csv_path", type=click.Path(dir_okay=False, path_type=Path), default=Path("montecarlo-sweep.csv"), show_default=True, help="Where --sweep writes its table.")
@other_spelling("--workers", "run montecarlo counts nodes, each drawing on one worker task: give --nodes {value}")
def montecarlo(inventory, samples, nodes, seed, as_json, live, sweep, nodes_list, csv_path) -> None:
    """Estimate pi by drawing points in the unit square on every worker."""
    from picluster.jobs import controller
    from picluster.jobs.montecarlo import report
    from picluster.jobs.montecarlo import sweep as table
    from picluster.jobs.montecarlo.job import MonteCarloJob, SweepJob

    if nodes_list is not None and sweep is None:
        raise UsageError("--nodes-list goes with --sweep")
    if sweep is not None and nodes is not None and nodes_list is not None:
        raise UsageError("give either --nodes or --nodes-list with --sweep, not both")
    if sweep is not None:
        parent = csv_path.parent if str(csv_path.parent) else Path(".")
        if not parent.is_dir():
            raise UsageError(f"--csv {csv_path}: directory {parent} does not exist")
        try:
            atomic.not_a_file(csv_path)
            atomic.check_writable(parent)  # before the sweep, not after it
        except StorageError as exc:
            raise UsageError(f"--csv {csv_path}: {exc}") from None
    seed = secrets.randbits(62) if seed is None else seed

    if sweep is None:
        total_start = time.perf_counter()
        done = controller.run(MonteCarloJob(samples, nodes, seed, show_progress=not as_json),
                              inventory, live=live and not as_json)
        times = {"cluster_start_s": done.cluster_start_s, "graph_build_s": done.graph_build_s,
                 "compute_s": done.estimate.compute_s, "total_s": time.perf_counter() - total_start}
        if as_json:
            click.echo(json.dumps(report.estimate_dict(done.estimate, times, done.cluster_kind)))
        else:
            report.print_estimate(done.estimate, times, done.cluster_description)
        return

    counts = nodes_list or ([nodes] if nodes else None)  # None: every node with a server
    rows, kind = controller.run(SweepJob(sweep, counts, seed), inventory, live=False)
    table.write_sweep_csv(rows, csv_path)
    if as_json:
        click.echo(json.dumps([report.estimate_dict(e, {"compute_s": e.compute_s}, kind) for e in rows]))
    else:
        table.print_sweep(rows)
        click.echo(f"wrote {csv_path}")
