"""Whether a recorded pid is still the process that was recorded: pids are reused.

A record (a job's coordinator, a lab host, a VM, a lab's owner) keeps the pid, the process's
start time and, where it can, its command line.  Nothing is signalled, or counted as alive, on
the pid alone: another process may hold that pid now.
"""

import psutil

# psutil's create_time on Linux is the boot time (whole seconds, from /proc/stat) plus the start
# in clock ticks (1/100 s): every reader of one process gets the same number, save float rounding.
# Another process that took over the pid started at least one tick later, since the pid had to be
# freed and handed out again.  So the tolerance stays below one tick.  (A clock step moves the boot
# time by whole seconds; no tolerance small enough to be safe would hide that, and the answer is
# then "not the same process": safe for signals, a stale record at worst.)
START_TOLERANCE_S = 0.005


def memory_status(pid: int | str = "self") -> dict[str, int]:
    """The sizes ``/proc/PID/status`` gives in kB (VmRSS, RssAnon, RssFile, RssShmem, VmHWM,
    VmSwap, ...), in bytes.  Raises OSError when the process is gone or not readable."""
    out = {}
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            key, _, value = line.partition(":")
            parts = value.split()
            if len(parts) == 2 and parts[1] == "kB":
                out[key] = int(parts[0]) * 1024
    return out


def start_time(pid: int) -> float | None:
    """The process's start time as ``same_process`` compares it; None when it is gone."""
    try:
        return psutil.Process(pid).create_time()
    except psutil.Error:
        return None


def command_line(pid: int) -> list[str] | None:
    try:
        return psutil.Process(pid).cmdline()
    except psutil.Error:
        return None


def same_process(pid: int | None, started: float | None, cmdline: list[str] | None = None) -> bool:
    """Whether ``pid`` is alive (not a zombie) and is the process recorded as started at ``started``
    with ``cmdline`` (checked when recorded).  No start time: it cannot be proven, so False."""
    if not _number(pid, int) or not _number(started, (int, float)):
        return False
    assert pid is not None and started is not None
    if pid <= 0:
        return False
    try:
        proc = psutil.Process(pid)
        if not abs(proc.create_time() - started) <= START_TOLERANCE_S:  # NaN too
            return False
        if proc.status() == psutil.STATUS_ZOMBIE:
            return False
        return cmdline is None or proc.cmdline() == list(cmdline)
    except (psutil.Error, TypeError, ValueError, OverflowError):  # records are read from files: any value
        return False


def _number(value, kind) -> bool:
    return isinstance(value, kind) and not isinstance(value, bool)
