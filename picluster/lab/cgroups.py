"""One cgroup per test host holding every process of it, in cgroup v1 or v2.

    group = Cgroup(cgroup_name(lab_id, "node01"))
    group.create(limits)                          # limits.Limits
    Popen(..., preexec_fn=group.joiner())         # the host's first process

A host's first process joins its cgroup between fork and exec, so everything the host ever runs
(sshd, every login and what it starts, daemons started with setsid) is a descendant and stays
in it: cgroup membership is inherited and only root outside the host could move it.  Nothing
here knows what kind of host it holds: a VM host would put its emulator in the same way.

cgroup v1 (our machines): ``cpu.cfs_quota_us``/``cpu.cfs_period_us`` in the cpu hierarchy,
``memory.limit_in_bytes`` (and ``memory.memsw.limit_in_bytes``, so nothing swaps beyond it) in
the memory hierarchy, and a group in cpuacct when that is a hierarchy of its own, for the CPU
time used.  cgroup v2 (a unified hierarchy with the cpu and memory controllers): ``cpu.max``,
``memory.max`` and ``memory.swap.max = 0``.  Groups live under ``picluster-lab/<lab>/<host>``
at the hierarchy's root, away from whatever cgroup the calling process was started in; the
``picluster-lab`` parent is left in place, empty, since another lab may be creating its own
group under it at that moment.
"""

import errno
import os
import time
from pathlib import Path

from picluster.lab.limits import Limits
from picluster.util.errors import ClusterError

CGROUP_FS = Path("/sys/fs/cgroup")
PARENT = "picluster-lab"


def cgroup_name(lab_id: str, host: str) -> str:
    return f"{PARENT}/{lab_id}/{host}"


# -- the cgroup file system --------------------------------------------------------------------


def version(root: Path = CGROUP_FS) -> int | None:
    """2 for a unified hierarchy with cpu and memory, 1 for v1 cpu and memory hierarchies, else None."""
    try:
        controllers = (root / "cgroup.controllers").read_text().split()
        if {"cpu", "memory"} <= set(controllers):
            return 2
    except OSError:
        pass
    if (root / "cpu" / "cpu.cfs_quota_us").exists() and (root / "memory" / "memory.limit_in_bytes").exists():
        return 1
    return None


class Cgroup:
    """One host's cgroup, in every hierarchy it needs (v1) or in the unified one (v2)."""

    def __init__(self, name: str, root: Path = CGROUP_FS) -> None:
        self.name = name.strip("/")
        self.root = root
        self.version = version(root)

    # -- where --------------------------------------------------------------------------------

    def _hierarchies(self) -> dict[str, Path]:
        """Controller -> hierarchy root.  v1 may co-mount cpu with cpuacct: each root appears once."""
        if self.version == 2:
            return {"unified": self.root}
        found: dict[str, Path] = {}
        for controller in ("cpu", "cpuacct", "memory"):
            path = (self.root / controller).resolve()
            if path.is_dir() and path not in found.values():
                found[controller] = path
        return found

    def dirs(self) -> dict[str, Path]:
        return {controller: root / self.name for controller, root in self._hierarchies().items()}

    def exists(self) -> bool:
        return any(d.is_dir() for d in self.dirs().values())

    # -- life cycle ----------------------------------------------------------------------------

    def create(self, limits: Limits) -> None:
        """Make the group (or keep it) and write the limits, lifting any left unset; ClusterError
        when this machine cannot limit hosts, or the kernel refuses (e.g. memory below what is in use)."""
        if self.version is None:
            raise ClusterError(
                f"this machine has no cgroup cpu and memory controllers under {self.root}; host limits need them"
            )
        try:
            if self.version == 2:
                self._create_v2(limits)
            else:
                self._create_v1(limits)
        except OSError as exc:
            raise ClusterError(f"cgroup {self.name}: {exc.strerror or exc} ({exc.filename})") from None

    def _create_v1(self, limits: Limits) -> None:
        dirs = self.dirs()
        for path in dirs.values():
            path.mkdir(parents=True, exist_ok=True)
        cpu, memory = dirs["cpu"], dirs["memory"]
        quota = limits.quota()
        if quota is not None:
            # The period first: a quota larger than the old period would be refused otherwise.
            _write(cpu / "cpu.cfs_period_us", quota[1])
            _write(cpu / "cpu.cfs_quota_us", quota[0])
        else:
            _write(cpu / "cpu.cfs_quota_us", -1)
        memsw = memory / "memory.memsw.limit_in_bytes"
        if memsw.exists():  # swap accounting on: memory + swap may never be below memory alone
            _write(memsw, -1)
        _write(memory / "memory.limit_in_bytes", limits.memory if limits.memory is not None else -1)
        if memsw.exists() and limits.memory is not None:
            _write(memsw, limits.memory)  # and no swap beyond the limit

    def _create_v2(self, limits: Limits) -> None:
        path = self.root / self.name
        # Controllers reach a group only through every parent's subtree_control.
        parent = self.root
        for part in Path(self.name).parts:
            _enable(parent, ("cpu", "memory"))
            parent = parent / part
            parent.mkdir(exist_ok=True)
        quota = limits.quota()
        _write(path / "cpu.max", f"{quota[0]} {quota[1]}" if quota is not None else "max")
        _write(path / "memory.max", limits.memory if limits.memory is not None else "max")
        if (path / "memory.swap.max").exists():
            _write(path / "memory.swap.max", 0 if limits.memory is not None else "max")

    def joiner(self):
        """A function that moves the calling process into the group: a Popen ``preexec_fn``.

        The paths are worked out here, before the fork; the child only opens and writes."""
        targets = [str(path / "cgroup.procs") for path in self.dirs().values()]

        def join() -> None:
            pid = str(os.getpid()).encode()
            for target in targets:
                fd = os.open(target, os.O_WRONLY)
                try:
                    os.write(fd, pid)
                finally:
                    os.close(fd)
        return join

    def add(self, pid: int) -> None:
        for path in self.dirs().values():
            _write(path / "cgroup.procs", pid)

    def pids(self) -> list[int]:
        found: set[int] = set()
        for path in self.dirs().values():
            try:
                found |= {int(p) for p in (path / "cgroup.procs").read_text().split()}
            except OSError:
                continue
        return sorted(found)

    def remove(self, timeout: float = 5.0) -> None:
        """Remove the group, whose processes must be gone; then each parent level that is empty,
        up to (not including) ``picluster-lab``."""
        deadline = time.monotonic() + timeout
        for path in self.dirs().values():
            level = path
            while level.name != PARENT and level != self.root and level != level.parent:
                if not _rmdir(level, deadline, busy_ok=level != path):
                    break
                level = level.parent

    # -- reading ------------------------------------------------------------------------------

    def usage(self) -> dict:
        """What the group has used: memory now and at peak, CPU seconds, OOM kills, throttling."""
        out: dict = {}
        dirs = self.dirs()
        if self.version == 2:
            path = dirs["unified"]
            out["memory"] = _read_int(path / "memory.current")
            out["memory_peak"] = _read_int(path / "memory.peak")
            stat = _read_keyed(path / "cpu.stat")
            out["cpu_seconds"] = stat["usage_usec"] / 1e6 if "usage_usec" in stat else None
            out["throttled"] = stat.get("nr_throttled")
            out["oom_kills"] = _read_keyed(path / "memory.events").get("oom_kill")
            out["swap"] = _read_int(path / "memory.swap.current")
            return out
        memory = dirs.get("memory")
        if memory is not None:
            out["memory"] = _read_int(memory / "memory.usage_in_bytes")
            out["memory_peak"] = _read_int(memory / "memory.max_usage_in_bytes")
            out["oom_kills"] = _read_keyed(memory / "memory.oom_control").get("oom_kill")
            out["swap"] = _read_keyed(memory / "memory.stat").get("swap")
        acct = dirs.get("cpuacct") or dirs.get("cpu")
        usage = _read_int(acct / "cpuacct.usage") if acct is not None else None
        out["cpu_seconds"] = usage / 1e9 if usage is not None else None
        if "cpu" in dirs:
            out["throttled"] = _read_keyed(dirs["cpu"] / "cpu.stat").get("nr_throttled")
        return out


def host_mounts(mountinfo: str = "/proc/self/mountinfo", root: Path = CGROUP_FS) -> list[dict]:
    """The cgroup file systems a limited host mounts again, read-only, at the same places.

    A host's first process runs under ``ip netns exec``, which mounts a fresh /sys for the
    network namespace and so hides /sys/fs/cgroup; mounted again, the host's agent can read its
    own group's usage and limits, as a process in a container can."""
    wanted = ("cpu", "cpuacct", "memory")
    found = []
    with open(mountinfo) as f:
        for line in f:
            fields = line.split()
            sep = fields.index("-")
            target, fstype, options = fields[4], fields[sep + 1], fields[sep + 3].split(",")
            if not (target == str(root) or target.startswith(str(root) + "/")):
                continue
            if fstype == "cgroup2" and target == str(root):
                found.append({"fstype": "cgroup2", "options": "", "target": target})
            elif fstype == "cgroup" and any(c in options for c in wanted):
                found.append({"fstype": "cgroup", "options": ",".join(o for o in options if o not in ("rw", "ro")),
                              "target": target})
    return found


def lab_groups(root: Path = CGROUP_FS) -> dict[str, list[str]]:
    """Lab id -> its host groups found under ``picluster-lab`` in any hierarchy (leftovers too)."""
    probe = Cgroup(PARENT, root)
    found: dict[str, set[str]] = {}
    for parent in probe.dirs().values():
        if not parent.is_dir():
            continue
        for lab in parent.iterdir():
            if lab.is_dir():
                found.setdefault(lab.name, set()).update(h.name for h in lab.iterdir() if h.is_dir())
    return {lab: sorted(hosts) for lab, hosts in found.items()}


def _rmdir(path: Path, deadline: float, busy_ok: bool) -> bool:
    """Remove one cgroup directory; False when it is still in use and ``busy_ok`` (a parent of
    others' groups).  A group whose last process just exited may stay busy for a moment."""
    while True:
        try:
            path.rmdir()
            return True
        except FileNotFoundError:
            return True
        except OSError as exc:
            if busy_ok and exc.errno in (errno.ENOTEMPTY, errno.EBUSY):
                return False
            if exc.errno != errno.EBUSY or time.monotonic() > deadline:
                raise ClusterError(f"cannot remove cgroup {path}: {exc.strerror}") from None
            time.sleep(0.05)


def _enable(path: Path, controllers: tuple[str, ...]) -> None:
    control = path / "cgroup.subtree_control"
    enabled = set(control.read_text().split())
    missing = [c for c in controllers if c not in enabled]
    if missing:
        _write(control, " ".join(f"+{c}" for c in missing))


def _write(path: Path, value) -> None:
    with open(path, "w") as f:
        f.write(str(value))


def _read_int(path: Path) -> int | None:
    try:
        return int(path.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None


def _read_keyed(path: Path) -> dict[str, int]:
    out = {}
    try:
        for line in path.read_text().splitlines():
            key, _, value = line.partition(" ")
            try:
                out[key] = int(value)
            except ValueError:
                continue
    except OSError:
        pass
    return out
