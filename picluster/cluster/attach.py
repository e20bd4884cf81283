"""Which cluster a job runs on: the Slurm allocation it runs in, the inventory's nodes, the running
local cluster, or a temporary one.

``find`` names the cluster a command works on without starting anything; ``attach`` gives a job
a cluster that has the tasks it needs, starting the allocation's servers or a temporary local
cluster when that is what it gets, and stopping them when the job ends.  Both take the parsed
inventory (``None``: this machine).  Inside a Slurm job the allocation wins over an inventory:
the queue gave the job those nodes and no others.
"""

import os
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from functools import cached_property
from pathlib import Path

from picluster.cluster.allocation import Allocation, job_id, shared_dir, sizes, work_folder
from picluster.cluster.base import Cluster, inventory_file
from picluster.cluster.inprocess import InProcessCluster
from picluster.cluster.local import MAX_TASKS, LocalCluster
from picluster.cluster.nodecluster import NodeCluster
from picluster.model.clusterspec import from_inventory
from picluster.model.inventory import Inventory
from picluster.util.errors import ClusterError, UsageError


def find(inventory: Inventory | None, stale: bool = False) -> Cluster | None:
    """The inventory's nodes, else the running local cluster, else None.  With ``stale``, also a
    local cluster whose tasks all died (to show what is down)."""
    if inventory is not None:
        return NodeCluster(inventory)
    running = LocalCluster.open()
    return running if running is not None and (stale or running.is_running()) else None


def up(inventory: Inventory | None, ps: int, workers: int, port: int | None, timeout: float) -> tuple[Cluster, str | None]:
    """`cluster up`: the inventory's servers, or the persistent local cluster (``ps``, ``workers``,
    first ``port``), started where they are down; the cluster and what was done, in words (None:
    a new local cluster, whose table says it all)."""
    if inventory is not None:
        nodes = NodeCluster(inventory)
        started = sum(len(processes) for processes in nodes.up(timeout).values())
        return nodes, f"started {started} process(es)" if started else "already up"
    running = LocalCluster.open()
    if running is not None and running.is_running():
        if len(running.layout.ps) != ps or len(running.layout.workers) != workers:
            raise UsageError(f"a local cluster with {len(running.layout.ps)} ps and {len(running.layout.workers)} workers "
                             "is already running; 'picluster cluster down' first")
        restarted = running.restart_missing()
        return running, f"restarted {len(restarted)} task(s)" if restarted else "already up"
    if running is not None:
        running.stop()  # a state file left by a cluster that died
    return LocalCluster.start(ps=ps, workers=workers, base_port=port), None


def down(inventory: Inventory | None) -> str:
    """`cluster down`: every server of the inventory's nodes, or of the local cluster, stopped;
    what was stopped, in words."""
    if inventory is not None:
        stopped = NodeCluster(inventory).down()
        return f"stopped {sum(len(processes) for processes in stopped.values())} process(es) on {len(stopped)} node(s)"
    running = LocalCluster.open()
    if running is None:
        return "no local cluster running"
    count = sum(1 for s in running.status() if s.task is not None and s.state != "down")
    running.stop()
    return f"stopped {count} task(s)"


@contextmanager
def attach(inventory: Inventory | None, workers: int, ps: int = 0, temporary: bool = True,
           meanwhile: Callable[[], None] | None = None, option: str = "--workers", per_node: bool = False) -> Iterator[Cluster]:
    """A cluster with at least ``workers`` workers and ``ps`` ps tasks answering.

    Without a running cluster, a temporary local one is started (unless ``temporary`` is False)
    and stopped when the block ends; ``meanwhile`` runs while its servers start.  ``option`` is
    the job's command-line option for its workers (--workers, or Monte-Carlo's --nodes), named
    when the cluster has too few.  With ``per_node`` a node's ps counts where it runs no worker
    (Cluster.require); a temporary local cluster starts ``workers`` workers either way.
    """
    if workers < 1:
        raise UsageError(f"{option} must be at least 1")
    allocation = Allocation.here()
    if allocation is not None:
        have, has_ps = len(allocation.layout.one_per_node() if per_node else allocation.layout.workers), len(allocation.layout.ps)
        if workers > have or ps > has_ps:
            what = "node(s) with a server" if per_node else "worker(s)"
            raise UsageError(f"this job needs {workers} {what} and {ps} ps task(s) but {allocation.what} has "
                             f"{have} and {has_ps}: submit it with more --nodes (or --ps)")
        start = time.perf_counter()
        try:
            allocation.start()
            allocation.start_s = time.perf_counter() - start
            allocation.require(workers, ps, option, per_node)
            yield allocation
        finally:
            allocation.close()
        return
    cluster = find(inventory)
    if cluster is not None:
        cluster.require(workers, ps, option, per_node)
        yield cluster
        return
    if not temporary:
        raise ClusterError("no local cluster is running: start one with 'picluster cluster up' (or give --inventory)")
    if workers + ps > MAX_TASKS:
        raise UsageError(f"{option} {workers} is more than the local cluster limit of {MAX_TASKS - ps} workers")
    start = time.perf_counter()
    # The servers in one process (TensorFlow imported once); PICLUSTER_TEMPORARY_SERVERS=per-task
    # starts one process per task as a persistent local cluster does, to compare the two.
    kind = LocalCluster if os.environ.get("PICLUSTER_TEMPORARY_SERVERS") == "per-task" else InProcessCluster
    cluster = kind.start(ps=ps, workers=workers, temporary=True, meanwhile=meanwhile)
    cluster.start_s = time.perf_counter() - start
    try:
        yield cluster
    finally:
        cluster.close()


@dataclass(frozen=True)
class Place:
    """Where a job will run, known before anything starts (``attach`` then gives the cluster
    itself), and the defaults that follow from it.  Inside a Slurm job the allocation wins over an
    inventory, as in ``attach``."""

    name: str  # what the job's record names as its cluster (the attached cluster's ``name``)
    worker_runtimes: tuple[str, ...]  # what a training's --worker-runtime may choose there
    workers: int | None = None  # a training's worker tasks when not told, beside its ps (None: the job's own default)
    ps: int | None = None
    share: Path | None = None  # the folder every node reads at this path (an inventory's data_dir, a Slurm job's share)
    runs: Path | None = None  # where a job's run folders go when not told (None: this machine's state)
    run_suffix: str = ""  # after a run folder's time stamp: the Slurm job's id
    queued: bool = False  # inside a Slurm job: the nodes' runtime has no offline source to prepare data from
    data_on_nodes: bool = False  # the nodes read their own copy of the data (an inventory's share): none here to check
    every_worker: int | None = None  # counted from the inventory or allocation (None: this machine's, when asked)
    every_node: int | None = None  # every node with a server (Layout.one_per_node)

    @cached_property
    def all_workers(self) -> int:
        """A launch's workers when not told: every worker there.  On this machine, the running
        local cluster's, else one per core (a temporary cluster's), looked for only when asked."""
        if self.every_worker is not None:
            return self.every_worker
        running = LocalCluster.open()
        return len(running.layout.workers) if running is not None and running.is_up() else os.cpu_count() or 1

    @property
    def nodes(self) -> int:
        """A job any server can run (Monte-Carlo) when not told: every node with a server."""
        return self.every_node if self.every_node is not None else self.all_workers


def place(inventory: Inventory | None) -> Place:
    """Where a job given ``inventory`` (None: this machine) runs, and its defaults."""
    slurm = sizes()
    if slurm is not None:
        # A worker on each node without a ps, the data and the runs on the share every node of the job mounts.
        nodes, ps = slurm
        share, job = shared_dir(), job_id()
        base = Place(f"slurm:{job}", Cluster.worker_runtimes, max(1, nodes - ps), ps, share,
                     work_folder(share) / "runs" if share is not None else None, f"-slurm{job}", queued=True,
                     every_worker=nodes, every_node=nodes)
    elif inventory is not None:
        base = Place(inventory_file(inventory) or "local", NodeCluster.worker_runtimes, len(inventory.workers), len(inventory.ps),
                     every_worker=len(inventory.workers), every_node=len(from_inventory(inventory).one_per_node()))
    else:
        return Place("local", Cluster.worker_runtimes)
    if inventory is None:
        return base
    # An inventory's nodes mount its share at data_dir (a Slurm job's given share is that same folder).
    return replace(base, share=Path(inventory.data_dir), data_on_nodes=True)
