"""A job's client run inside the node's resident TensorFlow server process: the door.

The classic between-graph pattern keeps one process per node that holds both the server and its
client.  A node's worker server (started by ``cluster up``) opens a door, a Unix socket in the
node's run directory (0700), and a job's client knocks with the function to run
(``module:function``, of ``picluster.jobs``), its arguments, its environment and its folder.
The server runs it in a thread of its own process, where TensorFlow is imported and the task
already serves: starting a client costs no TensorFlow import and no server restart.

    python -m picluster.cluster.door --door PATH -- picluster.jobs.har.replica:door_job --run-dir . --launch L

is the knocker.  It imports nothing but the standard library, runs under the tether as any client
does, prints the job's output line by line and exits with the job's status.  When it ends (the
tether's SIGTERM, or its death) the socket closes and the server cancels the job
(``JobContext.cancelled``, and the job's ``on_cancel`` callbacks, which close its sessions so that
a blocked step returns).  A job that has not ended CANCEL_S later takes the server process with
it (exit status 75): the next ``cluster up`` starts the task again, and no half-stopped job holds
the node's task.  One job at a time: a second knock while one runs is refused (exit 75); one
while the last job's garbage is collected waits for it.

After each job, once the knocker has its status, the server collects the job's garbage (its
graphs and sessions hold cycles that Python frees only in a full collection) and hands the freed
heap back to the system (glibc's ``malloc_trim``; its arenas keep freed pages otherwise): a
server that lives through many jobs on a 1 GB board must not grow from job to job.  The log line of each job's end says how much
anonymous memory the process holds after it, before and after that.

Wire format, one line each way at a time: the knock is one JSON object; the server answers
``o <text>`` per output line and ``x <status>`` at the end; the knocker may send ``c`` (cancel).
"""

import ctypes
import gc
import json
import os
import signal
import socket
import sys
import threading
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from importlib import import_module
from pathlib import Path
from typing import Any

BUSY = 75  # EX_TEMPFAIL: the door is busy, or gone
UNAVAILABLE = 69  # EX_UNAVAILABLE: no door at that path (no server, or one without a door)
LOST = 70  # the server ended without saying how the job ended
CANCEL_S = 10.0
COLLECTING_WAIT_S = 30.0  # a knock while the last job's garbage is collected waits (1-2 s at a Pi's share of a core)
ALLOWED = "picluster.jobs"  # and the modules under it
MAX_KNOCK = 1 << 20


@dataclass
class JobContext:
    """What a job run through the door gets instead of a process of its own."""

    env: dict[str, str]  # its environment's additions (TF_CONFIG)
    cwd: Path  # its folder: relative paths in its arguments are relative to this
    say: Callable[[str], None]  # a line of its output
    cancelled: threading.Event = field(default_factory=threading.Event)
    started: float = field(default_factory=time.time)  # when the knock came (time.time())
    _on_cancel: list[Callable[[], None]] = field(default_factory=list)

    def on_cancel(self, fn: Callable[[], None]) -> None:
        """``fn`` runs (in another thread) when the job is cancelled: close a session, so that a
        step blocked in it returns."""
        self._on_cancel.append(fn)
        if self.cancelled.is_set():
            fn()

    def ended(self) -> None:
        """The job has returned: its callbacks (which hold its sessions and graphs) are let go, so
        the collection after the job frees them although the watcher still holds this context."""
        self._on_cancel.clear()

    def cancel(self) -> None:
        if self.cancelled.is_set():
            return
        self.cancelled.set()
        for fn in list(self._on_cancel):
            try:
                fn()
            except Exception:  # noqa: S110  (closing what is already closed; the job ends either way)
                pass


def door_path(run_dir: str, job: str, index: int) -> str:
    """Where a task's door is, in the node's run directory (a path the shell expands)."""
    return f"{run_dir}/{job}-{index}.door"


class Door:
    """The server side, in the resident server process: ``Door(path, label).open()`` serves until
    the process exits.  ``allowed``: the modules whose functions may be called."""

    def __init__(self, path: Path, label: str, allowed: str = ALLOWED, cancel_s: float = CANCEL_S) -> None:
        self.path, self.label, self.allowed, self.cancel_s = path, label, allowed, cancel_s
        self.busy = threading.Lock()
        self.collecting = threading.Event()  # set while the last job's garbage is collected, busy still held

    def open(self) -> None:
        self.path.unlink(missing_ok=True)
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        old = os.umask(0o177)  # the socket 0600: only the node's user knocks
        try:
            listener.bind(str(self.path))
        finally:
            os.umask(old)
        listener.listen(4)
        threading.Thread(target=self._accept, args=(listener,), name="door", daemon=True).start()
        self._warming = threading.Thread(target=self._warm, name="door-warm", daemon=True)
        self._warming.start()

    def read_ahead(self, share: str) -> threading.Thread:
        """Once the task serves (not before: on a Pi's share of a core it would slow `cluster up`),
        read what the jobs read from the cluster's share (``share``: its mount here; the allowed
        package's DOOR_READ_AHEAD), after their imports: the first run after `cluster up` or a boot
        finds it held.  A job that asks meanwhile waits for the read rather than reading it again."""
        thread = threading.Thread(target=self._read_ahead, args=(share,), name="door-read-ahead", daemon=True)
        thread.start()
        return thread

    def _read_ahead(self, share: str) -> None:
        self._warming.join()
        for call in getattr(import_module(self.allowed), "DOOR_READ_AHEAD", ()):
            said: str | None
            try:
                read: Callable[[str], str | None] = _named(call, self.allowed)
                said = read(share)
            except Exception as exc:  # a job's own bug: its first run says it again, the server serves on
                said = f"{call} failed: {type(exc).__name__}: {exc}"
            if said:
                _log(f"{self.label}: {said}")

    def _warm(self) -> None:
        """Import the job modules the allowed package names (its DOOR_JOBS) before any knock."""
        try:
            for module in getattr(import_module(self.allowed), "DOOR_JOBS", ()):
                import_module(module)
        except Exception as exc:  # a broken job module: its first knock says why, in its own output
            _log(f"{self.label}: could not import the jobs in advance ({type(exc).__name__}: {exc})")

    def _accept(self, listener: socket.socket) -> None:
        while True:
            conn, _ = listener.accept()
            threading.Thread(target=self._serve, args=(conn,), name="door-job", daemon=True).start()

    def _serve(self, conn: socket.socket) -> None:
        with conn:
            reader = conn.makefile("rb")
            knock = reader.readline(MAX_KNOCK)
            if not self._enter():
                _send(conn, threading.Lock(), f"o {self.label}: busy with another job\nx {BUSY}\n")
                return
            try:
                self._run(conn, reader, knock)
            finally:
                self.collecting.clear()
                self.busy.release()

    def _enter(self) -> bool:
        """The door for one job: free now, or once the last job's collection is done (a moment,
        not a job: the next launch of a run knocks as soon as the last one's clients have ended)."""
        if self.busy.acquire(blocking=False):
            return True
        return self.collecting.is_set() and self.busy.acquire(timeout=COLLECTING_WAIT_S)

    def _run(self, conn: socket.socket, reader, knock: bytes) -> None:
        lock = threading.Lock()
        ctx = JobContext({}, Path("/"), lambda line: _send(conn, lock, f"o {line}\n"))
        try:
            request = json.loads(knock)
            call, argv = str(request["call"]), [str(a) for a in request["argv"]]
            ctx.env = {str(k): str(v) for k, v in dict(request.get("env") or {}).items()}
            ctx.cwd = Path(str(request.get("cwd") or "/"))
            fn = _resolve(call, self.allowed)
        except (ValueError, KeyError, TypeError, ImportError, AttributeError) as exc:
            _send(conn, lock, f"o {self.label}: not a job: {exc}\nx 2\n")
            return
        code, cancelled = self._job(call, fn, argv, ctx, reader)
        # The knocker hears the end first: the collection (1-2 s at a Pi's share of a core) is not
        # on the way of the run's end, and a knock meanwhile waits for it (_enter).
        self.collecting.set()
        _send(conn, lock, f"x {code}\n")
        # Nothing of the job is held here now (its frame is gone, its callbacks let go).
        held, began = _anonymous_mib(), time.perf_counter()
        gc.collect()
        trimmed = _trim()
        _log(f"{self.label}: job {call} ended, status {code}" + (" (cancelled)" if cancelled else "")
             + f"; memory held {held} MiB, {_anonymous_mib()} MiB after collecting" + (" and trimming" if trimmed else "")
             + f" ({time.perf_counter() - began:.2f} s)")

    def _job(self, call: str, fn, argv: list[str], ctx: JobContext, reader) -> tuple[int, bool]:
        """Run the job in a thread of its own, watched for the knocker's cancel: (status, cancelled)."""
        status: list[int] = []
        job = threading.Thread(target=lambda: status.append(_call(fn, argv, ctx)), name=f"job {call}", daemon=True)
        _log(f"{self.label}: job {call} started in {ctx.cwd}")
        job.start()
        threading.Thread(target=self._watch, args=(reader, ctx, job), name="door-watch", daemon=True).start()
        job.join()
        ctx.ended()
        return (status[0] if status else LOST), ctx.cancelled.is_set()

    def _watch(self, reader, ctx: JobContext, job: threading.Thread) -> None:
        """Cancel the job when the knocker says so, or goes; a cancelled job that does not end
        takes the process with it, so the task is started afresh."""
        try:
            while job.is_alive():
                line = reader.readline(64)
                if not line or line.strip() == b"c":
                    break
        except OSError:
            pass
        if not job.is_alive():
            return
        ctx.cancel()
        job.join(self.cancel_s)
        if job.is_alive():
            _log(f"{self.label}: a cancelled job did not end within {self.cancel_s:g} s; exiting so that the task is started afresh")
            os._exit(BUSY)


def _log(line: str) -> None:
    """The server's log (the node's task log): which jobs ran, and how they ended."""
    print(f"picluster.cluster.door: {line}", file=sys.stderr, flush=True)


def _anonymous_mib() -> int:
    """This process's anonymous resident memory (heap, stacks, tensors), in MiB; -1 if unknown."""
    from picluster.util.processes import memory_status  # here: the knocker imports only the standard library

    try:
        return memory_status()["RssAnon"] >> 20
    except (OSError, KeyError):
        return -1


def _trim() -> bool:
    """Give the heap's free pages back to the system (glibc's malloc_trim, found among the
    process's own symbols); False where there is no such call (another C library)."""
    trim = getattr(ctypes.CDLL(None), "malloc_trim", None)
    if trim is None:
        return False
    trim.argtypes = [ctypes.c_size_t]
    trim(0)
    return True


def _resolve(call: str, allowed: str) -> Callable[[list[str], JobContext], int]:
    return _named(call, allowed)


def _named(call: str, allowed: str) -> Any:
    """The function ``call`` names (module:function), only from the ``allowed`` package."""
    module, sep, name = call.partition(":")
    if not sep or not (module == allowed or module.startswith(allowed + ".")):
        raise ValueError(f"{call!r} is not a picluster job (module:function under {allowed})")
    return getattr(import_module(module), name)


def _call(fn, argv: list[str], ctx: JobContext) -> int:
    try:
        code = fn(argv, ctx)
        return int(code or 0)
    except SystemExit as exc:
        return exc.code if isinstance(exc.code, int) else 1
    except BaseException as exc:  # a bug in the job: said in its output, the server serves on
        for line in traceback.format_exception(exc):
            for part in line.rstrip("\n").splitlines():
                ctx.say(part)
        return 1


def _send(conn: socket.socket, lock: threading.Lock, text: str) -> None:
    with lock:
        try:
            conn.sendall(text.encode("utf-8", errors="replace"))
        except OSError:
            pass  # the knocker is gone: the watcher cancels the job


# -- the knocker ------------------------------------------------------------------------------------

def knock(path: str, call: str, argv: list[str], env: dict[str, str]) -> int:
    """Run ``call`` through the door at ``path``: its output to our stdout, its status returned."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.connect(path)
    except OSError as exc:
        print(f"picluster.cluster.door: no door at {path} ({exc.strerror})", file=sys.stderr, flush=True)
        return UNAVAILABLE

    def cancel(signum, frame) -> None:
        try:
            sock.sendall(b"c\n")
        except OSError:
            pass

    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, cancel)
    sock.sendall(json.dumps({"call": call, "argv": argv, "env": env, "cwd": os.getcwd()}).encode() + b"\n")
    out = sys.stdout
    for raw in sock.makefile("rb"):
        line = raw.decode("utf-8", errors="replace").rstrip("\n")
        if line.startswith("o "):
            out.write(line[2:] + "\n")
            out.flush()
        elif line.startswith("x "):
            return int(line[2:]) if line[2:].strip().lstrip("-").isdigit() else LOST
    print("picluster.cluster.door: the server ended without the job's status (it died, or gave up the job)",
          file=sys.stderr, flush=True)
    return LOST


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) < 4 or args[0] != "--door" or args[2] != "--":
        print("usage: python -m picluster.cluster.door --door PATH -- MODULE:FUNCTION [ARGS...]", file=sys.stderr)
        return 2
    path, call, rest = args[1], args[3], args[4:]
    env = {k: v for k, v in os.environ.items() if k == "TF_CONFIG"}
    return knock(path, call, rest, env)


if __name__ == "__main__":
    sys.exit(main())
