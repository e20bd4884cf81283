"""Processes of test hosts: finding every one of them, killing them, and tying them to their owner."""

import os
import time
from collections.abc import Iterable
from pathlib import Path

import psutil


def namespace_inode(pid: int, kind: str) -> int | None:
    """Inode of a process's namespace ("net", "mnt", ...): equal inodes, same namespace."""
    try:
        return os.stat(f"/proc/{pid}/ns/{kind}").st_ino
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return None


def netns_inode(name: str) -> int | None:
    """Inode of a named network namespace (`ip netns add` binds it at /run/netns/NAME)."""
    try:
        return os.stat(f"/run/netns/{name}").st_ino
    except FileNotFoundError:
        return None


def in_namespaces(net: Iterable[int | None], mnt: Iterable[int | None]) -> list[int]:
    """Processes whose network or mount namespace is one of the given inodes.

    Scanning /proc (rather than `ip netns pids`) also finds processes in a namespace whose name
    is already gone, and those that entered only a host's mount namespace.
    """
    net = {inode for inode in net if inode}
    mnt = {inode for inode in mnt if inode}
    found = []
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        pid = int(entry.name)
        if namespace_inode(pid, "net") in net or namespace_inode(pid, "mnt") in mnt:
            found.append(pid)
    return found


def naming_path(directory: Path) -> list[int]:
    """Processes whose command line names a file under `directory` (a VM's qemu names its disks),
    this process and its ancestors excepted."""
    root = os.path.realpath(directory)
    spared = {os.getpid(), *(p.pid for p in psutil.Process().parents())}
    found = []
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit() or int(entry.name) in spared:
            continue
        try:
            with open(f"/proc/{entry.name}/cmdline", "rb") as f:
                args = f.read().decode(errors="replace").split("\0")
        except OSError:
            continue
        if any(root in arg and _names_under(arg, root) for arg in args):
            found.append(int(entry.name))
    return found


def _names_under(arg: str, root: str) -> bool:
    # "file=/x/run/hosts/node01/disk.qcow2,format=qcow2" names /x/run; "/x/run2/..." does not.
    at = arg.find(root)
    while at != -1:
        rest = arg[at + len(root) :]
        if rest == "" or rest[0] in "/,":
            return True
        at = arg.find(root, at + 1)
    return False


def kill_all(pids: Iterable[int], grace: float = 2.0) -> list[int]:
    """SIGTERM, then SIGKILL what is left after `grace` seconds; returns pids still alive."""
    procs = []
    for pid in pids:
        try:
            proc = psutil.Process(pid)
            proc.terminate()
            procs.append(proc)
        except psutil.NoSuchProcess:
            pass
    alive = _wait_gone(procs, grace)
    for proc in alive:
        try:
            proc.kill()
        except psutil.NoSuchProcess:
            pass
    return [proc.pid for proc in _wait_gone(alive, 5.0)]


def _wait_gone(procs: list[psutil.Process], timeout: float) -> list[psutil.Process]:
    # Polled: most are not our children, so there is nothing to wait() on.
    deadline = time.monotonic() + timeout
    while True:
        alive = [proc for proc in procs if _running(proc)]
        if not alive or time.monotonic() > deadline:
            return alive
        time.sleep(0.02)


def _running(proc: psutil.Process) -> bool:
    # A killed child of someone else's stays a zombie until that parent reaps it: dead all the same.
    try:
        return proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False
