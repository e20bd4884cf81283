"""The cluster's share seen from the machine picluster runs on: is a file there, and put one there.

Every node mounts the NFS master's export (cluster.share_dir) at cluster.data_dir.  This machine
need not: where data_dir is no folder here, a file goes to the NFS master's share_dir over the SSH
connection every command makes (host key checked), as the inventory's user, whom provisioning
makes the share's owner.  The bytes travel on the channel's stdin into a new file beside the
target, renamed over it once whole: a node never reads half a data set.

A file put on the share is also kept as this machine's copy of it (sharecopy.py), so work beside
the coordinator (the HAR evaluator) does not fetch it back.
"""

import shlex
from pathlib import Path, PurePosixPath

from picluster.cluster import sharecopy
from picluster.cluster.nodecluster import open_node
from picluster.model.inventory import Inventory
from picluster.util.errors import ClusterError

COPY_TIMEOUT_S = 600.0  # a 100 MB data set at 2 MB/s (a Pi 3's Wi-Fi, not its Ethernet)


def here(inv: Inventory) -> Path | None:
    """data_dir on this machine when it is a folder here (the share mounted, or this machine is the
    NFS master), else None: the share is then reached through the NFS master."""
    path = Path(inv.data_dir)
    return path if path.is_dir() else None


def where(inv: Inventory, relative: str) -> str:
    """How a file of the share is named to a person: node01:/srv/picluster/har/har.npz."""
    return f"{inv.nfs_master}:{PurePosixPath(str(inv.share_dir)) / relative}"


def has(inv: Inventory, relative: str) -> bool:
    """Whether the nodes see the file ``relative`` of the share: looked for where they read it,
    data_dir, on the first worker node (on this machine when data_dir is a folder here)."""
    local = here(inv)
    if local is not None:
        return (local / relative).is_file()
    remote = open_node(inv, inv.node(inv.workers[0]))
    try:
        return remote.ok(f"test -f {shlex.quote(str(PurePosixPath(str(inv.data_dir)) / relative))}")
    finally:
        remote.close()


def put(inv: Inventory, source: Path, relative: str) -> str:
    """Copy the file ``source`` to ``relative`` inside the share; returns where it went (where())."""
    from picluster.cluster.ssh import CommandFailed  # here, as open_node imports ssh: fabric loads only for a copy

    remote = open_node(inv, inv.node(inv.nfs_master))
    target = str(PurePosixPath(str(inv.share_dir)) / relative)
    try:
        remote.replace_file(target, source.read_bytes(), timeout=COPY_TIMEOUT_S)
        sharecopy.keep(sharecopy.kept(inv, relative), source, remote.conn.sftp().stat(target), copy=True)
    except CommandFailed as exc:
        raise ClusterError(f"{where(inv, relative)}: cannot write it ({exc.why}): is the share there? run 'picluster provision'") from None
    finally:
        remote.close()
    return where(inv, relative)
