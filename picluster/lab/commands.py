"""Running the system tools the lab is built from (ip, tc, nft, nsenter, ...), and checking they exist."""

import logging
import os
import shutil
import subprocess
from collections.abc import Sequence

from picluster.util import verbosity
from picluster.util.errors import ClusterError

# -v: each tool run, as `[local] run: ip netns add ...` (--debug: how it ended).
log = logging.getLogger(__name__)

SSHD = "/usr/sbin/sshd"
SFTP_SERVER = "/usr/lib/openssh/sftp-server"

# Tool -> the Debian package that ships it, for the one-line hint.
TOOLS = {
    "ip": "iproute2",
    "tc": "iproute2",
    "unshare": "util-linux",
    "nsenter": "util-linux",
    "mount": "mount",
    "umount": "mount",
    "sudo": "sudo",
    "nft": "nftables",
    SSHD: "openssh-server",
    SFTP_SERVER: "openssh-sftp-server",
}


def missing_support() -> str | None:
    """Why the lab cannot run here, in one line, or None when it can."""
    if os.geteuid() != 0:
        return "the test lab needs root (network namespaces, mounts); run as root"
    missing = sorted({pkg for tool, pkg in TOOLS.items() if not _found(tool)})
    if missing:
        return f"the test lab needs Debian packages {', '.join(missing)}: run scripts/lab-deps.sh"
    return None


def require_support() -> None:
    reason = missing_support()
    if reason:
        raise ClusterError(reason)


def _found(tool: str) -> bool:
    if tool.startswith("/"):
        return os.access(tool, os.X_OK)
    return shutil.which(tool) is not None


def said(args: Sequence[str], where: str = "local", verb: str = "run") -> float:
    """Log (-v) a command about to run here (or, ``where``, in a VM host); the time it starts."""
    return verbosity.command(log, where, args, verb)


def ended(started: float, exited: int, where: str = "local", why: str = "") -> None:
    verbosity.ended(log, where, started, exited, why)


def run(
    args: Sequence[str],
    *,
    check: bool = True,
    input: str | None = None,
    timeout: float = 30.0,
    preexec_fn=None,
) -> subprocess.CompletedProcess:
    """Run a tool; on failure raise ClusterError with the tool's own last words."""
    started = said(args)
    try:
        proc = subprocess.run(
            list(args), capture_output=True, text=True, input=input, timeout=timeout, preexec_fn=preexec_fn
        )
    except FileNotFoundError:
        raise ClusterError(f"{args[0]} not found: run scripts/lab-deps.sh") from None
    except subprocess.TimeoutExpired:
        raise ClusterError(f"{' '.join(args)} did not finish within {timeout:g}s") from None
    ended(started, proc.returncode, why=last_line(proc.stderr or proc.stdout))
    if check and proc.returncode != 0:
        raise ClusterError(f"{' '.join(args)} failed: {last_line(proc.stderr or proc.stdout)}")
    return proc


def last_line(text: str) -> str:
    lines = [line.strip() for line in (text or "").splitlines() if line.strip()]
    return lines[-1] if lines else "(no output)"
