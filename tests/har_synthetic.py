"""Small HAR inputs the tests make themselves: a UCI HAR layout, and HAPT-shaped pickles.

The HAPT pickle is produced the way old pandas wrote it (protocol 2, copy_reg._reconstructor,
a BlockManager in the 0.14.1 layout) by stand-in classes registered under pandas' module names
for the time of the dump only; pandas itself is never needed.
"""

import copyreg
import gzip
import io
import pickle
import sys
import types
import zipfile
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import pytest

from picluster.data.har.spec import CHANNELS

# ---------------------------------------------------------------- UCI HAR layout

ROOT = "UCI HAR Dataset"


def uci_files(n_train: int = 7, n_test: int = 4, seed: int = 0) -> tuple[dict[str, bytes], dict]:
    """{relative path: contents} of a good layout, and the arrays it holds per split."""
    rng = np.random.default_rng(seed)
    files, expected = {}, {}
    # Subject 5 is a validation volunteer (spec.VALIDATION_SUBJECTS); 1 and 3 stay in train.
    subjects = {"train": [1, 3, 5, 1, 5, 3, 1][:n_train], "test": [2, 4, 2, 4][:n_test]}
    for split, n in (("train", n_train), ("test", n_test)):
        x = rng.normal(0.0, 0.5, size=(n, 128, len(CHANNELS))).astype(np.float32)
        y = (np.arange(n) % 6) + 1
        for c, channel in enumerate(CHANNELS):
            files[f"{split}/Inertial Signals/{channel}_{split}.txt"] = _rows(x[:, :, c])
        files[f"{split}/y_{split}.txt"] = "".join(f"{v}\n" for v in y).encode()
        files[f"{split}/subject_{split}.txt"] = "".join(f"{v}\n" for v in subjects[split]).encode()
        expected[split] = {"x": x, "y": y - 1, "subject": np.asarray(subjects[split])}
    return files, expected


def _rows(values: np.ndarray) -> bytes:
    # UCI's own formatting: two leading spaces, then numbers like 1.8085150e-004 separated by spaces.
    return "".join("  " + " ".join(f"{v:.7e}" for v in row) + "\n" for row in values).encode()


def write_folder(root: Path, files: dict[str, bytes]) -> Path:
    for relative, data in files.items():
        path = root / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
    return root


def write_zip(path: Path, files: dict[str, bytes], prefix: str = f"{ROOT}/", extra: dict[str, bytes] | None = None) -> Path:
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        for relative, data in files.items():
            archive.writestr(prefix + relative, data)
        for name, data in (extra or {}).items():
            archive.writestr(name, data)
    return path


def replace_line(data: bytes, line: int, text: str) -> bytes:
    lines = data.decode().split("\n")
    lines[line - 1] = text
    return "\n".join(lines).encode()


# ---------------------------------------------------------------- HAPT-shaped pickles

_PANDAS_MODULES = (
    "pandas", "pandas.core", "pandas.core.frame", "pandas.core.internals", "pandas.core.internals.managers",
    "pandas.core.indexes", "pandas.core.indexes.base", "pandas.core.indexes.range",
)


class DataFrame:
    def __init__(self, state):
        self.state = state

    def __reduce_ex__(self, protocol):
        return copyreg._reconstructor, (DataFrame, object, None), self.state


class BlockManager(DataFrame):
    def __reduce_ex__(self, protocol):
        return copyreg._reconstructor, (BlockManager, object, None), self.state


class Index:
    pass


class RangeIndex:
    pass


def _new_Index(cls, d):  # pandas' own name, so the pickle names it
    raise AssertionError("only pickled, never called")


class _IndexValue:
    def __init__(self, cls, data):
        self.cls, self.data = cls, data

    def __reduce__(self):
        return _new_Index, (self.cls, self.data)


@contextmanager
def _pandas_names():
    saved = {name: sys.modules.get(name) for name in _PANDAS_MODULES}
    modules = {name: types.ModuleType(name) for name in _PANDAS_MODULES}
    placed = {
        "pandas.core.frame": {"DataFrame": DataFrame},
        "pandas.core.internals.managers": {"BlockManager": BlockManager},
        "pandas.core.indexes.base": {"Index": Index, "_new_Index": _new_Index},
        "pandas.core.indexes.range": {"RangeIndex": RangeIndex},
    }
    originals = {}
    for module, members in placed.items():
        for name, obj in members.items():
            setattr(modules[module], name, obj)
            originals[obj] = (obj.__module__, obj.__qualname__)
            obj.__module__, obj.__qualname__ = module, name
    sys.modules.update(modules)
    try:
        yield
    finally:
        for obj, (module, qualname) in originals.items():
            obj.__module__, obj.__qualname__ = module, qualname
        for name, module in saved.items():
            if module is None:
                sys.modules.pop(name, None)
            else:
                sys.modules[name] = module


COLUMNS = ("acc-x", "acc-y", "acc-z", "gyro-x", "gyro-y", "gyro-z", "sequence", "label")


def frame(columns: dict[str, np.ndarray]) -> DataFrame:
    """An old-pandas DataFrame of 6 float columns and 2 int columns, laid out in two blocks."""
    n = len(columns["label"])
    names = _IndexValue(Index, {"data": np.array(list(COLUMNS), dtype=object), "name": None})
    rows = _IndexValue(RangeIndex, {"name": None, "start": 0, "stop": n, "step": 1})
    floats = np.stack([np.asarray(columns[c], np.float64) for c in COLUMNS[:6]])
    ints = np.stack([np.asarray(columns[c], np.int64) for c in COLUMNS[6:]])
    float_items = _IndexValue(Index, {"data": np.array(list(COLUMNS[:6]), dtype=object), "name": None})
    int_items = _IndexValue(Index, {"data": np.array(list(COLUMNS[6:]), dtype=object), "name": None})
    axes = [names, rows]
    blocks = [{"values": floats, "mgr_locs": slice(0, 6, 1)}, {"values": ints, "mgr_locs": slice(6, 8, 1)}]
    manager = BlockManager((axes, [floats, ints], [float_items, int_items], {"0.14.1": {"axes": axes, "blocks": blocks}}))
    return DataFrame({"_data": manager, "_typ": "dataframe", "_metadata": [], "attrs": {}})


def recording_columns(acc: np.ndarray, gyro: np.ndarray, label: np.ndarray) -> dict[str, np.ndarray]:
    cols = {name: acc[:, i] for i, name in enumerate(COLUMNS[:3])}
    cols.update({name: gyro[:, i] for i, name in enumerate(COLUMNS[3:6])})
    cols["sequence"] = np.arange(len(label))
    cols["label"] = np.asarray(label)
    return cols


def hapt_pickle(users: dict[int, list[dict[str, np.ndarray]]]) -> bytes:
    with _pandas_names():
        return pickle.dumps({u: [frame(c) for c in recs] for u, recs in users.items()}, protocol=2)


def write_gz(path: Path, data: bytes) -> Path:
    buffer = io.BytesIO()
    with gzip.GzipFile(fileobj=buffer, mode="wb") as out:
        out.write(data)
    path.write_bytes(buffer.getvalue())
    return path


@pytest.fixture
def uci_zip(tmp_path):
    """A small source zip in the UCI layout (uci_files()'s: its arrays are ``uci_files()[1]``)."""
    return write_zip(tmp_path / "UCI HAR Dataset.zip", uci_files()[0])
