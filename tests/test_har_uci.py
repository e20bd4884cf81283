"""The UCI HAR loader on synthetic layouts: zip and folder, good and broken."""

import numpy as np
import pytest

from picluster.data.har.uci import read_uci
from picluster.util.errors import UsageError

from har_synthetic import ROOT, replace_line, uci_files, write_folder, write_zip

SIGNAL = "train/Inertial Signals/body_gyro_y_train.txt"


def _check(train, test, expected):
    for got, split in ((train, "train"), (test, "test")):
        want = expected[split]
        assert got.x.dtype == np.float32 and got.x.shape == want["x"].shape
        # Written with 8 significant digits: equal to float32 precision.
        np.testing.assert_allclose(got.x, want["x"], rtol=1e-7, atol=1e-9)
        np.testing.assert_array_equal(got.y, want["y"])
        np.testing.assert_array_equal(got.subject, want["subject"])


@pytest.mark.parametrize("layout", ["zip", "zip-flat", "folder-root", "folder-parent"])
def test_reads_every_layout(tmp_path, layout):
    files, expected = uci_files()
    if layout == "zip":
        # As downloaded: everything under "UCI HAR Dataset/", plus macOS resource-fork copies.
        junk = {f"__MACOSX/{ROOT}/train/._y_train.txt": b"\x00\x05\x16\x07", f"__MACOSX/{ROOT}/train/y_train.txt": b"junk"}
        source = write_zip(tmp_path / "UCI HAR Dataset.zip", files, extra=junk)
    elif layout == "zip-flat":
        source = write_zip(tmp_path / "har.zip", files, prefix="")
    elif layout == "folder-root":
        source = write_folder(tmp_path / ROOT, files)
    else:
        write_folder(tmp_path / ROOT, files)
        source = tmp_path
    train, test, fingerprint = read_uci(source)
    _check(train, test, expected)
    assert fingerprint.startswith("uci-")


def test_channel_order_is_the_uci_file_order(tmp_path):
    files, _ = uci_files(n_train=1, n_test=1)
    # Each channel's file holds its own index, so a swapped channel shows up at once.
    for relative in files:
        if "Inertial Signals" in relative:
            channel = relative.split("/")[-1].rsplit("_", 1)[0]
            from picluster.data.har.spec import CHANNELS

            files[relative] = ("  " + " ".join([f"{CHANNELS.index(channel)}.0"] * 128) + "\n").encode()
    train, test, _ = read_uci(write_folder(tmp_path, files))
    np.testing.assert_array_equal(train.x[0, 0], np.arange(9, dtype=np.float32))
    np.testing.assert_array_equal(test.x[0, 127], np.arange(9, dtype=np.float32))


def test_crlf_line_endings_are_accepted(tmp_path):
    files, expected = uci_files()
    files = {k: v.replace(b"\n", b"\r\n") for k, v in files.items()}
    train, test, _ = read_uci(write_zip(tmp_path / "crlf.zip", files))
    _check(train, test, expected)


def _broken(tmp_path, relative, mutate, kind):
    files, _ = uci_files()
    if mutate is None:
        del files[relative]
    else:
        files[relative] = mutate(files[relative])
    if kind == "zip":
        return write_zip(tmp_path / "UCI HAR Dataset.zip", files)
    return write_folder(tmp_path / ROOT, files)


def _short_row(data):
    return replace_line(data, 3, " ".join(data.decode().split("\n")[2].split()[:127]))


def _long_row(data):
    return replace_line(data, 2, data.decode().split("\n")[1] + " 1.0")


def _token(token):
    def mutate(data):
        row = data.decode().split("\n")[3].split()
        row[9] = token
        return replace_line(data, 4, " ".join(row))

    return mutate


@pytest.mark.parametrize("kind", ["zip", "folder"])
@pytest.mark.parametrize(
    "relative, mutate, message",
    [
        (SIGNAL, None, r"body_gyro_y_train\.txt: missing file"),
        ("test/subject_test.txt", None, r"subject_test\.txt: missing file"),
        (SIGNAL, _short_row, r"body_gyro_y_train\.txt:3: expected 128 numbers, found 127"),
        (SIGNAL, _long_row, r"body_gyro_y_train\.txt:2: expected 128 numbers, found 129"),
        (SIGNAL, lambda d: replace_line(d, 5, ""), r"body_gyro_y_train\.txt:5: expected 128 numbers, found 0"),
        (SIGNAL, _token("abc"), r"body_gyro_y_train\.txt:4: value 10 is not a finite number: 'abc'"),
        (SIGNAL, _token("nan"), r"body_gyro_y_train\.txt:4: value 10 is not a finite number: 'nan'"),
        (SIGNAL, _token("1_0"), r"body_gyro_y_train\.txt:4: value 10 is not a finite number: '1_0'"),
        (SIGNAL, _token("1e999"), r"body_gyro_y_train\.txt:4: value 10 is not a finite number: '1e999'"),
        (SIGNAL, _token("1.2.3"), r"body_gyro_y_train\.txt:4: value 10 is not a finite number: '1.2.3'"),
        ("train/y_train.txt", lambda d: replace_line(d, 2, "7"), r"y_train\.txt:2: label 7 outside 1\.\.6"),
        ("test/y_test.txt", lambda d: replace_line(d, 1, "0"), r"y_test\.txt:1: label 0 outside 1\.\.6"),
        ("train/y_train.txt", lambda d: replace_line(d, 3, "two"), r"y_train\.txt:3: expected one whole number, found 'two'"),
        ("train/subject_train.txt", lambda d: replace_line(d, 6, "31"), r"subject_train\.txt:6: subject 31 outside 1\.\.30"),
        ("train/y_train.txt", lambda d: d + b"3\n", r"body_acc_x_train\.txt: 7 lines, but train/y_train\.txt has 8"),
    ],
)
def test_broken_layout_names_file_and_line(tmp_path, kind, relative, mutate, message):
    source = _broken(tmp_path, relative, mutate, kind)
    with pytest.raises(UsageError, match=message) as caught:
        read_uci(source)
    assert "\n" not in str(caught.value)
    assert caught.value.exit_code == 2


def test_zip_members_are_never_extracted(tmp_path):
    files, expected = uci_files()
    outside = tmp_path / "escaped.txt"
    work = tmp_path / "work"
    work.mkdir()
    source = write_zip(work / "UCI HAR Dataset.zip", files, extra={"../escaped.txt": b"x", "/abs.txt": b"x"})
    train, test, _ = read_uci(source)
    _check(train, test, expected)
    assert not outside.exists()
    assert sorted(p.name for p in work.iterdir()) == ["UCI HAR Dataset.zip"]


def _file(path, data):
    path.write_bytes(data)
    return path


@pytest.mark.parametrize(
    "make, message",
    [
        (lambda p: p / "nothing-here", "no such file or folder"),
        (lambda p: (p / "empty").mkdir() or p / "empty", "no train/ or test/ folder"),
        (lambda p: _file(p / "notzip.zip", b"hello"), "not a zip file"),
        (lambda p: write_zip(p / "other.zip", {"readme.txt": b"hi"}, prefix=""), r"no train/y_train\.txt in the zip"),
    ],
)
def test_not_a_uci_layout(tmp_path, make, message):
    with pytest.raises(UsageError, match=message):
        read_uci(make(tmp_path))


def test_member_inflating_beyond_the_limit_is_refused(tmp_path, monkeypatch):
    from picluster.data.har import uci

    files, _ = uci_files()
    source = write_zip(tmp_path / "big.zip", files)
    monkeypatch.setattr(uci, "MAX_MEMBER_BYTES", 1000)
    with pytest.raises(UsageError, match=r"body_acc_x_train\.txt: larger than"):
        read_uci(source)
