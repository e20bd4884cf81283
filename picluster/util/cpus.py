"""How many CPUs this process may really use: its affinity, capped by its cgroup's CPU quota.

TensorFlow sizes its thread pools from the CPUs it can see.  A process in a cgroup with a CPU
quota (a container, a Slurm job with cgroup limits, a test host at a Pi's share of a core) sees
every core of the machine but may only use a fraction of one: a pool of one thread per visible
core then spins and contends within that quota, for no gain.  The same rule as Go's automaxprocs
and the JVM's container support: the quota over its period, rounded up, at most the affinity.

Read from cgroup v2 (``cpu.max``) or v1 (``cpu.cfs_quota_us``/``cpu.cfs_period_us``), along the
process's own cgroup and each of its ancestors (the tightest quota wins).  Anything unreadable
means no quota: the affinity alone.
"""

import math
import os
from pathlib import Path

CGROUP_FS = Path("/sys/fs/cgroup")


def usable(proc_cgroup: Path = Path("/proc/self/cgroup"), root: Path = CGROUP_FS) -> int:
    """CPUs this process may use (at least 1)."""
    try:
        seen = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        seen = os.cpu_count() or 1
    quota = quota_cpus(proc_cgroup, root)
    return max(1, min(seen, math.ceil(quota))) if quota is not None else max(1, seen)


def quota_cpus(proc_cgroup: Path = Path("/proc/self/cgroup"), root: Path = CGROUP_FS) -> float | None:
    """The tightest CPU quota on this process's cgroup and its ancestors, in CPUs; None: none."""
    try:
        lines = proc_cgroup.read_text().splitlines()
    except OSError:
        return None
    found: list[float] = []
    for line in lines:
        _, controllers, path = (line.split(":", 2) + ["", ""])[:3]
        relative = Path(path.lstrip("/"))
        if controllers == "":  # v2: the unified hierarchy
            found += _along(root, relative, _v2)
        elif "cpu" in controllers.split(","):  # v1: the cpu hierarchy, mounted under its controllers' names
            for mount in (root / controllers, root / "cpu", root / "cpu,cpuacct"):
                if mount.is_dir():
                    found += _along(mount, relative, _v1)
                    break
    return min(found) if found else None


def _along(mount: Path, relative: Path, read) -> list[float]:
    quotas = []
    for directory in [mount / relative, *(mount / p for p in relative.parents)]:
        quota = read(directory)
        if quota is not None:
            quotas.append(quota)
    return quotas


def _v2(directory: Path) -> float | None:
    try:
        quota, period = (directory / "cpu.max").read_text().split()[:2]
        return None if quota == "max" else int(quota) / int(period)
    except (OSError, ValueError):
        return None


def _v1(directory: Path) -> float | None:
    try:
        quota = int((directory / "cpu.cfs_quota_us").read_text())
        period = int((directory / "cpu.cfs_period_us").read_text())
    except (OSError, ValueError):
        return None
    return quota / period if quota > 0 and period > 0 else None
