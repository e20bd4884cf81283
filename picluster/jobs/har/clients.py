"""The training clients, one per worker task: a local process, or a process on its node over SSH.

Both look the same to the coordinator: ``poll()``, ``terminate()``, ``kill()``, ``wait()``, a
label and a local copy of the log.  Each gets its task in ``TF_CONFIG``, as TFJob's replicas do.
A node's client keeps its own run directory on the node
(``~/.local/state/picluster/node/runs/<run>``), which mirror.py keeps in step with the
coordinator's.  The SSH channel's stdin is the client's lifeline: when the coordinator goes
away, even by SIGKILL, sshd closes it and the client stops itself (``--watch-stdin``).
"""

import hashlib
import os
import re
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path, PurePosixPath

import paramiko

from picluster.cluster.lifetime import signal_group
from picluster.clusterspec import Layout
from picluster.errors import ClusterError
from picluster.fanout import fan_out
from picluster.jobs.har.mirror import COPY_ERRORS, Mirror
from picluster.jobs.har.rundir import RunDir

KILLED = -1  # exit "code" of a client that died by a signal we cannot name (sshd does not say)
LOST = -255  # the SSH connection to the node is gone
MODULE = "picluster.jobs.har.replica"


def describe(code: int) -> str:
    if code == LOST:
        return "SSH connection lost"
    if code == KILLED:
        return "killed by a signal"
    return f"signal {-code}" if code < 0 else f"exit code {code}"


class LocalClient:
    def __init__(self, run: RunDir, task: int, tf_config: str | None = None, launch: str = "") -> None:
        self.task = task
        self.label = f"worker {task}"
        self.log = run.worker_log(task)
        env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
        env.pop("TF_CONFIG", None)
        if tf_config is not None:
            env["TF_CONFIG"] = tf_config
        with open(self.log, "ab") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", MODULE, "--run-dir", str(run), "--launch", launch, "--parent", str(os.getpid())],
                stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                start_new_session=True,  # Ctrl-C reaches the coordinator, which stops clients in order
                env=env,
            )

    def poll(self) -> int | None:
        return self.proc.poll()

    def terminate(self) -> None:
        signal_group(self.proc.pid, signal.SIGTERM)

    def kill(self) -> None:
        signal_group(self.proc.pid, signal.SIGKILL)

    def wait(self, timeout: float) -> bool:
        try:
            self.proc.wait(max(0.0, timeout))
            return True
        except subprocess.TimeoutExpired:
            return False

    def sync(self, final: bool = False) -> None:
        """Nothing to mirror: the client writes the run directory itself."""

    def keep_last(self) -> None:
        pass

    def fetch_log(self) -> None:
        pass

    def close(self) -> None:
        pass


class NodeClient:
    def __init__(self, inv, node, run: RunDir, task: int, resume: bool, tf_config: str, launch: str,
                 serve: bool = False) -> None:
        """serve: the client hosts its worker task's server itself, in place of the node's own
        (stopped first, on its address): one TensorFlow runtime on the node instead of two."""
        from picluster.cluster.nodes import RUN_DIR, node_python, open_node, stop_task_command

        self.task = task
        self.node = node.name
        self.label = f"worker {task} on {node.name}"
        self.log = run.worker_log(task)
        remote_dir = PurePosixPath(RUN_DIR) / "runs" / node_run_name(run.path)  # relative to the user's home
        self.remote = open_node(inv, node)
        try:
            home = f"$HOME/{shlex.quote(str(remote_dir))}"
            self.remote.run(f"umask 077 && mkdir -p {home} && cd {home} && rm -f result.json progress.json live.json")
            self.mirror = Mirror(self.remote.conn.sftp(), remote_dir, run.path)
            self.mirror.push_for_start(chief=task == 0, resume=resume)
            self.channel = self.remote.conn.transport.open_session(timeout=self.remote.open_timeout)
            takeover = f"{stop_task_command('worker', task)}; " if serve else ""
            self.channel.exec_command(
                f"cd {home} && echo $$ && export TF_CONFIG={shlex.quote(tf_config)} && {takeover}exec {node_python(inv)} -m {MODULE} "
                f"--run-dir {home} --launch {shlex.quote(launch)} --watch-stdin{' --serve' if serve else ''} >>{run.worker_log_name(task)} 2>&1"
            )
            self.pid = self._read_pid()
        except (*COPY_ERRORS, ClusterError) as exc:
            self.remote.close()
            raise ClusterError(f"cannot start worker {task}'s client: {exc}") from None

    def _read_pid(self) -> int:
        deadline = time.monotonic() + self.remote.open_timeout
        out = b""
        while b"\n" not in out:
            if self.channel.recv_ready():
                out += self.channel.recv(64)
            elif self.channel.exit_status_ready() or time.monotonic() > deadline:
                raise ClusterError(f"the client did not start (exit code {self.channel.recv_exit_status()})"
                                   if self.channel.exit_status_ready() else "no answer from the node's shell")
            else:
                time.sleep(0.02)
        return int(out.split(b"\n", 1)[0])

    # -- process --------------------------------------------------------------------------

    def poll(self) -> int | None:
        if self.channel.exit_status_ready():
            return self.channel.recv_exit_status()
        if not self.remote.conn.transport.is_active():
            return LOST
        return None

    def terminate(self) -> None:
        self._signal("TERM")
        try:
            self.channel.shutdown_write()  # its stdin closes: the client stops even if kill failed
        except (OSError, EOFError, paramiko.SSHException):
            pass

    def kill(self) -> None:
        self._signal("KILL")

    def _signal(self, name: str) -> None:
        try:
            # The pid is the shell that exec'd the client; check it still is one before signalling.
            self.remote.run(f"grep -q {MODULE} /proc/{self.pid}/cmdline 2>/dev/null && kill -{name} {self.pid}",
                            check=False, timeout=10)
        except ClusterError:
            pass  # the node is gone, and with it the client

    def wait(self, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        while self.poll() is None:
            if time.monotonic() > deadline:
                return False
            time.sleep(0.1)
        return True

    # -- the chief's files ------------------------------------------------------------------

    def sync(self, final: bool = False) -> None:
        """Mirror the chief's files into the local run directory (records only when they moved on)."""
        if self.task != 0:
            return
        try:
            self.mirror.follow(final)
        except COPY_ERRORS as exc:
            if final:
                raise ClusterError(f"{self.node}: cannot copy the run's files back: {exc}") from None

    def keep_last(self) -> None:
        """Once the chief has stopped: copy back what it saved since the last mirror.

        A run that stops mid-epoch may have checkpointed after the epoch's mirror; the
        resume hint must point at the checkpoint the node will actually resume from.
        """
        if self.task != 0 or self.mirror.complete:  # a finished run's final sync copied everything
            return
        try:
            self.mirror.records()
        except COPY_ERRORS:
            pass  # the node is gone: its copy stays there, ours is the last mirrored one

    def fetch_log(self) -> None:
        try:
            self.mirror.get(self.log.name)
        except COPY_ERRORS:
            pass  # the node is gone: its log stays there

    def close(self) -> None:
        self.remote.close()


def node_run_name(run_dir: Path) -> str:
    """The run's directory name on the nodes: readable, and unique per coordinator path."""
    digest = hashlib.sha1(str(run_dir.resolve()).encode()).hexdigest()[:8]
    return f"{re.sub(r'[^A-Za-z0-9._-]', '_', run_dir.name)[:40]}-{digest}"


def start(run: RunDir, layout: Layout | None, inventory=None, resume: bool = False, launch: str = "",
          serve: bool = False) -> list:
    """One client per worker task of ``layout`` (None: one client, alone): over SSH on inventory
    nodes, else locally.  ``layout`` holds only the tasks this run uses.  serve (inventory nodes
    only): each client hosts its worker's server in place of the node's own."""
    if layout is None:
        return [LocalClient(run, 0)]
    workers = layout.workers
    if inventory is None:
        return [LocalClient(run, t.index, layout.tf_config("worker", t.index), launch) for t in workers]
    nodes = {n.name: n for n in inventory.nodes}
    started = fan_out(
        lambda t: NodeClient(inventory, nodes[t.node], run, t.index, resume, layout.tf_config("worker", t.index), launch, serve),
        workers,
        name=lambda t: t.node,  # one worker task per node
    )
    clients = list(started.succeeded.values())
    if started.failed:
        stop(clients)
        started.raise_failures("starting the training clients")
    return clients


def stop(clients: list, grace: float = 5.0) -> None:
    """SIGTERM every client still running, SIGKILL what is left after ``grace`` seconds."""
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
