"""Which cluster a job runs on: the inventory's, the running local one, or a temporary local one."""

import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from picluster import nodeset
from picluster.cluster.local import MAX_TASKS, LocalCluster
from picluster.cluster.probe import unanswered
from picluster.clusterspec import Layout, from_inventory
from picluster.errors import ClusterError, UsageError
from picluster.inventory import Inventory, load_inventory
from picluster.monitor.poll import Monitor


@dataclass
class Attached:
    layout: Layout
    kind: str  # "inventory", "local", "temporary"
    start_s: float  # time spent starting servers (0 when they were already up)
    monitor: Monitor | None = None  # the nodes' agents, for live views
    inventory: Inventory | None = None  # the parsed inventory, when the cluster is an inventory's


@contextmanager
def attach(inventory: Path | None, workers: int, ps: int = 0, temporary: bool = True) -> Iterator[Attached]:
    """Yield a cluster with at least ``workers`` workers and ``ps`` ps tasks answering.

    Without a running cluster, a temporary local one is started, unless ``temporary`` is False.
    """
    if workers < 1:
        raise UsageError("--nodes must be at least 1")
    if inventory is not None:
        inv = load_inventory(inventory)
        layout = from_inventory(inv)
        _check_size(layout, workers, ps, "the inventory")
        _check_answering(layout.workers[:workers] + layout.ps[:ps])
        yield Attached(layout, "inventory", 0.0, Monitor.for_inventory(inv), inv)
        return
    running = LocalCluster.open()
    if running is not None and any(s.state != "down" for s in running.status()):
        _check_size(running.layout, workers, ps, "the running local cluster ('picluster cluster down' to drop it)")
        _check_answering(running.layout.workers[:workers] + running.layout.ps[:ps])
        yield Attached(running.layout, "local", 0.0, Monitor.for_local(running))
        return
    if not temporary:
        raise ClusterError("no local cluster is running: start one with 'picluster cluster up' (or give --inventory)")
    if workers + ps > MAX_TASKS:
        raise UsageError(f"--nodes {workers} is more than the local cluster limit of {MAX_TASKS - ps} workers")
    start = time.perf_counter()
    cluster = LocalCluster.start(ps=ps, workers=workers, temporary=True)
    try:
        yield Attached(cluster.layout, "temporary", time.perf_counter() - start, Monitor.for_local(cluster))
    finally:
        cluster.stop()


def _check_size(layout: Layout, workers: int, ps: int, what: str) -> None:
    have = len(layout.workers)
    if workers > have:
        raise UsageError(f"--nodes {workers} is more than the {have} worker{'s' if have != 1 else ''} of {what}")
    if ps > len(layout.ps):
        raise UsageError(f"this job needs {ps} ps task(s) but {what} has {len(layout.ps)}")


def _check_answering(tasks) -> None:
    silent = unanswered(tasks)
    if silent:
        nodes = nodeset.fold(t.node for t in silent)
        labels = ", ".join(t.label for t in silent)
        raise ClusterError(f"{nodes}: TensorFlow server not answering ({labels}); start it with 'picluster cluster up'")


def default_workers(inventory: Path | None) -> int:
    """Workers a job uses when not told: all of the inventory's or the running local cluster's,
    else one per core of this machine (for a temporary local cluster)."""
    if inventory is not None:
        return len(from_inventory(load_inventory(inventory)).workers)
    running = LocalCluster.open()
    if running is not None and running.is_up():
        return len(running.layout.workers)
    return os.cpu_count() or 1
