"""A node's own servers and agent by their pid files: which run, which died and how, stopping them.

This file runs on the node, as a script: ``cluster up`` writes it into the node's run folder beside
``start.sh`` (nodecluster.py) and runs it there with the node's ``python3``, as do the boot's start
script, ``cluster down`` and a training replica that stands in for its node's worker server
(jobfolder.py).  So it imports nothing but the standard library: it must answer on a node whose
venv lacks picluster (and say why its servers died), and it is always the coordinator's version.

In the run folder each process NAME has:

  NAME.pid    its pid, as daemons write it; put in place once NAME.start is written
  NAME.start  its start: the boot's id and the start time in clock ticks (/proc/PID/stat)
  NAME.ready  written by the process once it serves
  NAME.exit   its exit status, written by the shell that waits for it
  NAME.log    its output

A pid file names a process only while that pid is alive with the recorded start and runs one of
picluster's node modules: the proof processes.same_process makes (pid and start time), in the
kernel's own units, so it is exact.  After a reboot or a crash the pid names whatever took that
number since, even another picluster process, and nothing is signalled or counted as running on
the pid alone.  A pid file without its start file (written by a picluster from before start
files) is taken on its pid and module, as that picluster did.
"""

from __future__ import annotations  # a node's python3 may be older than ours (3.9 on Bullseye)

import argparse
import json
import os
import re
import signal
import sys
import time
from collections.abc import Iterable
from pathlib import Path

MODULES = ("picluster.cluster.server", "picluster.monitor.agent")  # what a node's pid files may name
NAME = re.compile(r"[A-Za-z0-9_-]+\Z")  # "ps-0", "worker-1", "agent": never a path
EXIT_WAIT_S = 0.3  # for a watcher shell to write the exit status of what just died
STOP_WAIT_S = 5.0  # between SIGTERM and SIGKILL
EXIT_WAIT_S = 2.0  # for the waiting shell to write NAME.exit once its process is gone


def start_of(pid: int) -> str | None:
    """The process's start, "BOOT_ID TICKS"; None when it is gone or a zombie (it has exited)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        boot = Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    except OSError:
        return None
    fields = stat[stat.rindex(")") + 2:].split()  # after "PID (COMM) ", which may hold spaces
    return None if fields[0] in ("Z", "X") else f"{boot} {fields[19]}"  # state; starttime (field 22)


def seal(folder: Path, name: str) -> None:
    """Record the start of the process whose pid the watcher shell wrote to NAME.pid.new, then put
    its pid file in place: a reader that finds NAME.pid finds its start too.  A process that died
    already gets an empty start, so nothing ever proves it (its NAME.exit tells why)."""
    pid = int((folder / f"{name}.pid.new").read_text())
    _write(folder / f"{name}.start", start_of(pid) or "")
    os.replace(folder / f"{name}.pid.new", folder / f"{name}.pid")


def running(folder: Path, name: str, modules: Iterable[str] = MODULES) -> int | None:
    """The pid NAME.pid names, while that process is alive, is the one recorded, and runs one of ``modules``."""
    try:
        pid = int((folder / f"{name}.pid").read_text())
    except (OSError, ValueError):
        return None
    if pid <= 0:
        return None
    now = start_of(pid)
    recorded: str | None
    try:
        recorded = (folder / f"{name}.start").read_text().strip()
    except FileNotFoundError:
        recorded = now  # an older picluster's pid file: its pid and module only
    except OSError:
        return None
    if now is None or now != recorded:
        return None
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace").split("\0")
    except OSError:
        return None
    return pid if any(module in cmdline for module in modules) else None


def check(folder: Path, names: list[str], tail: int) -> dict[str, tuple[str, int | None, list[str]]]:
    """NAME -> ("ready" | "alive" | "dead", exit status or None, the last ``tail`` log lines when dead)."""
    states: dict[str, tuple[str, int | None, list[str]]] = {}
    waited = False
    for name in names:
        if running(folder, name) is not None:
            states[name] = ("ready" if (folder / f"{name}.ready").exists() else "alive", None, [])
            continue
        if not (folder / f"{name}.exit").exists() and not waited:
            time.sleep(EXIT_WAIT_S)  # once: its watcher writes the status as soon as it is gone
            waited = True
        states[name] = ("dead", _status(folder / f"{name}.exit"), _tail(folder / f"{name}.log", tail))
    return states


def stop(folder: Path, names: list[str], wait: float = STOP_WAIT_S) -> list[str]:
    """SIGTERM each named process that runs (its group first), SIGKILL what outlives ``wait``, wait
    until all are gone, then remove their pid, start, ready and exit files; the names it stopped."""
    pids = {name: pid for name in names if (pid := running(folder, name)) is not None}
    starts = {name: start_of(pid) for name, pid in pids.items()}
    for pid in pids.values():
        _signal(pid, signal.SIGTERM)
    alive = _wait_gone(pids, starts, wait)
    for name in alive:
        _signal(pids[name], signal.SIGKILL)
    if still := _wait_gone({n: pids[n] for n in alive}, starts, wait):
        raise SystemExit(f"{', '.join(still)}: still running after SIGKILL")
    # The shell that waited for each writes its NAME.exit just after it ends: wait for those
    # (briefly: a process started otherwise has no such shell), so none is left behind.
    deadline = time.monotonic() + EXIT_WAIT_S
    while any(not (folder / f"{name}.exit").exists() for name in pids) and time.monotonic() < deadline:
        time.sleep(0.05)
    for name in names:
        for suffix in ("pid", "start", "ready", "exit"):
            (folder / f"{name}.{suffix}").unlink(missing_ok=True)
    return sorted(pids)


def _signal(pid: int, sig: signal.Signals) -> None:
    try:
        os.killpg(pid, sig)  # a process that leads its own group takes its children along
    except (ProcessLookupError, PermissionError):
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            pass


def _wait_gone(pids: dict[str, int], starts: dict[str, str | None], wait: float) -> list[str]:
    deadline = time.monotonic() + wait
    while True:
        alive = [name for name, pid in pids.items() if start_of(pid) == starts[name]]
        if not alive or time.monotonic() > deadline:
            return alive
        time.sleep(0.1)


def _write(path: Path, text: str) -> None:
    new = path.with_name(path.name + ".new")
    new.write_text(text)
    os.replace(new, path)


def _status(path: Path) -> int | None:
    try:
        return int(path.read_text())
    except (OSError, ValueError):
        return None


def _tail(path: Path, lines: int) -> list[str]:
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return []
    return text.splitlines()[-lines:] if lines > 0 else []


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python3 pidfiles.py", description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--dir", type=Path, default=Path("."), help="the node's run folder (default: here)")
    verbs = parser.add_subparsers(dest="verb", required=True)
    verbs.add_parser("seal").add_argument("name")
    is_running = verbs.add_parser("running", help="exit 0 when NAME's process runs MODULE, else 1")
    is_running.add_argument("name")
    is_running.add_argument("module", choices=MODULES)
    checking = verbs.add_parser("check", help="each NAME's state as JSON")
    checking.add_argument("names", nargs="+")
    checking.add_argument("--tail", type=int, default=5)
    stopping = verbs.add_parser("stop", help="stop each NAME (every NAME.pid here without one); print those stopped")
    stopping.add_argument("names", nargs="*")
    stopping.add_argument("--wait", type=float, default=STOP_WAIT_S)
    args = parser.parse_args(argv)
    names = [args.name] if args.verb in ("seal", "running") else args.names
    if args.verb == "stop" and not names:
        names = sorted(p.name.removesuffix(".pid") for p in args.dir.glob("*.pid"))
    if bad := [n for n in names if not NAME.match(n)]:
        parser.error(f"not a process name: {bad[0]!r}")
    if args.verb == "seal":
        seal(args.dir, args.name)
    elif args.verb == "running":
        return 0 if running(args.dir, args.name, [args.module]) is not None else 1
    elif args.verb == "check":
        print(json.dumps(check(args.dir, names, args.tail)))
    else:
        for name in stop(args.dir, names, args.wait):
            print(f"stopped {name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
