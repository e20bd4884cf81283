"""The prepared HAR windows as training reads them: checked once, and dealt out to the workers."""

import threading
import time
from pathlib import Path

import numpy as np

from picluster.data.har import HarData, har_dir
from picluster.data.har.dataset import HAR_SUBDIR, cache_path, load
from picluster.data.har.spec import CHANNELS, CLASSES, WINDOW
from picluster.jobs.har.config import TrainConfig
from picluster.jobs.har.folds import parse as volunteers
from picluster.jobs.har.folds import revalidate
from picluster.util.errors import UsageError

# The last data set this process loaded, by its file's identity: a node's resident server runs one
# job after another through its door, and each would otherwise decompress and hash it again.  The
# lock: the server reads it ahead of the first job (warm), which then waits for that read.
_LAST: dict[tuple, HarData] = {}
_LOCK = threading.Lock()


def load_data(config: TrainConfig) -> HarData:
    """What `picluster data har` prepared, checked for the shapes training needs.

    Only that: building the set here would hide a wrong --data-dir.  The coordinator calls this
    before any server starts, so a bad data set is one line, not a failed worker.
    """
    return read_data(config)[0]


def read_data(config: TrainConfig) -> tuple[HarData, bool]:
    """load_data's data set, and whether this process held it already (a node's server: from its
    last job, or read ahead, warm) rather than reading it now."""
    data, held = _held(config)
    return _checked(data, config), held


def warm(data_dir: str) -> str | None:
    """Read the HAR data set under a node's share (``data_dir``, its mount) before any job asks:
    a node's server does it once it serves (door.py), so the first run after `cluster up` or a
    boot finds it held, its moments computed.  What was read, for the server's log (None: nothing
    there); a damaged file is left for the job to name."""
    from picluster.jobs.har.model import channel_moments  # TensorFlow: the server has it imported

    config = TrainConfig(data_dir=str(Path(data_dir) / HAR_SUBDIR))
    path = cache_path(_folder(config))
    if not path.is_file():
        return None
    started = time.perf_counter()
    try:
        data, _ = _held(config)
    except UsageError as exc:
        return f"the HAR data set not read ahead: {exc}"
    channel_moments(data.x_train)  # kept for this very array (model.py), as a job's graph reads them
    return f"the HAR data set {path} read ahead ({len(data.x_train)} training windows) in {time.perf_counter() - started:.1f} s"


def _folder(config: TrainConfig) -> Path:
    return Path(config.data_dir) if config.data_dir else har_dir()


def _key(config: TrainConfig) -> tuple | None:
    path = cache_path(_folder(config))
    try:
        st = path.stat()
    except OSError:
        return None  # load() says why
    return (str(path.resolve()), st.st_ino, st.st_size, st.st_mtime_ns, config.val_volunteers)


def _held(config: TrainConfig) -> tuple[HarData, bool]:
    """The data set, read now or held from before (and which)."""
    folder = _folder(config)
    with _LOCK:
        key = _key(config)
        cached = _LAST.get(key) if key is not None else None
        if cached is not None:
            return cached, True
        data = revalidate(load(cache_path(folder)), volunteers(config.val_volunteers), str(folder))
        if key is not None:
            for name in vars(data):  # shared by the jobs that follow: none may change it
                array = getattr(data, name)
                if isinstance(array, np.ndarray):
                    array.setflags(write=False)
            _LAST.clear()
            _LAST[key] = data
        return data, False


def _checked(data: HarData, config: TrainConfig) -> HarData:
    folder = _folder(config)
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
