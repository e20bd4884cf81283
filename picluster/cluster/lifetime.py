"""Processes that must not outlive the coordinator that started them."""

import ctypes
import os
import signal
from pathlib import Path

_PR_SET_PDEATHSIG = 1


def die_with_parent(parent: int | None = None, sig: int = signal.SIGKILL) -> None:
    """Ask the kernel to send us ``sig`` (SIGKILL) when our parent exits, even if it is killed with SIGKILL.

    With ``parent`` (its pid), also exit at once if it died before the request took effect.
    Without, it is safe as a Popen ``preexec_fn``, where the parent is alive by construction.
    """
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(_PR_SET_PDEATHSIG, sig)
    if parent is not None and os.getppid() != parent:
        os._exit(0)


def signal_group(pid: int, sig: int) -> None:
    """Signal ``pid``'s process group (it leads its own session), else the process alone."""
    try:
        os.killpg(pid, sig)
    except (ProcessLookupError, PermissionError):
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            pass


def last_line(log: Path) -> str:
    """The line of a child's log that most likely says why it stopped: the last error, else the last."""
    try:
        lines = [ln.strip() for ln in log.read_text(errors="replace").splitlines() if ln.strip()]
    except OSError:
        return "no log"
    telling = [ln for ln in lines if "error" in ln.lower() or "refusing" in ln]
    return (telling or lines or ["no output"])[-1][:300]
