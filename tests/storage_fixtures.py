"""Real storage faults for tests: a small tmpfs that can be filled or made read-only (root).

Not a mock: the kernel answers ENOSPC and EROFS, exactly as a full SD card or a share mounted
read-only would.  The file system is unmounted (lazily, should a process still hold it) at the end.
"""

import os
import subprocess
from pathlib import Path

import pytest


class SmallDisk:
    def __init__(self, path: Path) -> None:
        self.path = path
        self._filler = path / ".filler"

    def fill(self) -> None:
        """Take every free block, down to the last byte."""
        fd = os.open(self._filler, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        try:
            for size in (1 << 20, 65536, 4096, 512, 1):
                try:
                    while os.write(fd, b"\0" * size):
                        pass
                except OSError:
                    pass
        finally:
            os.close(fd)

    def free(self) -> None:
        self._filler.unlink(missing_ok=True)

    def read_only(self, on: bool = True) -> None:
        subprocess.run(["mount", "-o", f"remount,{'ro' if on else 'rw'}", str(self.path)], check=True)


@pytest.fixture
def small_disk(tmp_path):
    """A 16 MiB tmpfs at tmp_path/disk.  Needs root (like the lab tests): fails, never skips, without it."""
    if os.geteuid() != 0:
        pytest.fail("storage fault tests mount a tmpfs: run them as root (./dev test does)")
    path = tmp_path / "disk"
    path.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=16m,mode=0755", "tmpfs", str(path)], check=True)
    try:
        yield SmallDisk(path)
    finally:
        subprocess.run(["umount", "-l", str(path)], check=False)
