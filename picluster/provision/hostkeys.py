"""A node written afresh (its SD card replaced) presents a new host key, which SSH rightly
refuses.  ``provision --replaced NODES`` reads the key each of those nodes presents now, shows its
fingerprint beside the one known_hosts had, and pins it in place of the old entries; then the
node is provisioned as any other.

    key = presented("192.168.1.18", timeout=10)        # paramiko.PKey, as a login would negotiate
    old = pin(Path("~/.ssh/known_hosts"), "192.168.1.18", key)   # fingerprints of the entries replaced

Only the nodes named are touched: a key that changed on any other node still stops that node.
"""

import base64
import hashlib
import hmac
import os
from pathlib import Path

import paramiko

from picluster import atomic
from picluster.cluster.ssh import Unreachable, fingerprint, reach

SSH_PORT = 22


def default_file() -> Path:
    """Where Fabric looks when no --known-hosts is given."""
    return Path(os.path.expanduser("~/.ssh/known_hosts"))


def presented(address: str, timeout: float) -> paramiko.PKey:
    """The host key ``address`` offers a login now (key exchange only: no authentication)."""
    sock = reach(address, SSH_PORT, timeout)
    transport = paramiko.Transport(sock)
    transport.banner_timeout = timeout
    try:
        transport.start_client(timeout=timeout)
        return transport.get_remote_server_key()
    except (paramiko.SSHException, EOFError, OSError) as exc:
        raise Unreachable(f"no host key read: {' '.join(str(exc).split()) or type(exc).__name__}") from None
    finally:
        transport.close()


def _names(field: str, address: str) -> bool:
    """Whether a known_hosts host field names ``address`` (plain, [addr]:22, or hashed)."""
    for name in field.split(","):
        if name in (address, f"[{address}]:{SSH_PORT}"):
            return True
        if name.startswith("|1|"):
            try:
                _, _, salt, digest = name.split("|", 3)
                mac = hmac.new(base64.b64decode(salt), address.encode(), hashlib.sha1).digest()
            except (ValueError, TypeError):
                continue
            if hmac.compare_digest(base64.b64encode(mac).decode(), digest):
                return True
    return False


def entries_for(text: str, address: str) -> list[str]:
    """The lines of a known_hosts text that name ``address`` (markers such as @revoked included)."""
    out = []
    for line in text.splitlines():
        fields = line.split()
        if not fields or fields[0].startswith("#"):
            continue
        host_field = fields[1] if fields[0].startswith("@") and len(fields) > 1 else fields[0]
        if _names(host_field, address):
            out.append(line)
    return out


def pin(path: Path, address: str, key: paramiko.PKey, dry_run: bool = False) -> list[str]:
    """``path`` with ``address``'s entries replaced by ``key``; the fingerprints replaced."""
    try:
        text = path.read_text()
    except FileNotFoundError:
        text = ""
    old = entries_for(text, address)
    replaced = []
    for line in old:
        try:
            entry = paramiko.hostkeys.HostKeyEntry.from_line(line)
        except (paramiko.SSHException, ValueError, TypeError):
            entry = None
        replaced.append(fingerprint(entry.key) if entry is not None and entry.key is not None else "an unreadable entry")
    if not dry_run:
        kept = [line for line in text.splitlines() if line not in old]
        kept.append(f"{address} {key.get_name()} {key.get_base64()}")
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        atomic.write_text(path, "\n".join(kept) + "\n", mode=0o600)
    return replaced
