"""``picluster run montecarlo``: the distributed Monte-Carlo estimate of pi, timed like a benchmark."""

import json
import os
import secrets
import time
from pathlib import Path

import click

from picluster.cli.options import Count, CountList, inventory_option
from picluster.errors import UsageError

MAX_NODES = 64


@click.group()
def run() -> None:
    """Run a job on the cluster (a temporary local one when none is running)."""


@run.command()
@inventory_option
@click.option("--samples", type=Count(), default="1e8", show_default=True, help="points to draw, e.g. 1e8")
@click.option("--nodes", type=Count(1, MAX_NODES), default=None, help="worker tasks to use [default: all workers, or one per core locally]")
@click.option("--seed", type=Count(0), default=None, help="RNG seed: the same seed and --nodes give the same count [default: random]")
@click.option("--json", "as_json", is_flag=True, help="print the result as JSON")
@click.option("--live/--no-live", default=True, show_default=True, help="live node panel and progress (on a terminal; else log lines)")
@click.option("--sweep", type=CountList(Count()), default=None, help="sample sizes for a table, e.g. 1e7,2e7,5e7,1e8")
@click.option("--nodes-list", type=CountList(Count(1, MAX_NODES)), default=None, help="node counts for --sweep, e.g. 1,2,4,8,16")
@click.option("--csv", "csv_path", type=click.Path(dir_okay=False, path_type=Path), default=Path("montecarlo-sweep.csv"), show_default=True, help="where --sweep writes its table")
def montecarlo(inventory, samples, nodes, seed, as_json, live, sweep, nodes_list, csv_path) -> None:
    """Estimate pi by drawing points in the unit square on every worker."""
    from picluster import report
    from picluster.connect import attach
    from picluster.live import JobDisplay
    from picluster.montecarlo import MonteCarlo

    if nodes_list is not None and sweep is None:
        raise UsageError("--nodes-list goes with --sweep")
    if sweep is not None and nodes is not None and nodes_list is not None:
        raise UsageError("give either --nodes or --nodes-list with --sweep, not both")
    if sweep is not None:
        parent = csv_path.parent if str(csv_path.parent) else Path(".")
        if not parent.is_dir():
            raise UsageError(f"--csv {csv_path}: directory {parent} does not exist")
    seed = secrets.randbits(62) if seed is None else seed

    if sweep is None:
        want = nodes or _default_nodes(inventory)
        total_start = time.perf_counter()
        with attach(inventory, want) as cluster:
            build_start = time.perf_counter()
            with MonteCarlo(cluster.layout, want) as job:
                build_s = time.perf_counter() - build_start
                if as_json:
                    estimate = job.estimate(samples, seed)
                else:
                    with JobDisplay(f"montecarlo on {want} worker(s)", "samples", cluster.monitor, live) as display:
                        estimate = job.estimate(samples, seed, progress=display.update)
        times = {"cluster_start_s": cluster.start_s, "graph_build_s": build_s,
                 "compute_s": estimate.compute_s, "total_s": time.perf_counter() - total_start}
        if as_json:
            click.echo(json.dumps(report.estimate_dict(estimate, times, cluster.kind)))
        else:
            report.print_estimate(estimate, times, cluster.kind)
        return

    counts = nodes_list or [nodes or _default_nodes(inventory)]
    rows = []
    with attach(inventory, max(counts)) as cluster:
        for n in counts:
            with MonteCarlo(cluster.layout, n) as job:
                for size in sweep:
                    rows.append(job.estimate(size, seed))
    report.write_sweep_csv(rows, csv_path)
    if as_json:
        click.echo(json.dumps([report.estimate_dict(e, {"compute_s": e.compute_s}, cluster.kind) for e in rows]))
    else:
        report.print_sweep(rows)
        click.echo(f"wrote {csv_path}")


def _default_nodes(inventory) -> int:
    if inventory is not None:
        from picluster.clusterspec import from_inventory
        from picluster.inventory import load_inventory

        return len(from_inventory(load_inventory(inventory)).workers)
    from picluster.local import LocalCluster

    running = LocalCluster.open()
    if running is not None and running.is_up():
        return len(running.layout.workers)
    return os.cpu_count() or 1
