"""CPU and memory limits for test hosts: what a host may use of this machine, checked before anything is made.

    limits = resolve(nodes=8, profile="pi3b")      # or cpu=0.5, memory="1G"; UsageError if it cannot fit
    Lab(nodes=8, limits=limits).up()                # each host in a cgroup with these (cgroups.py)

Profiles (``profiles.toml``) are data: a name, a memory size and a CPU share calibrated on this
machine (benchmarks/lab_calibrate.py).  Nothing here knows what kind of host it limits.
"""

import math
import os
import tomllib
from dataclasses import asdict, dataclass
from importlib import resources

from picluster.util.errors import UsageError

# What a host needs before anything is run in it: its sshd, one login's sshd pair and a shell
# peaked at 5.5 MiB in a host's cgroup (kernel memory included); at 3 MiB the login is
# OOM-killed.  Three times the peak leaves room for the login's first command (docs/lab.md).
MIN_MEMORY = 16 * 2**20
MIN_CPU = 0.01  # a CFS quota below 1 % of a core leaves sshd too slow to answer a login in time
MIN_QUOTA_US = 1000  # the kernel's smallest CFS quota
PERIOD_US = 10_000  # short periods: a throttled host waits at most this long, not 100 ms
_UNITS = {"": 1, "K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40}


@dataclass(frozen=True)
class Limits:
    cpu: float | None = None  # cores of CPU time per second
    memory: int | None = None  # bytes, swap included
    profile: str | None = None

    def __bool__(self) -> bool:
        return self.cpu is not None or self.memory is not None

    def describe(self) -> str:
        parts = []
        if self.cpu is not None:
            parts.append(f"{self.cpu:g} CPU")
        if self.memory is not None:
            parts.append(format_bytes(self.memory))
        text = ", ".join(parts) or "none"
        return f"{self.profile}: {text}" if self.profile else text

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict | None) -> "Limits":
        return cls(**(data or {}))

    def quota(self) -> tuple[int, int] | None:
        """(quota, period) in microseconds, with the quota at least the kernel's minimum."""
        if self.cpu is None:
            return None
        period = max(PERIOD_US, math.ceil(MIN_QUOTA_US / self.cpu))
        return max(MIN_QUOTA_US, round(self.cpu * period)), period


def format_bytes(n: int) -> str:
    for unit in ("T", "G", "M", "K"):
        if n >= _UNITS[unit] and n % _UNITS[unit] == 0:
            return f"{n // _UNITS[unit]} {unit}iB"
    return f"{n / 2**20:.1f} MiB"


def parse_memory(text: str) -> int:
    """'1G', '512M', '1.5G', '1073741824' -> bytes (binary units, as the kernel's cgroup files take)."""
    raw = str(text).strip().upper().removesuffix("IB").removesuffix("B")
    unit = raw[-1:] if raw[-1:] in _UNITS and raw[-1:] else ""
    number = raw[: len(raw) - len(unit)] if unit else raw
    try:
        value = float(number)
    except ValueError:
        raise UsageError(f"--memory {text!r} is not a size: write it like 1G, 512M or 1073741824") from None
    if not math.isfinite(value) or value <= 0:
        raise UsageError(f"--memory {text!r} must be a positive size")
    return int(value * _UNITS[unit])


def profiles() -> dict[str, dict]:
    """The profiles shipped with picluster (profiles.toml), by name."""
    text = resources.files("picluster.lab").joinpath("profiles.toml").read_text()
    return tomllib.loads(text)


def profile_link(profile: str | None) -> str | None:
    """The link rate a profile names (None: no profile, or one without a link)."""
    if profile is None:
        return None
    known = profiles()
    if profile not in known:
        raise UsageError(f"unknown profile {profile!r}: known profiles are {', '.join(sorted(known))}")
    return known[profile].get("link")


def machine() -> tuple[float, int]:
    """(cores this process may run on, bytes of physical memory)."""
    cores = len(os.sched_getaffinity(0))
    return float(cores), os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def fair_share(cores: float, nodes: int) -> float:
    """The largest CPU share, to 3 significant digits, that ``nodes`` hosts can each have."""
    share = cores / nodes
    scale = 10 ** (2 - math.floor(math.log10(share)))
    return math.floor(share * scale) / scale


def resolve(nodes: int, cpu: float | None = None, memory: str | int | None = None, profile: str | None = None,
            capacity: tuple[float, int] | None = None) -> Limits:
    """The limits for each of ``nodes`` hosts, from a profile and/or explicit values (which win).

    Every host must fit this machine, and so must all of them at once: hosts that together
    ask for more cores than there are would share cores, not compute side by side."""
    chosen: dict = {}
    if profile is not None:
        known = profiles()
        if profile not in known:
            raise UsageError(f"unknown profile {profile!r}: known profiles are {', '.join(sorted(known))}")
        chosen = {"cpu": known[profile].get("cpu"), "memory": known[profile].get("memory")}
    if cpu is not None:
        chosen["cpu"] = cpu
    if memory is not None:
        chosen["memory"] = memory
    limits = Limits(
        cpu=float(chosen["cpu"]) if chosen.get("cpu") is not None else None,
        memory=parse_memory(chosen["memory"]) if isinstance(chosen.get("memory"), str) else chosen.get("memory"),
        profile=profile,
    )
    cores, ram = capacity or machine()
    if limits.cpu is not None:
        if not math.isfinite(limits.cpu):
            raise UsageError(f"--cpu {limits.cpu:g} is not a number of cores; give one such as 0.5")
        if limits.cpu < MIN_CPU:
            raise UsageError(f"--cpu {limits.cpu:g} is below {MIN_CPU:g} of a core, too little for a host's sshd to answer")
        if limits.cpu > cores:
            raise UsageError(f"--cpu {limits.cpu:g} is more than this machine's {cores:g} cores")
        if limits.cpu * nodes > cores + 1e-9:
            raise UsageError(
                f"{nodes} hosts x {limits.cpu:g} CPU = {limits.cpu * nodes:g} cores, more than this machine's {cores:g}: "
                f"the hosts would share cores instead of computing side by side; use --cpu {fair_share(cores, nodes):g} or fewer nodes"
            )
    if limits.memory is not None:
        if limits.memory < MIN_MEMORY:
            raise UsageError(
                f"--memory {format_bytes(limits.memory)} is below the {format_bytes(MIN_MEMORY)} a host's sshd and one login need"
            )
        if limits.memory * nodes > ram:
            raise UsageError(
                f"{nodes} hosts x {format_bytes(limits.memory)} is more than this machine's {ram / 2**30:.1f} GiB of memory; "
                "use a smaller --memory or fewer nodes"
            )
    return limits
