"""The one supervisor of the processes a job starts: a task on this machine, or on its node over
SSH, both through the tether (cluster/tether.py).  ``launch`` runs its tasks with it, ``train har``
its clients.

Both look the same to the job: ``poll()`` (the exit status, as a shell reports it; None while
it runs; LOST when the node's SSH connection is gone), ``beat()`` (the heartbeat on the tether's
stdin), ``stop()`` (its lifeline closes: the tether sends SIGTERM, waits the grace period, then
SIGKILL), ``kill()`` (the whole session, at once), and their output, line by line, to ``on_line``.  If the coordinator dies, even by
SIGKILL, the pipe or SSH channel that is the tether's stdin closes and the task stops itself.
"""

import logging
import os
import shlex
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Protocol

import paramiko
import psutil

from picluster.cluster.tether import exit_status
from picluster.util import verbosity
from picluster.util.errors import ClusterError

log = logging.getLogger(__name__)  # -v: a task started here (a node's: cluster/ssh.py logs it)
LOST = -255  # the task's node stopped answering over SSH
UNKNOWN = -256  # it ended, but nobody saw its exit status (sshd sent none: its tether died by a signal)
_SESSION = "picluster-session "


@dataclass
class TaskSpec:
    label: str  # "chief", "worker:2"
    node: str  # the inventory node it runs on, "localhost" here
    prefix: str  # what its output lines are shown under
    argv: list[str]  # the script and its arguments (the interpreter is added per place)
    cwd: str  # on a node: a shell word (quoted, or "$HOME"/'quoted')
    env: dict[str, str] = field(default_factory=dict)
    prelude: str = ""  # on a node: a shell command run (its status ignored) before the tether starts
    launcher: tuple[str, ...] = ()  # here: what starts the tether on its node (a Slurm job's srun), () for this machine


HEARTBEAT_S = 5.0  # the coordinator writes a byte to every tether this often
HEARTBEAT_TIMEOUT_S = 30.0  # a tether that heard nothing for this long stops its task


def _tether(python: str, grace: float) -> list[str]:
    return [python, "-m", "picluster.cluster.tether", "--grace", f"{grace:g}", "--heartbeat", f"{HEARTBEAT_TIMEOUT_S:g}", "--"]


def pump(read: Callable[[], bytes], on_line: Callable[[str], None]) -> threading.Thread:
    """A thread that reads ``read()`` until it returns b"" and hands over whole lines."""

    def run() -> None:
        pending = b""
        while True:
            try:
                chunk = read()
            except (OSError, EOFError, ValueError):
                chunk = b""
            if not chunk:
                break
            pending += chunk
            *lines, pending = pending.split(b"\n")
            for raw in lines:
                on_line(raw.decode("utf-8", errors="replace"))
        if pending:
            on_line(pending.decode("utf-8", errors="replace"))

    thread = threading.Thread(target=run, name="task-output", daemon=True)
    thread.start()
    return thread


class Beats(Protocol):
    def beat(self) -> None: ...


class Heartbeat:
    """A byte to every task's tether every HEARTBEAT_S, from a thread of its own: the job's watch
    loop may be busy (restarting a server, copying files back) longer than a tether waits."""

    def __init__(self, tasks: Callable[[], Iterable[Beats]]) -> None:
        self._tasks = tasks
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="heartbeat", daemon=True)

    def __enter__(self) -> "Heartbeat":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()

    def _run(self) -> None:
        while not self._stop.wait(HEARTBEAT_S):
            for task in list(self._tasks()):
                task.beat()


def start(spec: TaskSpec, grace: float, on_line: Callable[[str], None], remote=None, python: str = "") -> "LocalTask | NodeTask":
    """``spec`` on this machine (remote None), or on ``remote``'s node with its ``python``."""
    if remote is None:
        return LocalTask(spec, grace, on_line)
    return NodeTask(spec, grace, on_line, remote, python)


def wait(task: "LocalTask | NodeTask", timeout: float) -> bool:
    """Whether ``task`` ended within ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while task.poll() is None:
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def describe(code: int) -> str:
    """An exit status as the job's messages name it."""
    if code == LOST:
        return "SSH connection lost"
    if code == UNKNOWN:
        return "ended without an exit status"
    return f"signal {code - 128}" if code > 128 else f"exit code {code}"


class LocalTask:
    """A task on this machine: the tether is our child, in its own session (Ctrl-C reaches only us).
    With a launcher (srun in a Slurm job) the tether runs on the task's node, and srun carries its
    stdin (the lifeline and heartbeat) and its output."""

    def __init__(self, spec: TaskSpec, grace: float, on_line: Callable[[str], None]) -> None:
        self.spec = spec
        self.judged = False  # its end has been dealt with
        env = dict(os.environ)
        env.pop("TF_CONFIG", None)
        env.update(spec.env)
        command = [*spec.launcher, *_tether(sys.executable, grace), sys.executable, *spec.argv]
        self.started = verbosity.command(log, "local", command)
        self.proc = subprocess.Popen(
            command,
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
            cwd=spec.cwd, env=env, start_new_session=True,
        )
        out = self.proc.stdout
        assert out is not None
        self.reader = pump(lambda: os.read(out.fileno(), 65536), on_line)

    def poll(self) -> int | None:
        code = self.proc.poll()
        return None if code is None else exit_status(code)

    def beat(self) -> None:
        try:
            assert self.proc.stdin is not None
            self.proc.stdin.write(b".")
            self.proc.stdin.flush()
        except (OSError, ValueError):
            pass  # it ended, or is being stopped

    def stop(self) -> None:
        try:
            assert self.proc.stdin is not None
            self.proc.stdin.close()
        except (OSError, ValueError):
            pass

    def kill(self) -> None:
        try:
            family = psutil.Process(self.proc.pid).children(recursive=True)
        except psutil.Error:
            family = []
        for proc in family:
            try:
                proc.kill()
            except psutil.Error:
                pass
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass

    def close(self, wait: bool = True) -> None:
        self.reader.join(5.0 if wait else 0.0)
        if self.proc.stdout is not None and wait:
            self.proc.stdout.close()


class NodeTask:
    """A task on an inventory node: ``sh -c 'echo session; exec tether -- python SCRIPT'`` on an SSH channel."""

    def __init__(self, spec: TaskSpec, grace: float, on_line: Callable[[str], None], remote, python: str) -> None:
        self.spec = spec
        self.judged = False
        self.remote = remote
        self.session: int | None = None
        self._on_line = on_line
        env = " ".join(f"{k}={shlex.quote(v)}" for k, v in spec.env.items())
        argv = " ".join(shlex.quote(a) for a in spec.argv)
        # The shell is the session leader (sshd starts it with setsid): its pid names the session to kill.
        prelude = f"{spec.prelude}; " if spec.prelude else ""
        command = (f"echo {_SESSION}$$ && cd {spec.cwd} && {prelude}exec env {env} {' '.join(_tether(python, grace))} "
                   f"{python} {argv}")
        self.started = remote.said("run", command)
        try:
            self.channel = remote.conn.transport.open_session(timeout=remote.open_timeout)
            self.channel.set_combine_stderr(True)
            self.channel.exec_command(command)
        except (paramiko.SSHException, OSError, EOFError) as exc:
            raise ClusterError(f"cannot start {spec.label}: {' '.join(str(exc).split()) or type(exc).__name__}") from None
        self.reader = pump(lambda: self.channel.recv(65536), self._line)
        self._killed = threading.Event()

    def _line(self, text: str) -> None:
        if self.session is None and text.startswith(_SESSION):
            self.session = int(text[len(_SESSION):])
            return
        self._on_line(text)

    def poll(self) -> int | None:
        if self.channel.exit_status_ready():
            code = self.channel.recv_exit_status()
            return UNKNOWN if code == -1 else code  # paramiko's -1: no exit-status message came
        if not self.remote.conn.transport.is_active():
            return LOST
        return None

    def beat(self) -> None:
        try:
            if not self.channel.closed and not self.channel.eof_sent:
                self.channel.send(b".")
        except (OSError, EOFError, paramiko.SSHException):
            pass

    def stop(self) -> None:
        try:
            self.channel.shutdown_write()  # the tether's stdin closes: its lifeline
        except (OSError, EOFError, paramiko.SSHException):
            pass

    def kill(self) -> None:
        if self.session is None or self._killed.is_set():
            return
        self._killed.set()
        try:
            self.remote.run(f"pkill -KILL -s {self.session}", check=False, timeout=10)
        except ClusterError:
            pass  # the node is gone, and the task with it

    def close(self, wait: bool = True) -> None:
        """After its last output has arrived (``wait``), or at once (its node is cut off)."""
        self.reader.join(5.0 if wait else 0.0)
        try:
            self.channel.close()
        except (OSError, EOFError, paramiko.SSHException):
            pass
