"""The thesis's Table 5: compute seconds for every sample count on every node count, as a table and CSV."""

import csv
from pathlib import Path

from rich.console import Console
from rich.table import Table

from picluster.jobs.montecarlo.estimate import Estimate, MonteCarlo
from picluster.model.clusterspec import Layout
from picluster.util import atomic

CSV_COLUMNS = ("samples", "nodes", "seconds", "samples_per_s", "estimate", "abs_error", "std_error", "hits", "seed")


def run_sweep(layout: Layout, sizes: list[int], node_counts: list[int], seed: int) -> list[Estimate]:
    """One graph per node count (building it is not timed), then every size on it."""
    rows: list[Estimate] = []
    for nodes in node_counts:
        with MonteCarlo(layout, nodes) as job:
            rows.extend(job.estimate(size, seed) for size in sizes)
    return rows


def print_sweep(rows: list[Estimate], console: Console | None = None) -> None:
    console = console or Console(highlight=False, soft_wrap=True)
    nodes = sorted({r.nodes for r in rows})
    sizes = list(dict.fromkeys(r.samples for r in rows))
    seconds = {(r.samples, r.nodes): r.compute_s for r in rows}
    table = Table(title="Monte-Carlo pi: compute seconds (rows: samples, columns: worker nodes)")
    table.add_column("samples", justify="right")
    for n in nodes:
        table.add_column(f"{n} node{'s' if n != 1 else ''}", justify="right")
    for size in sizes:
        table.add_row(f"{size:.0e}", *(f"{seconds[(size, n)]:.3f}" if (size, n) in seconds else "-" for n in nodes))
    console.print(table)


def write_sweep_csv(rows: list[Estimate], path: Path) -> None:
    """All or nothing: an interrupted sweep leaves no half table."""
    with atomic.replacing(Path(path), newline="") as out:
        writer = csv.writer(out)
        writer.writerow(CSV_COLUMNS)
        for r in rows:
            writer.writerow([r.samples, r.nodes, f"{r.compute_s:.6f}", f"{r.samples_per_s:.1f}",
                             f"{r.pi:.10f}", f"{r.abs_error:.3e}", f"{r.std_error:.3e}", r.hits, r.seed])
