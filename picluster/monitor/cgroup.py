"""The calling process's own cgroup, read only: its CPU and memory limits and what it has used.

On a Pi the agent's cgroup has no limits and this reads nothing worth reporting; on a test
host with limits (picluster.lab.limits) the host *is* its cgroup, so the agent reports the
host's share of the machine the way the board would show it: a memory size of 1 GiB, a
fraction of a core.  cgroup v1 (cpu, cpuacct and memory hierarchies) and v2 (unified).
"""

from dataclasses import dataclass
from pathlib import Path

CGROUP_FS = Path("/sys/fs/cgroup")
_UNLIMITED = 1 << 60  # v1 writes "no limit" as the largest page-aligned 64-bit value


@dataclass(frozen=True)
class Usage:
    cpu_limit: float | None  # cores
    cpu_seconds: float | None  # CPU time used by the group since it was made
    memory_limit: int | None  # bytes
    memory_used: int | None
    oom_kills: int | None


def own_paths(proc_cgroup: str = "/proc/self/cgroup") -> dict[str, str]:
    """Controller ("cpu", "memory", ..., or "" for v2) -> the group's path in that hierarchy."""
    paths = {}
    try:
        with open(proc_cgroup) as f:
            for line in f:
                _, controllers, path = line.rstrip("\n").split(":", 2)
                for controller in controllers.split(",") if controllers else [""]:
                    paths[controller] = path
    except OSError:
        pass
    return paths


def read_usage(root: Path = CGROUP_FS, proc_cgroup: str = "/proc/self/cgroup") -> Usage | None:
    """The own group's limits and use, or None when it has no CPU or memory limit (nothing to say)."""
    paths = own_paths(proc_cgroup)
    unified = root / "cgroup.controllers"
    if unified.exists() and "" in paths:
        usage = _v2(root / paths[""].lstrip("/"))
    elif "memory" in paths or "cpu" in paths:
        usage = _v1(root, paths)
    else:
        return None
    if usage.cpu_limit is None and usage.memory_limit is None:
        return None
    return usage


def _v1(root: Path, paths: dict[str, str]) -> Usage:
    cpu = root / "cpu" / paths.get("cpu", "/").lstrip("/")
    acct = root / "cpuacct" / paths.get("cpuacct", paths.get("cpu", "/")).lstrip("/")
    memory = root / "memory" / paths.get("memory", "/").lstrip("/")
    quota, period = _int(cpu / "cpu.cfs_quota_us"), _int(cpu / "cpu.cfs_period_us")
    used = _int(acct / "cpuacct.usage")
    if used is None:
        used = _int(cpu / "cpuacct.usage")  # cpu and cpuacct mounted together
    limit = _int(memory / "memory.limit_in_bytes")
    return Usage(
        cpu_limit=quota / period if quota and quota > 0 and period else None,
        cpu_seconds=used / 1e9 if used is not None else None,
        memory_limit=limit if limit is not None and limit < _UNLIMITED else None,
        memory_used=_int(memory / "memory.usage_in_bytes"),
        oom_kills=_keyed(memory / "memory.oom_control").get("oom_kill"),
    )


def _v2(group: Path) -> Usage:
    cpu_max = _text(group / "cpu.max").split()
    memory_max = _text(group / "memory.max").strip()
    stat = _keyed(group / "cpu.stat")
    return Usage(
        cpu_limit=int(cpu_max[0]) / int(cpu_max[1]) if len(cpu_max) == 2 and cpu_max[0] != "max" else None,
        cpu_seconds=stat["usage_usec"] / 1e6 if "usage_usec" in stat else None,
        memory_limit=int(memory_max) if memory_max.isdigit() else None,
        memory_used=_int(group / "memory.current"),
        oom_kills=_keyed(group / "memory.events").get("oom_kill"),
    )


def _text(path: Path) -> str:
    try:
        return path.read_text()
    except OSError:
        return ""


def _int(path: Path) -> int | None:
    try:
        return int(_text(path).split()[0])
    except (ValueError, IndexError):
        return None


def _keyed(path: Path) -> dict[str, int]:
    out = {}
    for line in _text(path).splitlines():
        key, _, value = line.partition(" ")
        if value.strip().lstrip("-").isdigit():
            out[key] = int(value)
    return out
