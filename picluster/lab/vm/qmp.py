"""The few QEMU Machine Protocol commands the harness sends a VM: power button, quit.

QMP is qemu's JSON control socket (-qmp unix:PATH,server=on,wait=off); no client library needed.
"""

import json
import socket
from pathlib import Path

from picluster.errors import ClusterError


def command(path: Path, execute: str, timeout: float = 5.0) -> dict:
    """Send one command; returns its "return" value.  ClusterError if qemu does not answer."""
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
            sock.settimeout(timeout)
            sock.connect(str(path))
            stream = sock.makefile("rwb")
            _read(stream)  # the greeting
            for name in ("qmp_capabilities", execute):
                stream.write(json.dumps({"execute": name}).encode() + b"\r\n")
                stream.flush()
                reply = _reply(stream)
            return reply
    except (OSError, ValueError) as exc:
        raise ClusterError(f"qemu control socket {path}: {exc}") from None


def _read(stream) -> dict:
    line = stream.readline()
    if not line:
        raise ValueError("closed by qemu")
    return json.loads(line)


def _reply(stream) -> dict:
    # Asynchronous events (POWERDOWN, SHUTDOWN, ...) may come before the reply.
    while True:
        message = _read(stream)
        if "return" in message:
            return message["return"]
        if "error" in message:
            raise ValueError(message["error"].get("desc", "error"))
