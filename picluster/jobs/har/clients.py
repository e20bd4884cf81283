"""The training clients, one per worker task: a local process, or a process on its node over SSH.

Both look the same to the coordinator: ``poll()``, ``terminate()``, ``kill()``, ``wait()``, a
label and a local copy of the log.  A node's client keeps its own run directory on the node
(``~/.local/state/picluster/node/runs/<run>``): the coordinator pushes the run's config
there before the start and mirrors the chief's files back, so no shared file system is
needed.  The SSH channel's stdin is the client's lifeline: when the coordinator goes away,
even by SIGKILL, sshd closes it and the client stops itself (``--watch-stdin``).
"""

import errno
import hashlib
import os
import re
import shlex
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path, PurePosixPath

import paramiko

from picluster import atomic
from picluster.errors import ClusterError
from picluster.cluster.lifetime import signal_group

KILLED = -1  # exit "code" of a client that died by a signal we cannot name (sshd does not say)
LOST = -255  # the SSH connection to the node is gone
# The chief's files the coordinator mirrors while the run goes on, and at the end.
PROGRESS = ("progress.json", "live.json")
RECORDS = ("metrics.csv", "state.json")
TREES = ("checkpoints", "best", "tensorboard")
FINAL = ("result.json",)
ALWAYS_COPY_BYTES = 4096  # smaller files are copied on every mirror (see NodeClient._stale)
# What a relaunched chief needs to resume (its records and these trees), pushed to its node.
RESUME_TREES = ("checkpoints", "best")


def describe(code: int) -> str:
    if code == LOST:
        return "SSH connection lost"
    if code == KILLED:
        return "killed by a signal"
    return f"signal {-code}" if code < 0 else f"exit code {code}"


class LocalClient:
    def __init__(self, run_dir: Path, task: int) -> None:
        self.task = task
        self.label = f"worker {task}"
        self.log = run_dir / f"worker-{task}.log"
        env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
        with open(self.log, "ab") as log:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "picluster.jobs.har.replica", "--run-dir", str(run_dir),
                 "--task", str(task), "--parent", str(os.getpid())],
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
    def __init__(self, inv, node, run_dir: Path, task: int, resume: bool) -> None:
        from picluster.cluster.nodes import RUN_DIR, node_python, open_node

        self.task = task
        self.node = node.name
        self.label = f"worker {task} on {node.name}"
        self.run_dir = run_dir
        self.log = run_dir / f"worker-{task}.log"
        self.remote_dir = PurePosixPath(RUN_DIR) / "runs" / node_run_name(run_dir)  # relative to the user's home
        self._seen_progress: bytes | None = None
        self._complete = False  # the final mirror is done
        try:
            self.remote = open_node(inv, node)
        except ClusterError as exc:
            raise ClusterError(f"{node.name}: {exc}") from None
        try:
            home = f"$HOME/{shlex.quote(str(self.remote_dir))}"
            self.remote.run(f"umask 077 && mkdir -p {home} && cd {home} && rm -f result.json progress.json live.json")
            self.sftp = self.remote.conn.sftp()
            for name in ("config.json", "layout.json"):
                self._put(run_dir / name)
            if task == 0 and resume and not self._exists("checkpoints/checkpoint"):
                # The node's own records are the newest; ours are pushed only when it has none.
                for name in RECORDS:
                    self._put(run_dir / name)
                for tree in RESUME_TREES:
                    self._put_tree(run_dir / tree)
            self.channel = self.remote.conn.transport.open_session(timeout=self.remote.open_timeout)
            self.channel.exec_command(
                f"cd {home} && echo $$ && exec {node_python(inv)} -m picluster.jobs.har.replica --run-dir {home} "
                f"--task {task} --watch-stdin >>worker-{task}.log 2>&1"
            )
            self.pid = self._read_pid()
        except (OSError, EOFError, paramiko.SSHException, ClusterError) as exc:
            self.remote.close()
            raise ClusterError(f"{node.name}: cannot start worker {task}'s client: {exc}") from None

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
            self.remote.run(f"grep -q picluster.jobs.har.replica /proc/{self.pid}/cmdline 2>/dev/null && kill -{name} {self.pid}",
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

    # -- files ----------------------------------------------------------------------------

    def sync(self, final: bool = False) -> None:
        """Mirror the chief's files into the local run directory (records only when they moved on)."""
        if self.task != 0:
            return
        try:
            moved = False
            for name in PROGRESS:
                data = self._get(name)
                if name == "progress.json" and data != self._seen_progress:
                    self._seen_progress, moved = data, True
            # The chief appends to metrics.csv before it replaces progress.json: a new
            # progress.json means a complete row.
            if moved or final:
                self._mirror_records()  # each epoch: a resume hint must find the checkpoint here
            if final:
                for name in FINAL:
                    self._get(name)
                self._complete = True
        except (OSError, EOFError, paramiko.SSHException) as exc:
            if final:
                raise ClusterError(f"{self.node}: cannot copy the run's files back: {exc}") from None

    def keep_last(self) -> None:
        """Once the chief has stopped: copy back what it saved since the last mirror.

        A run that stops mid-epoch may have checkpointed after the epoch's mirror; the
        resume hint must point at the checkpoint the node will actually resume from.
        """
        if self.task != 0 or self._complete:  # a finished run's final sync copied everything
            return
        try:
            self._mirror_records()
        except (OSError, EOFError, paramiko.SSHException):
            pass  # the node is gone: its copy stays there, ours is the last mirrored one

    def _mirror_records(self) -> None:
        for name in RECORDS:
            self._get(name)
        for tree in TREES:
            self._get_tree(PurePosixPath(tree))

    def fetch_log(self) -> None:
        try:
            self._get(self.log.name)
        except (OSError, EOFError, paramiko.SSHException):
            pass  # the node is gone: its log stays there

    def close(self) -> None:
        self.remote.close()

    def _exists(self, relative: str) -> bool:
        try:
            self.sftp.stat(str(self.remote_dir / relative))
            return True
        except FileNotFoundError:
            return False

    def _put(self, local: Path) -> None:
        if local.is_file():
            remote = str(self.remote_dir / local.relative_to(self.run_dir))
            self.sftp.put(str(local), remote + ".new")
            self.sftp.posix_rename(remote + ".new", remote)

    def _put_tree(self, local: Path) -> None:
        if not local.is_dir():
            return
        try:
            self.sftp.mkdir(str(self.remote_dir / local.relative_to(self.run_dir)), 0o700)
        except OSError:
            pass  # it exists
        for item in sorted(local.iterdir()):
            self._put_tree(item) if item.is_dir() else self._put(item)

    def _get(self, name: str) -> bytes | None:
        """Copy one file back (atomically); its bytes, or None when the node has none."""
        target = self.run_dir / name
        try:
            with self.sftp.open(str(self.remote_dir / name), "rb") as f:
                data = f.read()
        except OSError as exc:
            if getattr(exc, "errno", None) == errno.ENOENT or isinstance(exc, FileNotFoundError):
                return None
            raise
        target.parent.mkdir(parents=True, exist_ok=True)
        atomic.write_bytes(target, data)
        return data

    def _get_tree(self, relative: PurePosixPath) -> None:
        try:
            entries = self.sftp.listdir_attr(str(self.remote_dir / relative))
        except FileNotFoundError:
            return
        for entry in entries:
            child = relative / entry.filename
            if stat.S_ISDIR(entry.st_mode or 0):
                self._get_tree(child)
            elif self._stale(child, entry):  # each epoch: only the checkpoint files that are new
                self._get(str(child))
                os.utime(self.run_dir / child, (entry.st_atime, entry.st_mtime))

    def _stale(self, relative: PurePosixPath, entry) -> bool:
        if (entry.st_size or 0) <= ALWAYS_COPY_BYTES:
            # SFTP times are whole seconds, and a checkpoint's state file is rewritten in place at
            # the same size ("model.ckpt-26" -> "-39"): within one second it would look unchanged.
            return True
        try:
            st = (self.run_dir / relative).stat()
        except FileNotFoundError:
            return True
        return (st.st_size, int(st.st_mtime)) != (entry.st_size, entry.st_mtime)


def node_run_name(run_dir: Path) -> str:
    """The run's directory name on the nodes: readable, and unique per coordinator path."""
    digest = hashlib.sha1(str(run_dir.resolve()).encode()).hexdigest()[:8]
    return f"{re.sub(r'[^A-Za-z0-9._-]', '_', run_dir.name)[:40]}-{digest}"


def start(run_dir: Path, layout, workers: int, inventory=None, resume: bool = False) -> list:
    """One client per worker task 0..workers-1: over SSH on inventory nodes, else locally."""
    if inventory is None:
        return [LocalClient(run_dir, i) for i in range(workers)]
    from concurrent.futures import ThreadPoolExecutor

    nodes = {n.name: n for n in inventory.nodes}
    placed = [nodes[layout.task("worker", i).node] for i in range(workers)]
    with ThreadPoolExecutor(max_workers=min(16, workers)) as pool:
        futures = [pool.submit(NodeClient, inventory, node, run_dir, i, resume) for i, node in enumerate(placed)]
    clients, errors = [], []
    for f in futures:
        try:
            clients.append(f.result())
        except ClusterError as exc:
            errors.append(str(exc))
    if errors:
        stop(clients)
        raise ClusterError("; ".join(errors))
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
