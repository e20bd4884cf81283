"""A command tied to a lifeline: ``python -m picluster.cluster.tether [--grace S] -- COMMAND...``.

``launch`` starts every task of a job through this, on this machine or on a node over SSH.  It
runs COMMAND in its own process group and stops the whole group — SIGTERM, ``--grace`` seconds,
then SIGKILL — when its lifeline goes: its stdin closes (the coordinator's pipe, or the SSH
channel sshd closes when the coordinator dies, even by SIGKILL), it gets SIGTERM/SIGINT/SIGHUP,
or (``--parent``) the coordinator process exits.  Whatever COMMAND left in its group is killed
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


def _watch_stdin(stop: threading.Event) -> None:
    try:
        while os.read(0, 4096):
            pass  # nothing is ever sent; only the end matters
    except OSError:
        pass
    stop.set()


def _kill_group(pgid: int, sig: int) -> None:
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def run(command: list[str], grace: float, parent: int | None = None) -> int:
    stop = threading.Event()
    reason: list[str] = []

    def on_signal(signum, frame) -> None:
        reason.append(signal.Signals(signum).name)
        stop.set()

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
    threading.Thread(target=_watch_stdin, args=(stop,), daemon=True).start()
    while child.poll() is None:
        if stop.wait(0.1) and child.poll() is None:
            why = reason[0] if reason else "lifeline closed"
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
    parser.add_argument("command", nargs=argparse.REMAINDER)
    args = parser.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("no command given")
    return run(command, args.grace, args.parent)


if __name__ == "__main__":
    sys.exit(main())
