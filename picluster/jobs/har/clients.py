"""The training clients, one per worker task, under the one task supervisor (cluster/tasks.py),
each started by its cluster (``Cluster.start_task``) through the tether: a process here (or where
the cluster's launcher runs it), or in a folder of the job's own on its node (``job_folder``).

The coordinator sees ``poll()`` (an exit status as a shell reports it; LOST when the node's SSH
connection is gone), ``terminate()``, ``kill()``, ``wait()``, a label and the local log, which the
client's output streams into as it runs (from a node too).  Each gets its task in ``TF_CONFIG``,
as TFJob's replicas do.  A client in a job folder (an inventory node's
``~/.local/state/picluster/node/runs/<run>``) keeps its own run directory there, which mirror.py
keeps in step with the coordinator's.  The tether is the lifeline: when the coordinator goes away, even by SIGKILL, its
pipe or SSH channel closes (or its heartbeat stops) and the tether stops the client.
"""

import hashlib
import json
import re
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, TextIO

from picluster.cluster import tasks as supervisor
from picluster.cluster.jobfolder import COPY_ERRORS
from picluster.cluster.tasks import LOST, UNKNOWN, Heartbeat, TaskSpec, describe
from picluster.jobs.har.mirror import Mirror
from picluster.jobs.har.rundir import RunDir
from picluster.model.clusterspec import Layout
from picluster.model.fanout import fan_out
from picluster.util.errors import ClusterError

if TYPE_CHECKING:
    from picluster.cluster.base import Cluster
    from picluster.cluster.jobfolder import JobFolder

__all__ = ["LOST", "UNKNOWN", "Client", "Heartbeat", "describe", "start", "stop"]

MODULE = "picluster.jobs.har.process"
DOOR_JOB = "picluster.jobs.har.replica:door_job"
GRACE_S = 5.0  # between the tether's SIGTERM and its SIGKILL: a replica saves nothing on the way out


class Supervised:
    """What the coordinator does with a process under the task supervisor: its output lines into
    its log, its exit status, stopping it."""

    proc: "supervisor.LocalTask | supervisor.NodeTask"
    _out: TextIO
    _lock: threading.Lock

    def _line(self, text: str) -> None:
        with self._lock:
            if not self._out.closed:
                self._out.write(text + "\n")
                self._out.flush()  # the log is read while the client runs (its last lines name a failure)

    # -- process --------------------------------------------------------------------------

    def poll(self) -> int | None:
        return self.proc.poll()

    def beat(self) -> None:
        self.proc.beat()

    def terminate(self) -> None:
        self.proc.stop()  # the lifeline closes: the tether sends SIGTERM, SIGKILL after GRACE_S

    def kill(self) -> None:
        self.proc.kill()

    def wait(self, timeout: float) -> bool:
        return supervisor.wait(self.proc, max(0.0, timeout))

    def fetch_log(self) -> None:
        """Once it has ended: its last output lines into the log (they may still be on their way)."""
        if self.proc.poll() is not None:
            self.proc.reader.join(5.0)


@dataclass(frozen=True)
class Role:
    """A client's part in its launch.  launch: the launch's id; runtime (a cluster that offers it,
    Cluster.worker_runtimes): "resident", inside the node's server through its door (a node whose
    server has none falls back to "shared"); "shared", a process that serves the task in place of
    the node's server; "separate", a process beside it.  resume: the run's last checkpoint is
    restored; beside: the run's evaluator runs beside the coordinator (what a node's chief's mirror
    copies back); chief: this client is the launch's chief (default: task 0; another when task 0
    is lost); chief_moved: the last launch's chief was another task (its checkpoints, mirrored
    here, are the newest)."""

    launch: str = ""
    runtime: str = "separate"
    resume: bool = False
    beside: bool = False
    chief: bool | None = None
    chief_moved: bool = False


class Client(Supervised):
    """A worker task's training client; its output lines go to the run's ``worker-N.log``."""

    def __init__(self, run: RunDir, task: int, tf_config: str | None, cluster: "Cluster | None" = None,
                 node: str = "localhost", role: Role = Role()) -> None:
        """cluster (None: a standalone run, here) starts the client on ``node``: in a folder of the
        job's own there (Cluster.job_folder) whose chief's files are mirrored back, else in the run
        directory here (a launcher's node reads it on a shared file system); ``role``: its part in
        the launch."""
        self.task = task
        self.cluster = cluster
        self.chief = task == 0 if role.chief is None else role.chief
        self.chief_moved = role.chief_moved
        self.runtime = role.runtime
        self.beside = role.beside
        self.node = node
        self.label = f"worker {task}" + (f" on {node}" if node != "localhost" else "")
        self.log = run.worker_log(task)
        self.folder: JobFolder | None = None  # where the client runs on its node, in a job folder of its own
        self.mirror: Mirror | None = None
        argv = ["-m", MODULE, "--launch", role.launch]
        env = {"TF_CONFIG": tf_config} if tf_config is not None else {}
        folder = cluster.job_folder(node, f"runs/{node_run_name(run.path)}") if cluster is not None else None
        self._out = open(self.log, "a", encoding="utf-8")  # noqa: SIM115  (open while the client runs; close() closes it)
        self._lock = threading.Lock()
        try:
            if folder is None:
                env["TF_CPP_MIN_LOG_LEVEL"] = "2"
                spec = TaskSpec(f"worker:{task}", node, self.label, [*argv, "--run-dir", str(run)], str(run), env,
                                launcher=cluster.launcher(node) if cluster is not None else ())
                self.proc = cluster.start_task(spec, GRACE_S, self._line) if cluster is not None else supervisor.start(spec, GRACE_S, self._line)
            else:
                assert cluster is not None
                self.proc = self._start_in(folder, cluster, run, role.resume, argv, env)
        except BaseException:
            self._out.close()
            raise

    def _start_in(self, folder: "JobFolder", cluster: "Cluster", run: RunDir, resume: bool, argv: list[str], env: dict):
        """In the job's folder on its node: the run's files pushed there first, the chief's mirrored back."""
        task = self.task
        self.folder = folder
        try:
            found = folder.make(fresh=fresh_files(resume), door_of=("worker", task))
            if self.runtime == "resident" and found is None:
                self.runtime = "shared"  # a server started by an older picluster, without a door
            self.mirror = mirror = Mirror(folder, run.path, self.beside)
            mirror.push_for_start(chief=self.chief, resume=resume, ours_newer=self.chief_moved)
            prelude = ""
            if self.runtime == "resident" and found is not None:
                # Inside the node's server: no TensorFlow import, nothing to stop or start again.
                argv = ["-m", "picluster.cluster.door", "--door", found, "--", DOOR_JOB, *argv[2:]]
            elif self.runtime == "shared":
                # The client hosts its worker task's server in place of the node's own (stopped first,
                # on its address): one TensorFlow runtime on the node instead of two.
                argv, prelude = [*argv, "--serve"], folder.stop_server("worker", task)
            spec = TaskSpec(f"worker:{task}", folder.node, self.label, [*argv, "--run-dir", "."], folder.word, env, prelude=prelude)
            return cluster.start_task(spec, GRACE_S, self._line)
        except (*COPY_ERRORS, ClusterError) as exc:
            raise ClusterError(f"cannot start worker {task}'s client: {exc}") from None

    # -- the chief's files ------------------------------------------------------------------

    def sync(self, final: bool = False) -> None:
        """Mirror a node's chief's files into the local run directory (records only when they moved on)."""
        if not self.chief or self.mirror is None:
            return
        try:
            self.mirror.follow(final)
        except COPY_ERRORS as exc:
            if final:
                raise ClusterError(f"{self.node}: cannot copy the run's files back: {exc}") from None

    def keep_last(self) -> None:
        """Once a node's chief has stopped: copy back what it saved since the last mirror.

        A run that stops mid-epoch may have checkpointed after the epoch's mirror; the
        resume hint must point at the checkpoint the node will actually resume from.
        """
        if not self.chief or self.mirror is None or self.mirror.complete:  # a finished run's final sync copied everything
            return
        if self.cluster is not None and self.cluster.unreachable(self.node):
            return  # its link is cut: each copy would wait for its timeout; ours is the last mirrored one
        try:
            self.mirror.records()
        except COPY_ERRORS:
            pass  # the node is gone: its copy stays there, ours is the last mirrored one

    def close(self) -> None:
        self.proc.close(wait=self.proc.poll() not in (None, LOST))
        with self._lock:
            self._out.close()


def fresh_files(resume: bool) -> tuple[str, ...]:
    """What a client's node folder must not keep from before: a resumed run's end of the last launch;
    a new run's (or one started over) whole training, whose checkpoints its chief would restore."""
    return (RunDir.RESULT, RunDir.PROGRESS, RunDir.LIVE) if resume else RunDir.TRAINING


def node_run_name(run_dir: Path) -> str:
    """The run's directory name on the nodes: readable, and unique per coordinator path."""
    digest = hashlib.sha1(str(run_dir.resolve()).encode()).hexdigest()[:8]
    return f"{re.sub(r'[^A-Za-z0-9._-]', '_', run_dir.name)[:40]}-{digest}"


@dataclass(frozen=True)
class Placing:
    """How a launch's clients are started: runtime and beside (see Role); members (default: every
    worker) the worker tasks of this launch, the first of them its chief; last_chief: the previous
    launch's chief task in this run (None: none, or this process did not start it)."""

    runtime: str = "separate"
    beside: bool = False
    members: list[int] | None = None
    last_chief: int | None = None


def start(run: RunDir, layout: Layout | None, cluster: "Cluster | None" = None, resume: bool = False, launch: str = "",
          placing: Placing = Placing()) -> list:
    """One client per worker task of ``layout`` on ``cluster`` (None for both: one client, alone,
    here), all at once.  ``layout`` holds only the tasks this run uses."""
    runtime, beside, members, last_chief = placing.runtime, placing.beside, placing.members, placing.last_chief
    if layout is None or cluster is None:
        return [Client(run, 0, None, role=Role(launch))]
    workers = [t for t in layout.workers if members is None or t.index in members]
    chief = workers[0].index
    nodes = [t.node for t in workers]
    # A failure is named by its node where each node has one worker task, else by the task.
    name = (lambda t: t.node) if len(set(nodes)) == len(nodes) else (lambda t: t.label)
    started = fan_out(lambda t: Client(run, t.index, tf_config(layout, t.index, members), cluster, t.node,
                                       Role(launch, runtime, resume, beside, chief=t.index == chief,
                                            chief_moved=last_chief is not None and last_chief != chief)), workers, name=name)
    clients = [started.succeeded[name(t)] for t in workers if name(t) in started.succeeded]  # in task order: the chief first
    if started.failed:
        stop(clients)
        started.raise_failures("starting the training clients")
    return clients


def tf_config(layout: Layout, index: int, members: list[int] | None) -> str:
    """Worker ``index``'s TF_CONFIG: the layout's cluster (the servers as they were started) and,
    when some of its workers sit this launch out, the "members" that train (replica.cluster_and_task)."""
    text = layout.tf_config("worker", index)
    if members is None or list(members) == [t.index for t in layout.workers]:
        return text
    return json.dumps(json.loads(text) | {"members": sorted(members)})


class Evaluator(Supervised):
    """The evaluator beside the coordinator (evaluator.py), a process here under the same
    supervisor as a local client; its output goes to the run's evaluator.log."""

    MODULE = "picluster.jobs.har.evaluator"
    task = -1  # not a worker task: never the chief, never counted among the workers
    remote = None

    def __init__(self, run: RunDir, launch: str, data_dir: str) -> None:
        self.label = "the evaluator"
        self.node = "localhost"
        self.log = run.evaluator_log
        self._out = open(self.log, "a", encoding="utf-8")  # noqa: SIM115  (open while it runs; close() closes it)
        self._lock = threading.Lock()
        self._result = run.result
        argv = ["-m", self.MODULE, "--run-dir", str(run), "--launch", launch, "--data-dir", data_dir]
        try:
            self.proc = supervisor.start(TaskSpec("evaluator", "localhost", "evaluator", argv, str(run), {"TF_CPP_MIN_LOG_LEVEL": "2"}),
                                         GRACE_S, self._line)
        except BaseException:
            self._out.close()
            raise

    def terminate(self) -> None:
        # One that has written the result (its last write) is on its way out: its end is waited
        # for beside the clients' stop (SIGKILL past the grace), not cut short by a signal.
        if not self._result.exists():
            super().terminate()

    def sync(self, final: bool = False) -> None:
        pass  # it writes here

    def keep_last(self) -> None:
        pass

    def close(self) -> None:
        self.proc.close(wait=self.proc.poll() not in (None, LOST))
        with self._lock:
            self._out.close()


def stop_only(clients: list, grace: float = GRACE_S + 2.0) -> None:
    """Stop every client still running (SIGTERM through its tether, SIGKILL after ``grace``
    seconds), leaving their logs and connections to ``stop``."""
    running = [c for c in clients if c.poll() is None]
    for c in running:
        c.terminate()
    deadline = time.monotonic() + grace
    for c in running:
        if not c.wait(deadline - time.monotonic()):
            c.kill()
            c.wait(5.0)


def stop(clients: list, grace: float = GRACE_S + 2.0) -> None:
    """Stop every client still running (its tether: SIGTERM, then SIGKILL), kill what is left after ``grace`` seconds."""
    stop_only(clients, grace)
    for c in clients:
        c.fetch_log()
        c.keep_last()
        c.close()
