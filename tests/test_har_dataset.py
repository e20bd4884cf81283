"""The cached .npz: round trip, checksum, atomic write, and reuse or rebuild by source."""

import zipfile

import numpy as np
import pytest

from picluster.data.har import dataset
from picluster.data.har.dataset import HarData, cache_path, ensure_cache, har_dir, load, load_har, prepare, save
from picluster.data.har.spec import VALIDATION_SUBJECTS
from picluster.util.errors import UsageError

from har_synthetic import uci_files, write_folder


def test_uci_source_is_split_by_volunteer(uci_zip):
    path, expected = uci_zip, uci_files()[1]
    data = prepare(path)
    train, test = expected["train"], expected["test"]
    in_val = np.isin(train["subject"], VALIDATION_SUBJECTS)
    assert in_val.any() and (~in_val).any()  # the fixture has both kinds of volunteer
    np.testing.assert_allclose(data.x_val, train["x"][in_val], rtol=1e-7)
    np.testing.assert_array_equal(data.y_val, train["y"][in_val])
    np.testing.assert_array_equal(data.subject_train, train["subject"][~in_val])
    np.testing.assert_array_equal(data.y_test, test["y"])
    assert not set(data.subject_val) & set(data.subject_train)


def test_save_and_load_round_trip(tmp_path, uci_zip):
    data = prepare(uci_zip)
    path = cache_path(tmp_path / "out")
    save(data, path)
    again = load(path)
    for name in ("train", "val", "test"):
        for key in ("x", "y", "subject"):
            a, b = getattr(data, f"{key}_{name}"), getattr(again, f"{key}_{name}")
            assert a.dtype == b.dtype
            np.testing.assert_array_equal(a, b)
    assert (again.source, again.checksum) == (data.source, data.checksum)
    assert [p.name for p in path.parent.iterdir()] == ["har.npz"]  # no temporary file left behind


def _rewrite(path, **changes):
    with np.load(path, allow_pickle=False) as npz:
        contents = {k: npz[k] for k in npz.files}
    contents.update(changes)
    np.savez_compressed(path, **contents)


def test_altered_array_fails_the_checksum(tmp_path, uci_zip):
    path = cache_path(tmp_path)
    save(prepare(uci_zip), path)
    with np.load(path) as npz:
        x = npz["x_test"].copy()
    x[0, 0, 0] += 1.0
    _rewrite(path, x_test=x)
    with pytest.raises(UsageError, match=r"har\.npz: checksum mismatch"):
        load(path)


@pytest.mark.parametrize(
    "damage, message",
    [
        (lambda p: p.write_bytes(p.read_bytes()[:1000]), "not a readable HAR cache"),
        (lambda p: p.write_bytes(b"not a zip at all"), "not a readable HAR cache"),
        (lambda p: _rewrite(p, y_val=np.array([9])), "val split has unexpected shapes or values"),
        (lambda p: _rewrite(p, format=np.int64(99)), "cache format is not 1"),
        (lambda p: _rewrite(p, x_train=np.array([object()], dtype=object)), "not a readable HAR cache"),
    ],
)
def test_damaged_cache_is_a_usage_error(tmp_path, uci_zip, damage, message):
    path = cache_path(tmp_path)
    save(prepare(uci_zip), path)
    damage(path)
    with pytest.raises(UsageError, match=message) as caught:
        load(path)
    assert "\n" not in str(caught.value)


def test_missing_cache_names_the_command(tmp_path):
    with pytest.raises(UsageError, match="run `picluster data har`"):
        load(cache_path(tmp_path))


def test_failed_write_leaves_the_old_cache_and_no_temporary(tmp_path, uci_zip, monkeypatch):
    path = cache_path(tmp_path / "out")
    data = prepare(uci_zip)
    save(data, path)
    before = path.read_bytes()

    def explode(*args, **kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(dataset.np, "savez_compressed", explode)
    with pytest.raises(OSError):
        save(data, path)
    assert path.read_bytes() == before
    assert [p.name for p in path.parent.iterdir()] == ["har.npz"]


def test_cache_is_reused_for_the_same_source_and_rebuilt_for_another(tmp_path, uci_zip):
    zip_path = uci_zip
    out = tmp_path / "data"
    first, fresh = ensure_cache(out, zip_path)
    assert fresh
    again, fresh = ensure_cache(out, zip_path)
    assert not fresh and again.checksum == first.checksum
    # load_har without a source takes whatever was prepared
    assert load_har(out).checksum == first.checksum

    files, _ = uci_files(seed=1)
    folder = write_folder(tmp_path / "other" / "UCI HAR Dataset", files)
    other, fresh = ensure_cache(out, folder)
    assert fresh and other.checksum != first.checksum
    assert load(cache_path(out)).checksum == other.checksum

    forced, fresh = ensure_cache(out, folder, force=True)
    assert fresh and forced.checksum == other.checksum


def test_damaged_cache_is_rebuilt_for_a_named_source_but_not_silently_replaced(tmp_path, uci_zip):
    zip_path = uci_zip
    out = tmp_path / "data"
    ensure_cache(out, zip_path)
    cache_path(out).write_bytes(b"garbage")
    with pytest.raises(UsageError, match="not a readable HAR cache"):
        load_har(out)  # no source named: rebuilding from HAPT would swap the source unasked
    data, fresh = ensure_cache(out, zip_path)
    assert fresh and isinstance(data, HarData)
    assert zipfile.is_zipfile(cache_path(out))


def test_unwritable_data_dir_is_a_usage_error(tmp_path, uci_zip):
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    with pytest.raises(UsageError, match="cannot write the HAR cache"):
        ensure_cache(blocker / "har", uci_zip)


def test_har_dir_is_the_data_dir_or_the_inventory_share(tmp_path, monkeypatch, uci_zip):
    monkeypatch.setenv("PICLUSTER_DATA_DIR", str(tmp_path / "local"))
    assert har_dir() == tmp_path / "local" / "har"

    class Inventory:  # only the attribute har_dir reads
        data_dir = tmp_path / "share"

    assert har_dir(Inventory()) == tmp_path / "share" / "har"
    # load_har() with no folder uses har_dir()
    data = load_har(source=uci_zip)
    assert load(tmp_path / "local" / "har" / "har.npz").checksum == data.checksum
