"""known_hosts files as OpenSSH writes and reads them: entries, host patterns, and edits.

    entries = read(Path("~/.ssh/known_hosts").expanduser())   # [Entry], cached while unchanged
    [e for e in entries if e.names("10.0.0.11")]             # plain, [host]:port, hashed, wildcards
    pin(path, "10.0.0.11", "ssh-ed25519 AAAA...")            # in place of that host's entries

Reading is strict: a line that is not an entry raises UsageError with its file and number,
because a damaged line would turn a known node into an unknown one.  Edits hold a lock across
threads and processes and replace the file whole (0600).  Which keys to trust is hostkeys.py's.
"""

import base64
import binascii
import fcntl
import hashlib
import hmac
import os
import re
import threading
from collections.abc import Iterable
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import paramiko

from picluster.util import atomic
from picluster.util.errors import UsageError

SSH_PORT = 22


def fingerprint(key: paramiko.PKey | bytes) -> str:
    """As ``ssh-keygen -l`` writes it: SHA256:<base64, unpadded>."""
    blob = key if isinstance(key, bytes) else key.asbytes()
    return "SHA256:" + base64.b64encode(hashlib.sha256(blob).digest()).decode().rstrip("=")


def host_name(address: str, port: int = SSH_PORT) -> str:
    """How known_hosts names a host: the address, or [address]:port off port 22."""
    return address if port == SSH_PORT else f"[{address}]:{port}"


@dataclass(frozen=True)
class Entry:
    """One line of a known_hosts file."""

    marker: str  # "", "@revoked" or "@cert-authority"
    hosts: str  # the host field: patterns, hashed names
    keytype: str
    blob: bytes
    where: str  # "FILE:LINE", for messages

    def names(self, host: str) -> bool:
        return names(self.hosts, host)

    def describe(self) -> str:
        return f"{self.keytype} {fingerprint(self.blob)} ({self.where})"


def names(field: str, host: str) -> bool:
    """Whether a known_hosts host field names ``host`` ("10.0.0.1" or "[10.0.0.1]:2222"), as
    OpenSSH reads it: comma-separated patterns with * and ?, !negations, hashed |1|salt|hash."""
    host = _plain(host.lower())
    matched = False
    for pattern in field.split(","):
        negated = pattern.startswith("!")
        pattern = pattern[1:] if negated else pattern
        if pattern.startswith("|1|"):
            hit = _hashed(pattern, host)
        else:
            hit = re.fullmatch(_wildcards(_plain(pattern.lower())), host) is not None
        if hit and negated:
            return False
        matched = matched or hit
    return matched


def _plain(name: str) -> str:
    """"[10.0.0.1]:22" is "10.0.0.1": OpenSSH writes the brackets only for another port."""
    suffix = f"]:{SSH_PORT}"
    return name[1:-len(suffix)] if name.startswith("[") and name.endswith(suffix) else name


def _wildcards(pattern: str) -> str:
    """OpenSSH's pattern (* and ? only; brackets are plain characters) as a regular expression."""
    return "".join(".*" if c == "*" else "." if c == "?" else re.escape(c) for c in pattern)


def _hashed(pattern: str, host: str) -> bool:
    try:
        _, _, salt, digest = pattern.split("|", 3)
        mac = hmac.new(base64.b64decode(salt, validate=True), host.encode(), hashlib.sha1).digest()
    except (ValueError, TypeError, binascii.Error):
        return False
    return hmac.compare_digest(base64.b64encode(mac).decode(), digest)


def parse(text: str, source: str) -> list[Entry]:
    """The entries of a known_hosts text; a line that is not one (too few fields, a key that is not
    base64 or does not name its own type) raises UsageError naming ``source`` and the line."""
    entries = []
    for number, line in enumerate(text.splitlines(), 1):
        fields = line.split()
        if not fields or fields[0].startswith("#"):
            continue
        marker = ""
        if fields[0].startswith("@"):
            marker, fields = fields[0], fields[1:]
            if marker not in ("@revoked", "@cert-authority"):
                raise _malformed(source, number, f"unknown marker {marker}")
        if len(fields) < 3:
            raise _malformed(source, number, "want: hosts keytype base64-key")
        hosts, keytype, encoded = fields[0], fields[1], fields[2]
        try:
            blob = base64.b64decode(encoded, validate=True)
        except (binascii.Error, ValueError):
            raise _malformed(source, number, "the key is not base64") from None
        if _blob_type(blob) != keytype:
            raise _malformed(source, number, f"the key is not a {keytype} key")
        entries.append(Entry(marker, hosts, keytype, blob, f"{source}:{number}"))
    return entries


def _blob_type(blob: bytes) -> str | None:
    """The type a public key blob names in its first field (SSH wire format)."""
    if len(blob) < 4:
        return None
    size = int.from_bytes(blob[:4], "big")
    if size > len(blob) - 4:
        return None
    return blob[4 : 4 + size].decode("ascii", "replace")


def _malformed(source: str, number: int, why: str) -> UsageError:
    return UsageError(f"{source}, line {number}: not a known_hosts entry ({why}); fix or remove that line")


_CACHE: dict[str, tuple[tuple[int, int], list[Entry]]] = {}


def read(path: Path, missing_ok: bool = True) -> list[Entry]:
    """A file's entries (kept while its size and time stay the same).  Missing: none, unless
    ``missing_ok`` is False; unreadable or malformed: UsageError."""
    try:
        st = path.stat()
        cached = _CACHE.get(str(path))
        if cached is not None and cached[0] == (st.st_mtime_ns, st.st_size):
            return cached[1]
        text = path.read_text(errors="strict")
    except FileNotFoundError:
        if missing_ok:
            return []
        raise UsageError(f"known_hosts file {path}: no such file") from None
    except UnicodeDecodeError:
        raise UsageError(f"known_hosts file {path}: not a text file") from None
    except OSError as exc:
        raise UsageError(f"known_hosts file {path}: cannot read: {exc.strerror}") from None
    entries = parse(text, str(path))
    _CACHE[str(path)] = ((st.st_mtime_ns, st.st_size), entries)
    return entries


_LOCK = threading.Lock()  # threads of one process; other processes: the file lock below


@contextmanager
def locked(path: Path):
    """The file's lock, across threads and processes (a sibling .lock file: the file itself is
    replaced whole by every edit)."""
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    with _LOCK:
        fd = os.open(path.with_name(path.name + ".lock"), os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)


def append(path: Path, line: str) -> None:
    """``line`` added at the end (the caller holds ``locked(path)``)."""
    text = path.read_text() if path.exists() else ""
    if text and not text.endswith("\n"):
        text += "\n"
    atomic.write_text(path, text + line + "\n", mode=0o600)


def own_entries(path: Path, host: str) -> list[Entry]:
    """The entries ``replace`` would drop: plain lines about ``host`` alone (markers stay, since a
    revocation outlives a new card; wildcard lines stay, since they name other hosts too)."""
    return [e for e in read(path) if not e.marker and _own_line(e.hosts, host)]


def replace(path: Path, host: str, key_line: str | None) -> None:
    """``path`` with ``host``'s own entries replaced by ``key_line`` ("TYPE BASE64"), or removed."""
    with locked(path):
        try:
            text = path.read_text()
        except FileNotFoundError:
            text = ""
        kept = []
        for line in text.splitlines():
            fields = line.split()
            plain = bool(fields) and not fields[0].startswith(("#", "@"))
            if not (plain and len(fields) >= 2 and _own_line(fields[0], host)):
                kept.append(line)
        if key_line is not None:
            kept.append(f"{host} {key_line}")
        atomic.write_text(path, "\n".join(kept) + "\n" if kept else "", mode=0o600)


def forget(path: Path, hosts: Iterable[str]) -> None:
    """Every host's own entries removed from ``path`` (a lab's hosts, at teardown)."""
    if path.exists():
        for host in hosts:
            replace(path, host, None)


def _own_line(field: str, host: str) -> bool:
    return not any(c in field for c in "*?!") and names(field, host)
