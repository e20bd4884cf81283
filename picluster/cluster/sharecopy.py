"""This machine's copy of a file on the cluster's share, for work beside the coordinator.

Every node mounts the share; this machine need not.  The HAR evaluator beside the coordinator
reads the data set the workers read, so a copy is kept in this machine's data folder under
``shares/<NFS master>/`` with the size and modification time the share's file had, and is
fetched again over SFTP (replaced whole) only when the share's file changed.  A file this machine
puts on the share is kept as it was put (cluster/share.py), so it is never fetched back.
"""

import json
import os
import shutil
from pathlib import Path, PurePosixPath

from picluster.model.inventory import Inventory
from picluster.util import atomic
from picluster.util.errors import ClusterError
from picluster.util.paths import data_dir


def copy_here(inv: Inventory, remote, relative: str) -> Path:
    """This machine's copy of the share's file ``relative``, through ``remote`` (an open
    ssh.Remote to the NFS master); ClusterError when the share has no such file."""
    here = kept(inv, relative)
    target = str(PurePosixPath(str(inv.share_dir)) / relative)
    sftp = remote.conn.sftp()
    try:
        st = sftp.stat(target)
    except OSError as exc:
        raise ClusterError(f"{inv.nfs_master}:{target}: not there ({exc.strerror or exc}); 'picluster data har -i' puts it there") from None
    if here.is_file() and _stamp(st) == _read_stamp(here):
        return here
    here.parent.mkdir(parents=True, exist_ok=True)
    partial = here.with_name(here.name + ".part")
    try:
        sftp.get(target, str(partial))
        keep(here, partial, st, copy=False)
    finally:
        partial.unlink(missing_ok=True)
    return here


def kept(inv: Inventory, relative: str) -> Path:
    """Where this machine keeps its copy of the share's ``relative``."""
    return data_dir() / "shares" / inv.nfs_master / relative


def keep(here: Path, source: Path, st, *, copy: bool) -> None:
    """``source`` (copied, or moved) as the copy ``here``, stamped with the share file's ``st``; the
    stamp is written last, so a copy cut short is never taken for the share's."""
    here.parent.mkdir(parents=True, exist_ok=True)
    stamp = _stamp_path(here)
    stamp.unlink(missing_ok=True)
    if copy:
        part = here.with_name(here.name + ".part")
        shutil.copyfile(source, part)
        os.replace(part, here)
    else:
        os.replace(source, here)
    atomic.write_json(stamp, _stamp(st))


def _stamp_path(here: Path) -> Path:
    return here.with_name(here.name + ".share.json")


def _stamp(st) -> dict:
    return {"size": int(st.st_size), "mtime": int(st.st_mtime)}


def _read_stamp(here: Path) -> dict | None:
    try:
        stamp = json.loads(_stamp_path(here).read_text())
    except (OSError, ValueError):
        return None
    return stamp if isinstance(stamp, dict) else None
