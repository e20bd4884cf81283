"""What ``picluster launch`` was asked to run, checked before anything starts.

The script is untrusted input in one sense only: it must exist, be a file and compile (a syntax
error is reported here, as ``SCRIPT:LINE: ...``, not by every node after the cluster started
it).  ``--dir`` names the folder staged with it in each-worker mode; its size is bounded, so a
mistaken ``--dir ~`` stops here instead of copying a home directory to every node.
"""

import os
import re
from dataclasses import dataclass
from pathlib import Path

from picluster.util.errors import UsageError

MODES = ("coordinator", "each-worker")
DEFAULT_GRACE_S = 10.0
MAX_FILES = 2000
MAX_BYTES = 200 * 2**20
SKIPPED_DIRS = {".git", "__pycache__", ".venv", ".mypy_cache", ".pytest_cache"}
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")


@dataclass(frozen=True)
class LaunchConfig:
    script: Path  # absolute
    args: tuple[str, ...]
    mode: str
    folder: Path  # the task's working directory here; staged whole with --dir
    whole_folder: bool = False  # --dir given: stage the folder, not the script alone
    restart_limit: int = 0
    grace_s: float = DEFAULT_GRACE_S
    name: str = ""

    @property
    def relative_script(self) -> str:
        return self.script.relative_to(self.folder).as_posix()

    def command_line(self) -> list[str]:
        return [str(self.script), *self.args]

    def files(self) -> list[tuple[str, Path]]:
        """What each-worker mode stages on a node: (relative path, local file)."""
        return staged_files(self.folder) if self.whole_folder else [(self.script.name, self.script)]


@dataclass(frozen=True)
class Restarts:
    """What a failed task gets (--restart-limit) and how long a stopped one has to end (--grace)."""

    limit: int = 0
    grace_s: float = DEFAULT_GRACE_S


def make(script: str | Path, args: tuple[str, ...] | list[str], mode: str, folder: str | Path | None = None,
         restarts: Restarts = Restarts(), name: str | None = None) -> LaunchConfig:
    """A checked config; every problem is one UsageError line naming the argument."""
    restart_limit, grace_s = restarts.limit, restarts.grace_s
    if mode not in MODES:
        raise UsageError(f"--mode {mode!r}: choose one of {', '.join(MODES)}")
    path = Path(script).expanduser()
    if not path.exists():
        raise UsageError(f"SCRIPT {script}: no such file")
    if not path.is_file():
        raise UsageError(f"SCRIPT {script}: not a file")
    path = path.resolve()
    _check_syntax(path, str(script))
    if folder is not None and mode == "coordinator":
        raise UsageError("--dir goes with --mode each-worker: in coordinator mode SCRIPT runs here, where it is")
    if folder is None:
        base = path.parent
    else:
        base = Path(folder).expanduser().resolve()
        if not base.is_dir():
            raise UsageError(f"--dir {folder}: not a directory")
        if base not in path.parents:
            raise UsageError(f"--dir {folder}: SCRIPT {script} is not inside it")
        staged_files(base)  # bounded before anything is copied
    if restart_limit < 0:
        raise UsageError("--restart-limit must be 0 or more")
    if not 0 <= grace_s <= 3600:
        raise UsageError("--grace must be between 0 and 3600 seconds")
    job_name = name if name is not None else path.stem
    if not _NAME.match(job_name):
        raise UsageError(f"--name {job_name!r}: use up to 64 letters, digits, '.', '_' or '-'")
    return LaunchConfig(path, tuple(args), mode, base, folder is not None, restart_limit, grace_s, job_name)


def _check_syntax(path: Path, shown: str) -> None:
    try:
        source = path.read_bytes()
    except OSError as exc:
        raise UsageError(f"SCRIPT {shown}: cannot read it ({exc.strerror})") from None
    try:
        compile(source, shown, "exec", dont_inherit=True)
    except SyntaxError as exc:
        if exc.lineno is None:  # no line to point at: a NUL byte ("source code string cannot contain null bytes")
            raise UsageError(f"SCRIPT {shown}: not Python source ({exc.msg})") from None
        raise UsageError(f"{shown}:{exc.lineno}: {type(exc).__name__}: {exc.msg}") from None
    except ValueError as exc:  # older Pythons say NUL bytes with a ValueError
        raise UsageError(f"SCRIPT {shown}: not Python source ({exc})") from None


def staged_files(folder: Path) -> list[tuple[str, Path]]:
    """(path relative to the folder, file) for everything staged: regular files, no caches or VCS.

    Only what is inside the folder is copied to the nodes: a symlink (to a file or a folder) that
    leads out of it — ``hostname -> /etc/hostname``, a link to a key — is refused, named, rather
    than its target copied to every node.  A link to a file inside the tree is copied as that file;
    a link to a folder inside it is not walked (the folder is staged under its own name).  The
    limits count the bytes of what is really copied: each file's target.
    """
    root_dir = folder.resolve()
    found: list[tuple[str, Path]] = []
    total = 0
    for root, dirs, files in os.walk(root_dir):
        dirs[:] = sorted(d for d in dirs if d not in SKIPPED_DIRS)
        for name in [d for d in dirs if (Path(root) / d).is_symlink()]:
            _inside(root_dir, Path(root) / name, folder)
        for name in sorted(files):
            path = Path(root) / name
            if path.is_symlink():
                _inside(root_dir, path, folder)
            if not path.is_file():
                continue  # sockets, fifos, devices, broken links
            found.append((path.relative_to(root_dir).as_posix(), path))
            total += path.stat().st_size
            if len(found) > MAX_FILES or total > MAX_BYTES:
                raise UsageError(f"--dir {folder}: more than {MAX_FILES} files or {MAX_BYTES >> 20} MiB to copy to every node; "
                                 "give a smaller folder")
    return found


def _inside(root_dir: Path, link: Path, shown: Path) -> None:
    target = link.resolve()
    if target != root_dir and root_dir not in target.parents:
        raise UsageError(f"--dir {shown}: {link.relative_to(root_dir).as_posix()} is a symlink to {target}, outside the "
                         "folder; only the folder's own files are copied to the nodes: copy the file in, or remove the link")
