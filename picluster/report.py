"""How Monte-Carlo results are shown and kept: text, JSON and the sweep table (thesis Table 5 shape)."""

import csv
import os
import tempfile
from pathlib import Path

from rich.console import Console
from rich.table import Table

from picluster.montecarlo import Estimate

_KIND = {"inventory": "inventory cluster", "local": "local cluster", "temporary": "temporary local cluster"}


def estimate_dict(e: Estimate, times: dict, kind: str) -> dict:
    return {
        "samples": e.samples, "nodes": e.nodes, "seed": e.seed, "hits": e.hits,
        "estimate": e.pi, "abs_error": e.abs_error, "std_error": e.std_error,
        "samples_per_s": e.samples_per_s, "cluster": kind, **times,
    }


def print_estimate(e: Estimate, times: dict, kind: str, console: Console | None = None) -> None:
    console = console or Console(highlight=False, soft_wrap=True)
    sigmas = e.abs_error / e.std_error if e.std_error else 0.0
    console.print(f"Monte-Carlo pi on {e.nodes} worker(s) ({_KIND[kind]}): {e.samples:,} samples, seed {e.seed}")
    console.print(f"  estimate        {e.pi:.9f}")
    console.print(f"  |error|         {e.abs_error:.3e}  ({sigmas:.2f} standard errors)")
    console.print(f"  standard error  {e.std_error:.3e}")
    console.print(f"  throughput      {e.samples_per_s / 1e6:,.1f} M samples/s")
    console.print(
        f"  wall time       cluster start {times['cluster_start_s']:.2f} s + graph build {times['graph_build_s']:.2f} s"
        f" + compute {times['compute_s']:.3f} s = {times['total_s']:.2f} s"
    )


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
    """Written to a temporary file first: an interrupted sweep leaves no half table."""
    path = Path(path)
    fd, tmp = tempfile.mkstemp(prefix=".montecarlo-", suffix=".csv", dir=path.parent if str(path.parent) else ".")
    try:
        with os.fdopen(fd, "w", newline="") as out:
            writer = csv.writer(out)
            writer.writerow(["samples", "nodes", "seconds", "samples_per_s", "estimate", "abs_error", "std_error", "hits", "seed"])
            for r in rows:
                writer.writerow([r.samples, r.nodes, f"{r.compute_s:.6f}", f"{r.samples_per_s:.1f}",
                                 f"{r.pi:.10f}", f"{r.abs_error:.3e}", f"{r.std_error:.3e}", r.hits, r.seed])
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
