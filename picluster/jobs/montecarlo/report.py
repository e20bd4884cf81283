"""How one Monte-Carlo estimate is shown: text for people, a dict for --json."""

from rich.console import Console

from picluster.jobs.montecarlo.estimate import Estimate


def estimate_dict(e: Estimate, times: dict, kind: str) -> dict:
    return {
        "samples": e.samples, "nodes": e.nodes, "seed": e.seed, "hits": e.hits,
        "estimate": e.pi, "abs_error": e.abs_error, "std_error": e.std_error,
        "samples_per_s": e.samples_per_s, "cluster": kind, **times,
    }


def print_estimate(e: Estimate, times: dict, cluster: str, console: Console | None = None) -> None:
    """``cluster``: how the cluster names itself (Cluster.description), "Slurm job 7's allocation"."""
    console = console or Console(highlight=False, soft_wrap=True)
    sigmas = e.abs_error / e.std_error if e.std_error else 0.0
    console.print(f"Monte-Carlo pi on {e.nodes} node(s) ({cluster}): {e.samples:,} samples, seed {e.seed}")
    console.print(f"  estimate        {e.pi:.9f}")
    console.print(f"  |error|         {e.abs_error:.3e}  ({sigmas:.2f} standard errors)")
    console.print(f"  standard error  {e.std_error:.3e}")
    console.print(f"  throughput      {e.samples_per_s / 1e6:,.1f} M samples/s")
    console.print(
        f"  wall time       cluster start {times['cluster_start_s']:.2f} s + graph build {times['graph_build_s']:.2f} s"
        f" + compute {times['compute_s']:.3f} s = {times['total_s']:.2f} s"
    )
