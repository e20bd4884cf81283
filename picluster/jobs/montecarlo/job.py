"""Monte-Carlo pi as a job: one estimate, or the Table 5 sweep, on the cluster it is given."""

import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

from picluster.cluster.base import Cluster
from picluster.jobs.controller import Job, Running
from picluster.jobs.montecarlo.estimate import Estimate, MonteCarlo, coordinator_tensorflow
from picluster.jobs.montecarlo.sweep import run_sweep
from picluster.model import nodeset

if TYPE_CHECKING:
    from picluster.cluster.attach import Place


@dataclass
class Estimated:
    estimate: Estimate
    graph_build_s: float
    cluster_start_s: float
    cluster_kind: str
    cluster_description: str


class MonteCarloJob(Job):
    kind = name = "montecarlo"
    unit = "samples"
    workers_option = "--nodes"  # the card's `--nodes 8`: eight nodes, each drawing on one server
    per_node = True

    def __init__(self, samples: int, workers: int | None, seed: int, show_progress: bool = True) -> None:
        """``workers``: the nodes to draw on (None: every node with a server where it runs)."""
        self.samples, self.seed = samples, seed
        self.asked = workers
        self.show_progress = show_progress

    def placed(self, where: "Place") -> None:
        self.workers = self.asked or where.nodes
        self.title = f"montecarlo on {self.workers} node(s)"

    def placement(self, cluster: Cluster | None, job_id: int):
        assert cluster is not None
        return nodeset.fold(sorted({t.node for t in cluster.layout.one_per_node()[: self.workers]})), []

    def warm_up(self) -> None:
        _import_tensorflow_early()

    def body(self, cluster: Cluster | None, running: Running) -> Estimated:
        assert cluster is not None
        build_start = time.perf_counter()
        with MonteCarlo(cluster.layout, self.workers) as job:
            build_s = time.perf_counter() - build_start
            estimate = job.estimate(self.samples, self.seed, progress=running.progress if self.show_progress else None)
        return Estimated(estimate, build_s, cluster.start_s, cluster.kind, cluster.description)


class SweepJob(Job):
    """The thesis's Table 5: every sample count on every node count (one graph per node count)."""

    kind = name = "montecarlo"
    mode = "sweep"
    workers_option = "--nodes"
    per_node = True

    def __init__(self, sizes: list[int], node_counts: list[int] | None, seed: int) -> None:
        """``node_counts`` None: every node with a server where it runs."""
        self.sizes, self.seed = sizes, seed
        self.asked = node_counts

    def placed(self, where: "Place") -> None:
        self.node_counts = self.asked or [where.nodes]
        self.workers = max(self.node_counts)

    def placement(self, cluster: Cluster | None, job_id: int):
        assert cluster is not None
        return nodeset.fold(sorted({t.node for t in cluster.layout.one_per_node()[: self.workers]})), []

    def warm_up(self) -> None:
        _import_tensorflow_early()

    def body(self, cluster: Cluster | None, running: Running) -> tuple[list[Estimate], str]:
        assert cluster is not None
        return run_sweep(cluster.layout, self.sizes, self.node_counts, self.seed), cluster.kind


def _import_tensorflow_early() -> None:
    """The graph is built here, in the coordinator: import TensorFlow while a temporary cluster's
    servers start (they import theirs meanwhile).  A broken install is left for the servers'
    start to report, with their logs (and for the body's own import, should they start)."""
    try:
        coordinator_tensorflow()
    except ImportError:
        pass
