"""Fingerprints of directory trees, to show what changed: inside a host's overlays, or on the real machine.

An entry's fingerprint covers its type, mode, owner and content (not times), so rewriting a file
with the same bytes is no change.  Typical use in a test:

    before = snapshot.take(snapshot.REAL_PATHS)
    ...provision the lab...
    assert snapshot.diff(before, snapshot.take(snapshot.REAL_PATHS)) == []
"""

import hashlib
import os
import stat
from dataclasses import dataclass
from pathlib import Path

# What provisioning writes on a Pi, as seen on the real machine.  /mnt is left out: it holds
# mounts of the machine's own that are none of our business.
REAL_PATHS = ("/etc", "/boot", "/home", "/srv")


@dataclass(frozen=True, order=True)
class Change:
    path: str
    kind: str  # "added", "modified" or "deleted"

    def __str__(self) -> str:
        return f"{self.kind} {self.path}"


def fingerprint(path: str | Path) -> str | None:
    """None for an absent entry and for an overlayfs whiteout (a deletion recorded in an upper dir)."""
    try:
        st = os.lstat(path)
    except (FileNotFoundError, NotADirectoryError):
        return None
    owner = f"{stat.S_IMODE(st.st_mode):o} {st.st_uid}:{st.st_gid}"
    if stat.S_ISDIR(st.st_mode):
        return f"dir {owner}"
    if stat.S_ISLNK(st.st_mode):
        return f"link {os.readlink(path)}"
    if stat.S_ISREG(st.st_mode):
        return f"file {owner} {_sha256(path)}"
    if stat.S_ISCHR(st.st_mode) or stat.S_ISBLK(st.st_mode):
        if stat.S_ISCHR(st.st_mode) and st.st_rdev == 0:
            return None
        return f"dev {owner} {os.major(st.st_rdev)}:{os.minor(st.st_rdev)}"
    return f"special {owner} {stat.S_IFMT(st.st_mode):o}"


def _sha256(path: str | Path) -> str:
    digest = hashlib.sha256()
    try:
        with open(path, "rb") as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                digest.update(block)
    except OSError as exc:  # e.g. a file that vanished while we walked
        return f"unreadable({exc.errno})"
    return digest.hexdigest()


def tree(root: str | Path) -> dict[str, str | None]:
    """Fingerprint of every entry below `root`, keyed by path relative to it; stays on one filesystem."""
    root = str(root)
    try:
        root_dev = os.lstat(root).st_dev
    except FileNotFoundError:
        return {}
    result: dict[str, str | None] = {}
    for dirpath, dirnames, filenames in os.walk(root):
        kept = []
        for name in dirnames:
            full = os.path.join(dirpath, name)
            result[os.path.relpath(full, root)] = fingerprint(full)
            try:
                if os.lstat(full).st_dev == root_dev:
                    kept.append(name)
            except FileNotFoundError:
                pass
        dirnames[:] = kept
        for name in filenames:
            full = os.path.join(dirpath, name)
            result[os.path.relpath(full, root)] = fingerprint(full)
    return result


def take(paths=REAL_PATHS) -> dict[str, str | None]:
    """Fingerprints of the trees at `paths`, keyed by absolute path."""
    result: dict[str, str | None] = {}
    for top in paths:
        result[top] = fingerprint(top)
        for rel, value in tree(top).items():
            result[os.path.join(top, rel)] = value
    return result


def diff(before: dict[str, str | None], after: dict[str, str | None]) -> list[Change]:
    changes = []
    for path in sorted(set(before) | set(after)):
        old, new = before.get(path), after.get(path)
        if old == new:
            continue
        kind = "added" if old is None else "deleted" if new is None else "modified"
        changes.append(Change(path, kind))
    return changes
