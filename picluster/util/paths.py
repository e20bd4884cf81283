"""Where picluster keeps state on the coordinator."""

import os
from pathlib import Path


def state_dir() -> Path:
    """Run directories, logs and pids: $PICLUSTER_STATE_DIR, else $XDG_STATE_HOME/picluster."""
    explicit = os.environ.get("PICLUSTER_STATE_DIR")
    if explicit:
        return Path(explicit)
    base = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(base) / "picluster"


def data_dir() -> Path:
    """Prepared data sets when no inventory names a share: $PICLUSTER_DATA_DIR, else $XDG_DATA_HOME/picluster."""
    explicit = os.environ.get("PICLUSTER_DATA_DIR")
    if explicit:
        return Path(explicit)
    base = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(base) / "picluster"


def cache_dir() -> Path:
    """What is kept to save time and can be made again (the VM image, downloaded wheels):
    $PICLUSTER_CACHE_DIR, else $XDG_CACHE_HOME/picluster.  Apart from state_dir() so that a
    private state dir (every test has one) does not rebuild a VM image."""
    explicit = os.environ.get("PICLUSTER_CACHE_DIR")
    if explicit:
        return Path(explicit)
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "picluster"
