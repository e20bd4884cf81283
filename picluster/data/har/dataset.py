"""The prepared HAR data set: train / validation / test windows, cached once as a compressed .npz.

The cache holds, per split, x (n, 128, 9) float32, y (n,) 0..5 and subject (n,), plus the
source's fingerprint (so a different source or filter choice is not mistaken for this one) and
a SHA-256 over every array (so a truncated or altered file on a share is caught).  It is loaded
with allow_pickle=False and written to a temporary file in the same folder, then renamed, so
readers on other nodes see the old file or the new one, never half of one.
"""

import hashlib
import signal
import threading
import zipfile
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from picluster.data.har.spec import CHANNELS, CLASSES, SUBJECTS, TEST_SUBJECTS, VALIDATION_SUBJECTS, WINDOW
from picluster.data.har.windows import Windows
from picluster.util import atomic
from picluster.util.atomic import STORAGE_ERRNOS
from picluster.util.errors import StorageError, UsageError

HAR_SUBDIR = "har"
CACHE_NAME = "har.npz"
FORMAT = 1
SPLITS = ("train", "val", "test")
HAPT = "hapt"


@dataclass(frozen=True)
class HarData:
    x_train: np.ndarray
    y_train: np.ndarray
    subject_train: np.ndarray
    x_val: np.ndarray
    y_val: np.ndarray
    subject_val: np.ndarray
    x_test: np.ndarray
    y_test: np.ndarray
    subject_test: np.ndarray
    source: str  # fingerprint of what the windows were made from
    checksum: str

    def split(self, name: str) -> Windows:
        return Windows(getattr(self, f"x_{name}"), getattr(self, f"y_{name}"), getattr(self, f"subject_{name}"))


def _arrays(splits: dict[str, Windows]) -> dict[str, np.ndarray]:
    out = {}
    for name in SPLITS:
        w = splits[name]
        out[f"x_{name}"] = np.ascontiguousarray(w.x, dtype=np.float32)
        out[f"y_{name}"] = np.ascontiguousarray(w.y, dtype=np.int64)
        out[f"subject_{name}"] = np.ascontiguousarray(w.subject, dtype=np.int64)
    return out


def checksum(arrays: dict[str, np.ndarray]) -> str:
    digest = hashlib.sha256()
    for key in sorted(arrays):
        a = np.ascontiguousarray(arrays[key])
        digest.update(f"{key}:{a.dtype.str}:{a.shape};".encode())
        digest.update(a.reshape(-1).view(np.uint8).data)  # no copy; also fine for an empty split
    return digest.hexdigest()


def from_train_test(train: Windows, test: Windows, source: str) -> HarData:
    """Carve the validation volunteers out of the training ones (by volunteer, never by window)."""
    splits = {
        "train": train.without_subjects(VALIDATION_SUBJECTS),
        "val": train.of_subjects(VALIDATION_SUBJECTS),
        "test": test,
    }
    arrays = _arrays(splits)
    return HarData(**arrays, source=source, checksum=checksum(arrays))


def prepare(source: str | Path = HAPT) -> HarData:
    """Build the data set from "hapt" (the offline package) or a UCI HAR zip or folder."""
    if str(source) == HAPT:
        from picluster.data.har import hapt, reconstruct

        windows = reconstruct.reconstruct(hapt.read_recordings())
        train, test = windows.without_subjects(TEST_SUBJECTS), windows.of_subjects(TEST_SUBJECTS)
        return from_train_test(train, test, _hapt_fingerprint())
    from picluster.data.har import uci

    train, test, fingerprint = uci.read_uci(Path(source))
    return from_train_test(train, test, fingerprint)


def source_fingerprint(source: str | Path) -> str:
    """What prepare(source) would record, without preparing (for reusing a cache)."""
    if str(source) == HAPT:
        return _hapt_fingerprint()
    from picluster.data.har import uci

    opened = uci.open_source(Path(source))
    try:
        return opened.fingerprint()
    finally:
        opened.close()


def _hapt_fingerprint() -> str:
    # Names the filter choices too: changing them must not reuse windows made with the old ones.
    from picluster.data.har import hapt, reconstruct

    return f"hapt:{hapt.DISTRIBUTION}:median={reconstruct.MEDIAN_LENGTH}:gravity_order={reconstruct.GRAVITY_ORDER}"


def save(data: HarData, path: Path) -> None:
    arrays = {f"{k}_{s}": getattr(data, f"{k}_{s}") for s in SPLITS for k in ("x", "y", "subject")}
    path.parent.mkdir(parents=True, exist_ok=True)
    # A prepared data set on the share is read by every node's user: the umask's mode, not 0600.
    with atomic.replacing(path, binary=True) as out, _signals_after():
        np.savez_compressed(out, **arrays, format=np.int64(FORMAT), source=np.str_(data.source), checksum=np.str_(data.checksum))


@contextmanager
def _signals_after():
    """Ctrl-C and SIGTERM held back while zipfile writes the cache (a second or two), delivered
    right after.  Interrupted inside zipfile, a ZipFile is left half open; collected later, it
    closes itself on a file already gone and Python prints "Exception ignored in ZipFile.__del__"
    with a traceback under our one line.  Only the main thread sets handlers: elsewhere, nothing to hold.

    Held by a handler that only notes the signal, not by blocking it: numpy's BLAS threads do not
    block it, so the kernel hands a process's Ctrl-C to one of them, and Python raises it in the
    main thread all the same (half the time under load)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    arrived: list[int] = []
    # A handler set outside Python (getsignal gives None) could not be put back: leave that signal be.
    kept = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
    kept = {sig: handler for sig, handler in kept.items() if handler is not None}
    for sig in kept:
        signal.signal(sig, lambda signum, _frame: arrived.append(signum))
    try:
        yield
    finally:
        for sig, handler in kept.items():
            signal.signal(sig, handler)
        for signum in dict.fromkeys(arrived):
            # To this thread: the kept handler (KeyboardInterrupt, the CLI's own, or the default) runs now.
            signal.raise_signal(signum)


def load(path: Path) -> HarData:
    """Read and verify a cache file; anything wrong is a UsageError naming the file."""
    try:
        with np.load(path, allow_pickle=False) as npz:
            contents = {key: npz[key] for key in npz.files}
    except FileNotFoundError:
        raise UsageError(f"{path}: no prepared HAR data; run `picluster data har`") from None
    except (OSError, ValueError, zipfile.BadZipFile, EOFError) as exc:
        raise UsageError(f"{path}: not a readable HAR cache ({exc}); run `picluster data har` again") from None
    if contents.get("format", np.int64(-1)).item() != FORMAT:
        raise UsageError(f"{path}: cache format is not {FORMAT}; run `picluster data har` again")
    arrays = {}
    for name in SPLITS:
        for key in ("x", "y", "subject"):
            if f"{key}_{name}" not in contents:
                raise UsageError(f"{path}: cache lacks {key}_{name}; run `picluster data har` again")
            arrays[f"{key}_{name}"] = contents[f"{key}_{name}"]
        _check_split(path, name, arrays)
    try:
        source, stored = str(contents["source"]), str(contents["checksum"])
    except KeyError:
        raise UsageError(f"{path}: cache lacks its source or checksum; run `picluster data har` again") from None
    if checksum(arrays) != stored:
        raise UsageError(f"{path}: checksum mismatch (damaged or altered); run `picluster data har` again")
    return HarData(**arrays, source=source, checksum=stored)


def _check_split(path: Path, name: str, arrays: dict[str, np.ndarray]) -> None:
    x, y, subject = arrays[f"x_{name}"], arrays[f"y_{name}"], arrays[f"subject_{name}"]
    n = len(y)
    if (
        x.dtype != np.float32 or x.shape != (n, WINDOW, len(CHANNELS))
        or y.dtype != np.int64 or y.shape != (n,) or subject.dtype != np.int64 or subject.shape != (n,)
        or (n and (y.min() < 0 or y.max() >= len(CLASSES) or subject.min() < SUBJECTS[0] or subject.max() > SUBJECTS[-1]))
    ):
        raise UsageError(f"{path}: {name} split has unexpected shapes or values; run `picluster data har` again")


def har_dir(inventory=None) -> Path:
    """The folder of har.npz: <inventory data_dir>/har on a cluster (the NFS share every node
    mounts), else <picluster.util.paths.data_dir()>/har.  `inventory` is a picluster.model.inventory.Inventory."""
    if inventory is not None:
        return Path(inventory.data_dir) / HAR_SUBDIR
    from picluster.util.paths import data_dir

    return data_dir() / HAR_SUBDIR


def cache_path(folder: Path) -> Path:
    return Path(folder) / CACHE_NAME


def load_har(folder: Path | None = None, source: str | Path | None = None) -> HarData:
    """The HAR arrays, whichever source: the cache in `folder` (default har_dir()) if it matches,
    else prepared and cached there.

    source None takes whatever was prepared (by `picluster data har`), or the offline HAPT
    reconstruction when nothing was; "hapt" or a UCI zip/folder insists on that source.
    """
    return ensure_cache(har_dir() if folder is None else folder, source)[0]


def ensure_cache(folder: Path, source: str | Path | None = None, force: bool = False) -> tuple[HarData, bool]:
    """(data, whether it was prepared now rather than read from the cache)."""
    path = cache_path(folder)
    if path.exists() and not force:
        try:
            cached = load(path)
        except UsageError:
            if source is None:
                raise  # rebuilding from HAPT could silently replace a UCI cache
            cached = None  # a named source is rebuilt over a damaged cache
        if cached is not None and (source is None or cached.source == source_fingerprint(source)):
            return cached, False
    data = prepare(HAPT if source is None else source)
    try:
        save(data, path)
    except StorageError:
        raise  # "cannot write PATH: cause", and no half-written cache
    except OSError as exc:  # the folder could not be made: a file in the way, or the storage refused
        if exc.errno in STORAGE_ERRNOS:
            raise StorageError(path.parent, exc) from None
        raise UsageError(f"{path}: cannot write the HAR cache ({exc.strerror or exc})") from None
    return data, True
