"""A job's own folder on a node, reached over its cluster's open connection (Cluster.job_folder).

Where a job's processes cannot read this machine's files (an inventory's nodes, without a share
they all mount here), each runs in a folder of the job's own on its node; the job puts its files
there and copies them back over the same connection, through the folder's file primitives
(exists, put, read, listdir, mkdir, remove: SFTP, which no job touches itself).  What they raise
when the connection or the node's file system fails is one of ``COPY_ERRORS``.  The folder also
says where the node's own servers keep their doors and pid files, for a job's process that runs
inside one of them (a door) or stands in for one (``stop_server``).
"""

import errno
import shlex
import stat
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING

import paramiko

from picluster.cluster.door import door_path

if TYPE_CHECKING:
    from picluster.cluster.ssh import Remote

# What a folder's file primitives raise when a copy fails: the node's answer (OSError: no such
# file, permission denied, a full disk) or the connection's end (EOFError, SSHException).
COPY_ERRORS = (OSError, EOFError, paramiko.SSHException)
SFTP_TIMEOUT_S = 20.0  # the longest wait for one answer of a node's SFTP server (a loaded Pi answers in well under a second)


@dataclass(frozen=True)
class Entry:
    """One name in a folder's listing, with what SFTP says of it (times in whole seconds)."""

    name: str
    is_dir: bool
    size: int
    mtime: int
    atime: int


@dataclass(frozen=True)
class JobFolder:
    node: str
    remote: "Remote"  # the cluster's connection to the node: closed by Cluster.release, not by the job
    path: PurePosixPath  # relative to the node user's home, as SFTP sees it
    servers: str  # the node's folder of its servers' pid files and doors, a path the shell expands ($HOME/...)

    @property
    def word(self) -> str:
        """The folder as a shell word (a ``cd``, a task's working folder)."""
        return f"\"$HOME\"/{shlex.quote(str(self.path))}"

    def door(self, job: str, index: int) -> str:
        """Where the node's server of task ``job:index`` takes jobs in (a path the shell expands)."""
        return door_path(self.servers, job, index)

    def make(self, fresh: tuple[str, ...], door_of: tuple[str, int]) -> str | None:
        """Make the folder (private) and remove the ``fresh`` files and folders a previous run left
        there; the door of the node's server of task ``door_of`` (job, index) when it has one, else None."""
        door = self.door(*door_of)
        found = self.remote.out(f"umask 077 && mkdir -p {self.word} && cd {self.word} && "
                                f"rm -rf -- {' '.join(shlex.quote(name) for name in fresh)} && "
                                f"if [ -S \"{door}\" ]; then echo \"{door}\"; fi")
        return found or None

    def stop_server(self, job: str, index: int) -> str:
        """Shell lines that stop the node's server of task ``job:index`` (as ``cluster up`` started
        it, proven by its pid file: pidfiles.py) and wait until it is gone, so that another process
        can take its address: a training replica that serves its worker task itself.  ``cluster up``
        starts it again."""
        return f"python3 {self.servers}/pidfiles.py --dir {self.servers} stop --wait 10 {job}-{index} >/dev/null"

    # -- files, relative to the folder (each raises one of COPY_ERRORS when the copy fails) ------

    @cached_property
    def _sftp(self) -> paramiko.SFTPClient:
        """The connection's SFTP session, opened on first use (Fabric keeps one per connection, closed
        with it) and held here: a lost connection then fails the copy, it is not opened again.  Each
        read on it waits at most SFTP_TIMEOUT_S: a node whose link is cut must fail the copy (a
        socket timeout, an OSError), not hold the coordinator forever (TCP alone waits minutes)."""
        sftp = self.remote.conn.sftp()
        sftp.get_channel().settimeout(SFTP_TIMEOUT_S)
        return sftp

    def _at(self, relative: str | PurePosixPath) -> str:
        return str(self.path / relative)

    def exists(self, relative: str | PurePosixPath) -> bool:
        try:
            self._sftp.stat(self._at(relative))
            return True
        except FileNotFoundError:
            return False

    def put(self, local: Path, relative: str | PurePosixPath) -> None:
        """Copy a local file there, written beside its name and renamed over it (never half a file)."""
        remote = self._at(relative)
        self._sftp.put(str(local), remote + ".new")
        self._sftp.posix_rename(remote + ".new", remote)

    def read(self, relative: str | PurePosixPath) -> bytes | None:
        """One file's bytes, or None when the node has none."""
        try:
            with self._sftp.open(self._at(relative), "rb") as f:
                return f.read()
        except OSError as exc:
            if getattr(exc, "errno", None) == errno.ENOENT or isinstance(exc, FileNotFoundError):
                return None
            raise

    def listdir(self, relative: str | PurePosixPath) -> list[Entry] | None:
        """A folder's entries, in the order the node lists them; None when it has no such folder."""
        try:
            attrs = self._sftp.listdir_attr(self._at(relative))
        except FileNotFoundError:
            return None
        return [Entry(a.filename, stat.S_ISDIR(a.st_mode or 0), a.st_size or 0, int(a.st_mtime or 0), int(a.st_atime or 0)) for a in attrs]

    def mkdir(self, relative: str | PurePosixPath, mode: int = 0o700) -> None:
        """Make a folder there (private, as the job's folder is); OSError when it exists (SFTP says
        only "Failure", as it does for any other reason)."""
        self._sftp.mkdir(self._at(relative), mode)

    def remove(self, relative: str | PurePosixPath) -> None:
        self._sftp.remove(self._at(relative))
