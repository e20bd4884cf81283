"""What every kind of cluster is to a job and to the commands: the one interface they plug into.

A kind of cluster (the persistent local one, the inventory's nodes, the temporary one a job starts
for itself, a Slurm job's allocation) says where its tasks listen (``layout``), whether each
answers (``status``), where its node agents serve their metrics (``agents``), how a job's
process starts on a node (``launcher``, ``stage`` its files or give it a ``job_folder``,
``start_task``), and how it ends (``close``: a temporary cluster and an allocation stop what they
started, the others are left running; ``release`` lets go of what a job opened to reach its
nodes).  Jobs take a ``Cluster`` from ``attach`` and never ask which kind it is.
"""

from abc import ABC, abstractmethod
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from picluster.cluster.containers import reset
from picluster.cluster.probe import unanswered
from picluster.model import nodeset
from picluster.model.clusterspec import Layout, Task
from picluster.model.inventory import Inventory
from picluster.util.errors import ClusterError, UsageError

if TYPE_CHECKING:  # the supervisor brings paramiko: loaded when a job starts a process, not before
    from picluster.cluster.jobfolder import JobFolder
    from picluster.cluster.tasks import LocalTask, NodeTask, TaskSpec


@dataclass(frozen=True)
class TaskState:
    """One process of a cluster as ``cluster status`` shows it: a task, or a node's agent (task None)."""

    label: str  # "worker:3", "agent"
    node: str
    address: str
    state: str  # "up", "starting", "down"
    task: Task | None = None
    pid: int | None = None  # known only where the process runs on this machine
    log: Path | None = None


@dataclass(frozen=True)
class Agent:
    """Where a node's agent serves its metrics (port None: no agent known)."""

    node: str
    roles: tuple[str, ...]
    host: str
    port: int | None


def inventory_file(inventory: Inventory | None) -> str | None:
    """The file ``inventory`` was read from, whole (how records and runs name an inventory's cluster)."""
    source = inventory.source if inventory is not None else None
    return str(source.resolve()) if source is not None else None


class Cluster(ABC):
    kind: str  # "local", "inventory", "temporary", "slurm": what `run --json` and `train` print
    what: str  # how error messages name it: "the inventory", "the running local cluster (...)"
    title: str  # the node panel's title
    layout: Layout
    inventory: Inventory | None = None  # the parsed inventory, for a cluster of inventory nodes
    start_s: float = 0.0  # seconds spent starting its servers for this job (0: they were running)
    # Whether the machine the job's coordinator runs on has CPU to spare beside the job's tasks
    # (a training's evaluator): not where the coordinator runs on one of the cluster's own nodes.
    coordinator_spare: bool = True
    # How a training client may run beside a worker node's own server (train har --worker-runtime):
    # "separate", a process of its own, on every kind; a kind whose nodes run servers with doors and
    # pid files (jobfolder.py) also offers "resident" and "shared".  The first is what "auto" picks.
    worker_runtimes: tuple[str, ...] = ("separate",)

    @property
    def description(self) -> str:
        """How a job's report names the cluster it ran on: "inventory cluster"; a kind says more
        where its kind alone is not clear."""
        return f"{self.kind} cluster"

    @property
    def inventory_file(self) -> str | None:
        """The inventory file its nodes come from (what a resumed training goes back to), or None."""
        return inventory_file(self.inventory)

    @property
    def name(self) -> str:
        """What a job record names as its cluster: the inventory file, or "local"."""
        return self.inventory_file or "local"

    @abstractmethod
    def status(self) -> list[TaskState]:
        """Every task (and the agents this machine runs), and whether it answers."""

    @abstractmethod
    def agents(self) -> list[Agent]:
        """Where the nodes' agents serve: what the live views and `top` scrape."""

    def task_states(self) -> dict[str, dict[str, str]]:
        """node -> {"worker:0": "up", ...}: the tasks column of the node panel."""
        out: dict[str, dict[str, str]] = {}
        for state in self.status():
            if state.task is not None:
                out.setdefault(state.node, {})[state.label] = state.state
        return out

    def repair(self) -> None:
        """Start again the tasks that are down (a job restarting a worker server, or putting back
        the servers its clients stood in for)."""
        raise ClusterError(f"{self.what} cannot restart its tasks")

    def launcher(self, node: str) -> tuple[str, ...]:
        """What starts a job's process on ``node`` from this machine: () runs it here (the local
        kinds; an inventory's nodes are reached over SSH instead), a Slurm job's ``srun``."""
        return ()

    # -- a job's own processes on the nodes (launch, train) ---------------------------------

    def stage(self, files: list[tuple[str, Path]], folder: Path, name: str, nodes: list[str], job: str) -> dict[str, str] | None:
        """Put a job's ``files`` (relative name, file here) where its processes on ``nodes`` run
        them, under the job's ``name`` (``job``: how messages name it, "job 12"); per node, that
        folder as a shell word (its ``cd``).  None:
        they run in ``folder`` as it is on this machine, which every node that runs them from
        elsewhere (a launcher) must then see, or one line says which does not."""
        if any(self.launcher(node) for node in nodes):
            self.check_shared({"the script's folder": folder.resolve()})
        return None

    def start_task(self, spec: "TaskSpec", grace: float, on_line) -> "LocalTask | NodeTask":
        """A job's process, started through the one supervisor: here, or where ``spec.launcher`` says."""
        from picluster.cluster import tasks

        return tasks.start(spec, grace, on_line)

    def job_folder(self, node: str, name: str) -> "JobFolder | None":
        """A folder of the job's own on ``node`` (``name``, relative: the same on every node and
        unique per coordinator) for its process there to run in, over this cluster's connection to
        the node (opened here, closed by ``release``).  None: the process runs in this machine's
        folders, which every node that runs it from elsewhere (a launcher) must see (check_shared)."""
        return None

    def unreachable(self, node: str) -> bool:
        """Whether ``node``, where the job reached a process of its own, stopped answering at all (a
        cut cable, a crash): its task is then not waited for; it stops itself."""
        return False

    def release(self) -> None:  # noqa: B027  (most kinds open nothing per job)
        """Let go of what the job opened to reach its nodes (connections); the servers stay."""

    def shared_copy(self, relative: str) -> Path | None:
        """A copy on this machine of the file ``relative`` on the share the nodes read, for work
        beside the coordinator (the HAR evaluator); None where the nodes read this machine's own
        files, or the share is mounted here (data_dir names them)."""
        return None

    def check_shared(self, paths: dict[str, Path]) -> None:  # noqa: B027  (here: this machine's files)
        """That every node the job starts processes on sees these paths ({what: path}); else
        one line naming the node and the path.  Nothing to check where they run here, or in
        folders of the job's own (job_folder)."""

    def forget(self, containers: list[str]) -> None:
        """Drop what a job left in these resource containers on the ps tasks (its variables):
        servers that stay up between jobs keep them until they exit otherwise.  Raises
        containers.Unreachable when the first ps does not answer, OSError when it refuses."""
        ps = self.layout.ps
        if ps:
            reset(ps[0].address, containers)

    def close(self) -> None:  # noqa: B027  (most kinds keep running: nothing to do)
        """The job is done with the cluster: a temporary one stops; the others keep running."""

    def require(self, workers: int, ps: int, option: str = "--workers", per_node: bool = False) -> None:
        """At least ``workers`` workers and ``ps`` ps tasks, each answering; else one line naming
        them (``option``: the job's own option for its workers, named in the answer).  With
        ``per_node``, ``workers`` counts nodes with a server of either job (Layout.one_per_node)."""
        what = self.what
        pool = self.layout.one_per_node() if per_node else self.layout.workers
        have = len(pool)
        if workers > have:
            if per_node:
                raise UsageError(f"{option} {workers} is more than the {have} node{'s' if have != 1 else ''} with a TensorFlow server of {what}: "
                                 f"give {option} {have} or fewer")
            raise UsageError(f"{option} {workers} is more than the {have} worker{'s' if have != 1 else ''} of {what}: give {option} {have} "
                             "or fewer (with an inventory, [roles] worker may list the ps nodes too: docs/cluster.md)")
        if ps > len(self.layout.ps):
            raise UsageError(f"this job needs {ps} ps task(s) but {what} has {len(self.layout.ps)}")
        silent = unanswered(pool[:workers] + [t for t in self.layout.ps[:ps] if t not in pool[:workers]])
        if silent:
            nodes = nodeset.fold(t.node for t in silent)
            labels = ", ".join(t.label for t in silent)
            raise ClusterError(f"{nodes}: TensorFlow server not answering ({labels}); start it with 'picluster cluster up'")
