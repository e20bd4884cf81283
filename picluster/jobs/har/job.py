"""HAR training as a job: the coordinator's work on the cluster it is given; it reports through the
controller's ``Running`` (jobs/har/progress.py's Follower for its epochs)."""

import os
from collections.abc import Callable

from picluster.cluster.base import Cluster
from picluster.jobs.controller import Job, Running
from picluster.jobs.har import coordinator
from picluster.jobs.har.config import TrainConfig
from picluster.jobs.har.elastic import line as elastic_line
from picluster.jobs.har.rundir import RunDir
from picluster.model import nodeset


class HarJob(Job):
    kind = name = "har"
    title = "train har"
    unit = "epochs"

    def __init__(self, config: TrainConfig, run: RunDir, runtime: str, quiet: bool = False,
                 before: Callable[[], None] | None = None) -> None:
        self.config, self.run, self.runtime = config, run, runtime
        # Done once the cluster answers, before training (the data set put on a cluster's share on
        # first use): a cluster with too few workers or a server down is refused before that work.
        self.before = before
        self.quiet = quiet  # --json: no epoch lines (notes still go to stderr)
        self.mode = "standalone" if config.standalone else config.mode
        self.standalone = config.standalone
        self.workers, self.ps = config.workers, 0 if config.standalone else config.ps
        self.log_dir = str(run)
        if config.deterministic and not config.standalone:
            # The ops run on the servers: a temporary local cluster's inherit this (a running
            # cluster's keep the setting they were started with).
            os.environ["TF_DETERMINISTIC_OPS"] = "1"

    def placement(self, cluster: Cluster | None, job_id: int):
        if cluster is None:
            return "localhost", [("worker:0", "localhost", str(self.run.worker_log(0)))]
        workers = cluster.layout.workers[: self.workers]
        nodes = nodeset.fold(sorted({t.node for t in workers + cluster.layout.ps}))
        return nodes, [(t.label, t.node, str(self.run.worker_log(t.index))) for t in workers]

    def body(self, cluster: Cluster | None, running: Running) -> dict:
        if self.before is not None:
            self.before()
        return coordinator.train(self.config, self.run, cluster, running, self.runtime, quiet=self.quiet)

    def ending(self, result) -> tuple[str, str]:
        """Completed; with what a sync run lost on the way (elastic.py), for `picluster jobs JOB`."""
        lost = result.get("elastic") if isinstance(result, dict) else None
        return "COMPLETED", elastic_line(lost) if lost else ""
