"""The training clients, one per worker task, under the one task supervisor (cluster/tasks.py):
a process here, or on its node over SSH, each started through the tether.

The coordinator sees ``poll()`` (an exit status as a shell reports it; LOST when the node's SSH
connection is gone), ``terminate()``, ``kill()``, ``wait()``, a label and the local log, which the
client's output streams into as it runs (from a node too).  Each gets its task in ``TF_CONFIG``,
as TFJob's replicas do.  A node's client keeps its own run directory on the node
(``~/.local/state/picluster/node/runs/<run>``), which mirror.py keeps in step with the
coordinator's.  The tether is the lifeline: when the coordinator goes away, even by SIGKILL, its
pipe or SSH channel closes (or its heartbeat stops) and the tether stops the client.
"""

import hashlib
import re
import shlex
import threading
import time
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, TextIO

from picluster.cluster import tasks as supervisor
from picluster.cluster.tasks import LOST, UNKNOWN, Heartbeat, TaskSpec, describe
from picluster.clusterspec import Layout
from picluster.errors import ClusterError
from picluster.fanout import fan_out
from picluster.jobs.har.mirror import COPY_ERRORS, Mirror
from picluster.jobs.har.rundir import RunDir

if TYPE_CHECKING:
    from picluster.cluster.ssh import Remote

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


class Client(Supervised):
    """A worker task's training client; its output lines go to the run's ``worker-N.log``."""

    def __init__(self, run: RunDir, task: int, tf_config: str | None, launch: str, runtime: str = "separate",
                 inv=None, node=None, resume: bool = False, launched: tuple[str, tuple[str, ...]] | None = None,
                 beside: bool = False) -> None:
        """node: an inventory node, reached over SSH; launched: (node, launcher), a process started
        here that runs on that node (srun in a Slurm job, the run directory on a shared file system).
        runtime (inventory nodes): "resident", inside the node's server through its door (a node
        whose server has none falls back to "shared"); "shared", a process that serves the task in
        place of the node's server; "separate", a process beside it.  beside: the run's evaluator
        runs beside the coordinator (what a node's chief's mirror copies back)."""
        self.task = task
        self.runtime = runtime
        self.beside = beside
        self.node = node.name if node is not None else launched[0] if launched else "localhost"
        self.label = f"worker {task}" + (f" on {self.node}" if self.node != "localhost" else "")
        self.log = run.worker_log(task)
        self.remote: Remote | None = None
        self.mirror: Mirror | None = None
        argv = ["-m", MODULE, "--launch", launch]
        env = {"TF_CONFIG": tf_config} if tf_config is not None else {}
        self._out = open(self.log, "a", encoding="utf-8")  # noqa: SIM115  (open while the client runs; close() closes it)
        self._lock = threading.Lock()
        try:
            if node is None:
                env["TF_CPP_MIN_LOG_LEVEL"] = "2"
                spec = TaskSpec(f"worker:{task}", self.node, self.label, [*argv, "--run-dir", str(run)], str(run), env,
                                launcher=launched[1] if launched else ())
                self.proc = supervisor.start(spec, GRACE_S, self._line)
            else:
                self.proc = self._start_on_node(inv, node, run, task, resume, argv, env)
        except BaseException:
            self._out.close()
            raise

    def _start_on_node(self, inv, node, run: RunDir, task: int, resume: bool, argv: list[str], env: dict):
        from picluster.cluster.door import door_path
        from picluster.cluster.nodes import RUN_DIR, node_python, open_node, stop_task_command

        remote_dir = PurePosixPath(RUN_DIR) / "runs" / node_run_name(run.path)  # relative to the user's home
        self.remote = remote = open_node(inv, node)
        try:
            home = f"\"$HOME\"/{shlex.quote(str(remote_dir))}"
            door = door_path(f"$HOME/{RUN_DIR}", "worker", task)
            found = remote.out(f"umask 077 && mkdir -p {home} && cd {home} && rm -f result.json progress.json live.json && "
                               f"if [ -S \"{door}\" ]; then echo \"{door}\"; fi")
            if self.runtime == "resident" and not found:
                self.runtime = "shared"  # a server started by an older picluster, without a door
            self.mirror = mirror = Mirror(remote.conn.sftp(), remote_dir, run.path, self.beside)
            mirror.push_for_start(chief=task == 0, resume=resume)
            prelude = ""
            if self.runtime == "resident":
                # Inside the node's server: no TensorFlow import, nothing to stop or start again.
                argv = ["-m", "picluster.cluster.door", "--door", found, "--", DOOR_JOB, *argv[2:]]
            elif self.runtime == "shared":
                # The client hosts its worker task's server in place of the node's own (stopped first,
                # on its address): one TensorFlow runtime on the node instead of two.
                argv, prelude = [*argv, "--serve"], stop_task_command("worker", task)
            spec = TaskSpec(f"worker:{task}", node.name, self.label, [*argv, "--run-dir", "."], home, env, prelude=prelude)
            return supervisor.start(spec, GRACE_S, self._line, remote, node_python(inv))
        except (*COPY_ERRORS, ClusterError) as exc:
            remote.close()
            raise ClusterError(f"cannot start worker {task}'s client: {exc}") from None

    # -- the chief's files ------------------------------------------------------------------

    def sync(self, final: bool = False) -> None:
        """Mirror a node's chief's files into the local run directory (records only when they moved on)."""
        if self.task != 0 or self.mirror is None:
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
        if self.task != 0 or self.mirror is None or self.mirror.complete:  # a finished run's final sync copied everything
            return
        try:
            self.mirror.records()
        except COPY_ERRORS:
            pass  # the node is gone: its copy stays there, ours is the last mirrored one

    def close(self) -> None:
        self.proc.close(wait=self.proc.poll() not in (None, LOST))
        with self._lock:
            self._out.close()
        if self.remote is not None:
            self.remote.close()


def node_run_name(run_dir: Path) -> str:
    """The run's directory name on the nodes: readable, and unique per coordinator path."""
    digest = hashlib.sha1(str(run_dir.resolve()).encode()).hexdigest()[:8]
    return f"{re.sub(r'[^A-Za-z0-9._-]', '_', run_dir.name)[:40]}-{digest}"


def start(run: RunDir, layout: Layout | None, inventory=None, resume: bool = False, launch: str = "",
          runtime: str = "separate", launcher=None, beside: bool = False) -> list:
    """One client per worker task of ``layout`` (None: one client, alone): over SSH on inventory
    nodes, else started here (``launcher(node)``: on the task's node, as a Slurm job's srun does).
    ``layout`` holds only the tasks this run uses.  runtime (inventory nodes only), beside: see Client."""
    if layout is None:
        return [Client(run, 0, None, launch)]
    workers = layout.workers
    if inventory is None:
        clients: list[Client] = []
        try:
            for t in workers:
                prefix = launcher(t.node) if launcher is not None else ()
                clients.append(Client(run, t.index, layout.tf_config("worker", t.index), launch,
                                      launched=(t.node, prefix) if prefix else None))
        except BaseException:
            stop(clients)
            raise
        return clients
    nodes = {n.name: n for n in inventory.nodes}
    started = fan_out(
        lambda t: Client(run, t.index, layout.tf_config("worker", t.index), launch, runtime, inventory, nodes[t.node], resume,
                         beside=beside),
        workers,
        name=lambda t: t.node,  # one worker task per node
    )
    clients = list(started.succeeded.values())
    if started.failed:
        stop(clients)
        started.raise_failures("starting the training clients")
    return clients


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
        argv = ["-m", self.MODULE, "--run-dir", str(run), "--launch", launch, "--data-dir", data_dir]
        try:
            self.proc = supervisor.start(TaskSpec("evaluator", "localhost", "evaluator", argv, str(run), {"TF_CPP_MIN_LOG_LEVEL": "2"}),
                                         GRACE_S, self._line)
        except BaseException:
            self._out.close()
            raise

    def sync(self, final: bool = False) -> None:
        pass  # it writes here

    def keep_last(self) -> None:
        pass

    def close(self) -> None:
        self.proc.close(wait=self.proc.poll() not in (None, LOST))
        with self._lock:
            self._out.close()


def stop(clients: list, grace: float = GRACE_S + 2.0) -> None:
    """Stop every client still running (its tether: SIGTERM, then SIGKILL), kill what is left after ``grace`` seconds."""
    running = [c for c in clients if c.poll() is None]
    for c in running:
        c.terminate()
    deadline = time.monotonic() + grace
    for c in running:
        if not c.wait(deadline - time.monotonic()):
            c.kill()
            c.wait(5.0)
    for c in clients:
        c.fetch_log()
        c.keep_last()
        c.close()
