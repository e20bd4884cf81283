"""The embedded local cluster: real ps/worker servers as processes on 127.0.0.1.

A run directory holds ``cluster.json`` (layout, pids) and one log and ready file per
task.  Persistent clusters (``picluster cluster up``) live in ``<state>/local``;
temporary ones, started by ``run``/``train``, die with their coordinator.
"""

import json
import logging
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import psutil

from picluster.cluster import localstate, server
from picluster.cluster.base import Agent, Cluster, TaskState
from picluster.cluster.exits import Exit, Exited, file_tail
from picluster.cluster.lifetime import signal_group
from picluster.cluster.probe import answers
from picluster.cluster.server import ready_name
from picluster.model.clusterspec import Layout, Task, local_layout
from picluster.util import atomic, verbosity
from picluster.util.errors import ClusterError, UsageError
from picluster.util.paths import state_dir

_log = logging.getLogger(__name__)  # -v: each server and agent process started here
HOST = "127.0.0.1"
MAX_TASKS = 64
START_TIMEOUT = 120.0
SETTLE_S = 0.5  # after a first death, how long to wait for others started with it
_STATE = "cluster.json"
AGENT = "agent"


def persistent_dir() -> Path:
    return state_dir() / "local"


def threads_per_task(workers: int) -> int:
    # Workers share this machine's cores; more threads than cores only adds contention.
    return max(1, (os.cpu_count() or 1) // max(1, workers))


class LocalCluster(Cluster):
    what = "the running local cluster ('picluster cluster down' to drop it)"
    title = "local cluster"

    def __init__(self, run_dir: Path, layout: Layout, pids: dict[str, int], temporary: bool) -> None:
        self.run_dir = run_dir
        self.layout = layout
        self.pids = pids
        self.temporary = temporary
        self._children: dict[int, subprocess.Popen] = {}  # started by this process
        self.agent_port: int | None = None

    @property
    def kind(self) -> str:  # type: ignore[override]
        return "temporary" if self.temporary else "local"

    @property
    def description(self) -> str:
        return "temporary local cluster" if self.temporary else "local cluster"

    # -- starting ---------------------------------------------------------------------------
    @classmethod
    def start(
        cls,
        ps: int,
        workers: int,
        run_dir: Path | None = None,
        base_port: int | None = None,
        temporary: bool = False,
        timeout: float = START_TIMEOUT,
        meanwhile: Callable[[], None] | None = None,
    ) -> "LocalCluster":
        """Start the servers and the agent and wait until they answer; ``meanwhile`` runs while
        they start (the coordinator's own slow work, overlapping theirs)."""
        if ps < 0 or workers < 1:
            raise UsageError("a local cluster needs at least 1 worker and 0 or more ps tasks")
        if ps + workers > MAX_TASKS:
            raise UsageError(f"{ps + workers} tasks is more than the local limit of {MAX_TASKS}")
        if run_dir is None:
            if temporary:
                root = state_dir() / "tmp"
                root.mkdir(parents=True, exist_ok=True)
                run_dir = Path(tempfile.mkdtemp(prefix=f"run-{os.getpid()}-", dir=root))
            else:
                run_dir = persistent_dir()
        # The agent's port is chosen with the tasks': picked later, it could be one a task has
        # been given but not yet bound.  With --port it is the one after the tasks'.
        ports = _choose_ports(ps + workers + 1, base_port)
        layout = local_layout(ports[:ps], ports[ps:-1])
        run_dir.mkdir(parents=True, exist_ok=True)
        cluster = cls(run_dir, layout, {}, temporary)
        cluster._save()
        try:
            cluster._spawn_tasks(list(layout.tasks))
            cluster._spawn_agent(ports[-1])
            cluster._save()
            if meanwhile is not None:
                meanwhile()
            cluster.wait_ready(timeout)
        except BaseException:
            cluster.stop()
            raise
        return cluster

    def _spawn_tasks(self, tasks: list[Task]) -> None:
        """One server process per task (a kind that hosts them otherwise overrides this)."""
        workers = len(self.layout.workers)
        for task in tasks:
            self._spawn(task, threads_per_task(workers) if task.job == "worker" else 1)

    def _spawn(self, task: Task, threads: int) -> None:
        log = self._log(task)
        ready = self._ready(task)
        ready.unlink(missing_ok=True)
        cmd = server.command(sys.executable, cluster_file=str(self.run_dir / _STATE), job=task.job, task=task.index,
                             threads=threads, ready_file=str(ready), parent=os.getpid() if self.temporary else None)
        verbosity.command(_log, "local", cmd)
        with open(log, "ab") as out:
            proc = subprocess.Popen(
                cmd,
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                # Own session: a Ctrl-C at the terminal goes to the coordinator, which stops us in order.
                start_new_session=True,
                cwd=self.run_dir,
            )
        self.pids[task.label] = proc.pid
        self._children[proc.pid] = proc

    def _spawn_agent(self, port: int | None = None) -> None:
        """One node agent serves this machine's metrics for `picluster top` and the live views."""
        if port is None:  # a restart: the tasks hold their ports by now
            (port,) = _choose_ports(1, None)
        self.agent_port = port
        cmd = [sys.executable, "-m", "picluster.monitor.agent", "--addr", HOST, "--port", str(port),
               "--node", "localhost", "--cluster-file", str(self.run_dir / _STATE), "--ready-file", str(self.run_dir / "agent.ready")]
        if self.temporary:
            cmd += ["--parent", str(os.getpid())]
        verbosity.command(_log, "local", cmd)
        with open(self.run_dir / "agent.log", "ab") as out:
            proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                                    start_new_session=True, cwd=self.run_dir)
        self.pids[AGENT] = proc.pid
        self._children[proc.pid] = proc

    def agent_state(self) -> str:
        if self._live_pid_of(AGENT, "picluster.monitor.agent") is None or self.agent_port is None:
            return "down"
        return "up" if (self.run_dir / "agent.ready").exists() and answers(HOST, self.agent_port) else "starting"

    def wait_ready(self, timeout: float) -> None:
        """Return once every task (and the agent) is up; a process that exits instead is reported
        at once, with its exit status and the end of its log (picluster.cluster.exits)."""
        deadline = time.monotonic() + timeout
        pending = [t.label for t in self.layout.tasks] + ([AGENT] if AGENT in self.pids else [])
        while pending:
            states = {label: self._state_of(label) for label in pending}
            if "down" in states.values():
                # Processes started together often fail together (a broken venv): name them all.
                time.sleep(SETTLE_S)
                dead = [label for label in pending if self._state_of(label) == "down"]
                raise Exited("local cluster", [self._exit(label) for label in dead])
            pending = [label for label, state in states.items() if state != "up"]
            if pending and time.monotonic() > deadline:
                raise ClusterError(f"local tasks not answering after {timeout:.0f} s: {', '.join(pending)} (logs in {self.run_dir})")
            if pending:
                time.sleep(0.05)

    def _state_of(self, label: str) -> str:
        if label == AGENT:
            return self.agent_state()
        return self._task_state(self.layout.task(*_split(label)))

    def _exit(self, label: str) -> Exit:
        """How a dead process of ours ended: its exit status when it was our child, and its log's end."""
        child = self._children.get(self.pids.get(label, -1))
        status = child.returncode if child is not None else None
        log = self.run_dir / "agent.log" if label == AGENT else self._log(self.layout.task(*_split(label)))
        return Exit("localhost", label, status, file_tail(log))

    # -- inspecting -------------------------------------------------------------------------
    @classmethod
    def open(cls, run_dir: Path | None = None) -> "LocalCluster | None":
        run_dir = run_dir or persistent_dir()
        try:
            layout, pids, temporary, agent_port = localstate.parse(json.loads((run_dir / _STATE).read_text()))
        except FileNotFoundError:
            return None
        except NotADirectoryError:
            raise UsageError(f"{run_dir} is not a directory: move that file away, or set PICLUSTER_STATE_DIR to a folder") from None
        except (ValueError, RecursionError) as exc:  # BadState names the value; JSON errors the place
            raise ClusterError(f"local cluster state {run_dir / _STATE} is damaged ({exc}); remove {run_dir}") from None
        cluster = cls(run_dir, layout, pids, temporary)
        cluster.agent_port = agent_port
        return cluster

    def status(self) -> list[TaskState]:
        """Every task, then the agent (once it has a port)."""
        rows = [TaskState(t.label, t.node, t.address, self._task_state(t), t, self._live_pid(t), self._log(t))
                for t in self.layout.tasks]
        if self.agent_port is not None:
            rows.append(TaskState(AGENT, "localhost", f"{HOST}:{self.agent_port}", self.agent_state(), None,
                                  self._live_pid_of(AGENT, "picluster.monitor.agent"), self.run_dir / "agent.log"))
        return rows

    def agents(self) -> list[Agent]:
        return [Agent("localhost", tuple(sorted({t.job for t in self.layout.tasks})), HOST, self.agent_port)]

    def is_up(self) -> bool:
        return all(self._task_state(t) == "up" for t in self.layout.tasks)

    def is_running(self) -> bool:
        """Any task alive: a cluster to attach to, or to restart the rest of."""
        return any(self._task_state(t) != "down" for t in self.layout.tasks)

    def close(self) -> None:
        if self.temporary:
            self.stop()

    def repair(self) -> None:
        if not (self.run_dir / _STATE).exists():  # `picluster cluster down` ran meanwhile: leave it down
            raise ClusterError("the local cluster was stopped during the job")
        self.restart_missing()

    def restart_missing(self, timeout: float = START_TIMEOUT) -> list[Task]:
        """Start again the tasks that are down, on their old ports; return them."""
        missing = [t for t in self.layout.tasks if self._task_state(t) == "down"]
        try:
            for task in missing:
                _check_free(task.port)
            if missing:
                self._spawn_tasks(missing)
            if self.agent_state() == "down":
                self._spawn_agent()
            self._save()
            self.wait_ready(timeout)
        except BaseException:
            self.stop()
            raise
        return missing

    def _task_state(self, task: Task) -> str:
        if self._live_pid(task) is None:
            return "down"
        if self._ready(task).exists() and answers(task.host, task.port):
            return "up"
        return "starting"

    def _live_pid(self, task: Task) -> int | None:
        return self._live_pid_of(task.label, server.MODULE)

    def _live_pid_of(self, label: str, module: str) -> int | None:
        pid = self.pids.get(label)
        if pid is None:
            return None
        child = self._children.get(pid)
        if child is not None:
            # Our own child may not have exec'd its command line yet; poll() also reaps it.
            return pid if child.poll() is None else None
        try:
            proc = psutil.Process(pid)
            if proc.status() == psutil.STATUS_ZOMBIE:
                proc.wait(0)
                return None
            cmdline = proc.cmdline()
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.TimeoutExpired):
            return None
        # A recycled pid belongs to someone else: ours carry this cluster's state file.
        if module in cmdline and any(str(self.run_dir) in part for part in cmdline):
            return pid
        return None

    # -- stopping ---------------------------------------------------------------------------
    def stop(self, grace: float = 5.0) -> None:
        found = [(t.label, self._live_pid(t)) for t in self.layout.tasks]
        found.append((AGENT, self._live_pid_of(AGENT, "picluster.monitor.agent")))
        live = sorted({pid for _, pid in found if pid})  # tasks may share one process
        for pid in live:
            signal_group(pid, signal.SIGTERM)
        deadline = time.monotonic() + grace
        procs = []
        for pid in live:
            try:
                procs.append(psutil.Process(pid))
            except psutil.NoSuchProcess:
                pass
        _, alive = psutil.wait_procs(procs, timeout=max(0.0, deadline - time.monotonic()))
        for proc in alive:
            signal_group(proc.pid, signal.SIGKILL)
        psutil.wait_procs(alive, timeout=5)
        if self.temporary:
            shutil.rmtree(self.run_dir, ignore_errors=True)
        else:
            self.pids = {}
            (self.run_dir / _STATE).unlink(missing_ok=True)
            for task in self.layout.tasks:
                self._ready(task).unlink(missing_ok=True)
            (self.run_dir / "agent.ready").unlink(missing_ok=True)

    # -- files ------------------------------------------------------------------------------
    def _log(self, task: Task) -> Path:
        return self.run_dir / f"{task.job}-{task.index}.log"

    def _ready(self, task: Task) -> Path:
        return self.run_dir / ready_name(task.job, task.index)

    def _save(self) -> None:
        data = {"layout": self.layout.to_json(), "pids": self.pids, "temporary": self.temporary,
                "agent_port": self.agent_port}
        atomic.write_json(self.run_dir / _STATE, data)


def _split(label: str) -> tuple[str, int]:
    job, index = label.split(":")
    return job, int(index)


def _choose_ports(count: int, base: int | None) -> list[int]:
    if base is not None:
        if not 1024 <= base <= 65535 - count:
            raise UsageError(f"--port {base} must leave room for {count} ports between 1024 and 65535")
        ports = list(range(base, base + count))
        for p in ports:
            _check_free(p)
        return ports
    # Hold every socket until all are chosen so the kernel hands out distinct ports.
    socks = []
    try:
        for _ in range(count):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.bind((HOST, 0))
            socks.append(s)
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def _check_free(port: int) -> None:
    for family, addr in ((socket.AF_INET, HOST), (socket.AF_INET6, "::")):
        with socket.socket(family, socket.SOCK_STREAM) as s:
            # As gRPC does: connections in TIME_WAIT from a dead task must not block its restart.
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                s.bind((addr, port))
            except OSError:
                raise UsageError(f"port {port} on {HOST} is already in use; choose another with --port or stop its owner") from None
