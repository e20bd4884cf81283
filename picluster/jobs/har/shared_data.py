"""The HAR data set where an inventory's nodes read it: har/har.npz on the cluster's share.

`picluster data har -i` and the first `picluster train har` on a cluster put it there.  Where
this machine has the share (data_dir is a folder here), it is prepared in place; elsewhere (a
laptop that does not mount it, as on a first cluster) it is prepared in this machine's own data
directory, then copied to the NFS master's share_dir (cluster/share.py).
"""

from dataclasses import dataclass
from pathlib import Path

from picluster.cluster import share
from picluster.data.har.dataset import CACHE_NAME, HAPT, HAR_SUBDIR, HarData, cache_path, ensure_cache, har_dir
from picluster.model.inventory import Inventory

RELATIVE = f"{HAR_SUBDIR}/{CACHE_NAME}"  # inside the share: every node's <data_dir>/har/har.npz


@dataclass(frozen=True)
class Placed:
    data: HarData
    fresh: bool  # prepared now rather than read from a cache
    local: Path  # the prepared file on this machine
    copied_to: str | None  # "node01:/srv/picluster/har/har.npz" when it was copied to the share now


def on_share(inv: Inventory) -> bool:
    return share.has(inv, RELATIVE)


def prepare(inv: Inventory, source: str | Path = HAPT, force: bool = False, *, known_missing: bool = False) -> Placed:
    """The data set from ``source``, prepared (or read from a cache) and on the share.

    ``known_missing``: the caller has just seen on_share() say no, so the copy is made without
    asking the first worker again (one SSH round trip per command, not two)."""
    mounted = share.here(inv)
    if mounted is not None:
        folder = mounted / HAR_SUBDIR
        data, fresh = ensure_cache(folder, source, force=force)
        return Placed(data, fresh, cache_path(folder), None)
    folder = har_dir(None)
    data, fresh = ensure_cache(folder, source, force=force)
    copied = share.put(inv, cache_path(folder), RELATIVE) if fresh or force or known_missing or not on_share(inv) else None
    return Placed(data, fresh, cache_path(folder), copied)


def seen_by_nodes(inv: Inventory) -> str:
    """Where the nodes read it: /mnt/picluster/har."""
    return str(Path(inv.data_dir) / HAR_SUBDIR)
