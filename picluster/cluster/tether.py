"""A command tied to a lifeline: ``python -m picluster.cluster.tether [--grace S] [--heartbeat S] -- COMMAND...``.

``launch`` starts every task of a job through this, on this machine or on a node over SSH.  It
runs COMMAND in its own process group and stops the whole group — SIGTERM, ``--grace`` seconds,
then SIGKILL — when its lifeline goes: its stdin closes (the coordinator's pipe, or the SSH
channel sshd closes when the coordinator dies, even by SIGKILL), nothing arrives on it for
``--heartbeat`` seconds (the coordinator writes a byte every few seconds: a node cut off from it
hears nothing, while sshd may not notice the dead connection for hours), it gets
SIGTERM/SIGINT/SIGHUP, or (``--parent``) the coordinator process exits.  Whatever COMMAND left in its group is killed
when it ends, so no process of a job outlives it.  The exit status is COMMAND's, or 128 + N
when signal N ended it, as a shell reports it: TFJob's classes (1-127 permanent, 128-255
retryable) then read the same whether the task ran here or on a node.

Only the standard library is imported: the tether starts in a few milliseconds, before the
command's own (much slower) imports.
"""

import argparse
import os
import signal
import subprocess
import sys
import threading
import time

from picluster.cluster.lifetime import die_with_parent

DEFAULT_GRACE_S = 10.0


def exit_status(returncode: int) -> int:
    """Popen's returncode as a shell's exit status: -9 -> 137."""
    return 128 - returncode if returncode < 0 else returncode


class Lifeline:
    """Our stdin: its end, or (with a heartbeat) ``heartbeat`` seconds without a byte, means the
    coordinator is gone; silence catches what an end cannot, a network cut from a node."""

    def __init__(self, heartbeat: float) -> None:
        self.heartbeat = heartbeat
        self.last = time.monotonic()
        self.ended = threading.Event()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        try:
            while os.read(0, 4096):
                self.last = time.monotonic()
        except OSError:
            pass
        self.ended.set()

    def lost(self) -> str | None:
        if self.ended.is_set():
            return "lifeline closed"
        if self.heartbeat and time.monotonic() - self.last > self.heartbeat:
            return f"no heartbeat from the coordinator for {self.heartbeat:g} s"
        return None


def _kill_group(pgid: int, sig: int) -> None:
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def run(command: list[str], grace: float, parent: int | None = None, heartbeat: float = 0.0) -> int:
    stopped: list[str] = []

    def on_signal(signum, frame) -> None:
        stopped.append(signal.Signals(signum).name)

    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, on_signal)
    if parent is not None:
        # SIGTERM, not SIGKILL: the tether must live to stop its command's group.
        die_with_parent(parent, signal.SIGTERM)
    try:
        child = subprocess.Popen(command, stdin=subprocess.DEVNULL, process_group=0, preexec_fn=die_with_parent)
    except OSError as exc:
        print(f"picluster.cluster.tether: cannot start {command[0]}: {exc.strerror}", file=sys.stderr, flush=True)
        return 127 if isinstance(exc, FileNotFoundError) else 126
    lifeline = Lifeline(heartbeat)
    while child.poll() is None:
        time.sleep(0.1)
        why = stopped[0] if stopped else lifeline.lost()
        if why and child.poll() is None:
            print(f"picluster.cluster.tether: {why}: stopping the task (SIGTERM, SIGKILL after {grace:g} s)", file=sys.stderr, flush=True)
            _kill_group(child.pid, signal.SIGTERM)
            deadline = time.monotonic() + grace
            while child.poll() is None and time.monotonic() < deadline:
                time.sleep(0.05)
            break
    _kill_group(child.pid, signal.SIGKILL)  # whatever is left of the task's group
    return exit_status(child.wait())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m picluster.cluster.tether")
    parser.add_argument("--grace", type=float, default=DEFAULT_GRACE_S, help="seconds between SIGTERM and SIGKILL")
    parser.add_argument("--parent", type=int, default=None, help="also stop when this process exits")
    parser.add_argument("--heartbeat", type=float, default=0.0,
                        help="also stop after this many seconds without a byte on stdin (0: only its end counts)")
    parser.add_argument("command", nargs=argparse.REMAINDER)
    args = parser.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("no command given")
    return run(command, args.grace, args.parent, args.heartbeat)


if __name__ == "__main__":
    sys.exit(main())
