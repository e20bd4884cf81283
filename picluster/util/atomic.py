"""Files replaced whole: a reader sees the old file or the new one, never a part of either.

Readers are often other processes, and sometimes other machines (the coordinator mirrors a
node's files over SFTP; every node reads the share over NFS), so every file picluster rewrites
goes through here: written beside its target, flushed to disk, then renamed over it.  An
interrupted or failed write leaves the old file and no temporary one; a full disk, a read-only
file system or a permission denied becomes one StorageError naming the target and the cause.
"""

import errno
import json
import os
import secrets
import stat
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any

from picluster.util.errors import StorageError

# What the storage under a path can refuse: full, over quota, read-only, not ours, failing.
STORAGE_ERRNOS = {errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EACCES, errno.EPERM, errno.EIO, errno.EFBIG}


@contextmanager
def replacing(path: Path, binary: bool = False, mode: int = 0o666, newline: str | None = None) -> Iterator[IO[Any]]:
    """Yield a file to write; on a clean exit it replaces ``path``.

    ``mode`` is filtered by the umask, as for any new file: a data set on the share must stay
    readable by every node's user, a key or a state file can ask for 0o600.
    """
    path = Path(path)
    not_a_file(path)
    tmp = path.with_name(f".{path.name}.{secrets.token_hex(4)}.part")
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
    except OSError as exc:
        raise StorageError(path, exc) from None
    try:
        with os.fdopen(fd, "wb" if binary else "w", newline=newline) as out:
            try:
                yield out
                out.flush()
                os.fsync(out.fileno())
            except StorageError:
                raise
            except OSError as exc:  # ENOSPC shows at write, flush or fsync; the caller's own OSErrors too
                if exc.errno not in STORAGE_ERRNOS:
                    raise
                raise StorageError(path, exc) from None
        os.replace(tmp, path)
    except BaseException as exc:
        tmp.unlink(missing_ok=True)
        if isinstance(exc, OSError) and not isinstance(exc, StorageError) and exc.errno in STORAGE_ERRNOS:
            raise StorageError(path, exc) from None  # the close after a failed flush, or the rename
        raise


def not_a_file(path: Path) -> None:
    """Raise StorageError when ``path`` exists as something other than a regular file.

    A rename would replace it: ``--csv /dev/sda`` run as root would swap the disk's device node
    for a CSV file, ``/dev/full`` would stop being full.  A symbolic link to a file is replaced
    as a link (the file it points to is left as it was)."""
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return  # absent (or unreachable: the write itself will say why)
    if not stat.S_ISREG(mode):
        kind = "a directory" if stat.S_ISDIR(mode) else "a device, pipe or socket"
        raise StorageError(path, f"it is {kind}, not a regular file; name a file")


def write_bytes(path: Path, data: bytes, mode: int = 0o666) -> None:
    with replacing(path, binary=True, mode=mode) as out:
        out.write(data)


def write_text(path: Path, text: str, mode: int = 0o666) -> None:
    with replacing(path, mode=mode) as out:
        out.write(text)


def write_json(path: Path, data: Any, mode: int = 0o666) -> None:
    write_text(path, json.dumps(data, indent=1), mode)


def check_room(directory: Path, nbytes: int = 64 * 1024) -> None:
    """Raise StorageError unless ``nbytes`` can be written to a new file in ``directory`` and reach
    the disk: a full file system still lets a file be made (an inode), then refuses its first
    block.  Checked before work that starts servers for nothing otherwise; an unnamed temporary
    file, so nothing appears there."""
    try:
        with tempfile.TemporaryFile(dir=directory) as probe:
            probe.write(b"\0" * nbytes)
            probe.flush()
            os.fsync(probe.fileno())
    except OSError as exc:
        raise StorageError(directory, exc) from None


def check_writable(directory: Path) -> None:
    """Raise StorageError unless a file can be created in ``directory`` (checked before work that
    would be lost: an unnamed temporary file, so nothing appears there)."""
    try:
        with tempfile.TemporaryFile(dir=directory):
            pass
    except OSError as exc:
        raise StorageError(directory, exc) from None
