"""The prepared HAR windows as training reads them: checked once, and dealt out to the workers."""

from pathlib import Path

import numpy as np

from picluster.data.har import HarData, har_dir
from picluster.data.har.dataset import cache_path, load
from picluster.data.har.spec import CHANNELS, CLASSES, WINDOW
from picluster.jobs.har.config import TrainConfig
from picluster.jobs.har.folds import parse as volunteers
from picluster.jobs.har.folds import revalidate
from picluster.util.errors import UsageError

# The last data set this process loaded, by its file's identity: a node's resident server runs one
# job after another through its door, and each would otherwise decompress and hash it again.
_LAST: dict[tuple, HarData] = {}


def load_data(config: TrainConfig) -> HarData:
    """What `picluster data har` prepared, checked for the shapes training needs.

    Only that: building the set here would hide a wrong --data-dir.  The coordinator calls this
    before any server starts, so a bad data set is one line, not a failed worker.
    """
    folder = Path(config.data_dir) if config.data_dir else har_dir()
    path = cache_path(folder)
    try:
        st = path.stat()
        key: tuple | None = (str(path.resolve()), st.st_ino, st.st_size, st.st_mtime_ns, config.val_volunteers)
    except OSError:
        key = None  # load() says why
    cached = _LAST.get(key) if key is not None else None
    data = cached if cached is not None else revalidate(load(path), volunteers(config.val_volunteers), str(folder))
    if key is not None and cached is None:
        for name in vars(data):  # shared by the jobs that follow: none may change it
            array = getattr(data, name)
            if isinstance(array, np.ndarray):
                array.setflags(write=False)
        _LAST.clear()
        _LAST[key] = data
    for split in ("train", "val", "test"):
        x, y = getattr(data, f"x_{split}"), getattr(data, f"y_{split}")
        if x.ndim != 3 or x.shape[1:] != (WINDOW, len(CHANNELS)) or y.shape != (len(x),):
            raise UsageError(f"{folder}: {split} windows have shape {x.shape}, expected (n, {WINDOW}, {len(CHANNELS)}); run `picluster data har` again")
        if len(x) and (y.min() < 0 or y.max() >= len(CLASSES)):
            raise UsageError(f"{folder}: {split} labels outside 0..{len(CLASSES) - 1}")
    need = config.worker_batch(config.replicas) * config.replicas  # one update's windows (--global-batch: --batch)
    if len(data.x_train) < need:
        raise UsageError(f"{folder}: {len(data.x_train)} training windows are fewer than one update takes ({need}: --batch, times the workers unless --global-batch)")
    return data


def shard(n: int, task: int, workers: int, seed: int) -> np.ndarray:
    """This worker's window indices: a fixed shuffle of all of them, dealt round-robin."""
    order = np.random.default_rng(seed).permutation(n)
    return order[task::workers]
