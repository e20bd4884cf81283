"""The original "UCI HAR Dataset" layout, from its zip or its extracted folder.

Read: <split>/Inertial Signals/<signal>_<split>.txt (128 numbers a line), <split>/y_<split>.txt
(label 1..6 a line) and <split>/subject_<split>.txt (volunteer 1..30 a line).  Zip members are
read into memory by exact name, never extracted, so member names cannot write anywhere.
"""

import re
import zipfile
from pathlib import Path
from typing import NoReturn

import numpy as np

from picluster.data.har.spec import CHANNELS, CLASSES, SUBJECTS, WINDOW
from picluster.data.har.windows import Windows
from picluster.util.errors import UsageError

SPLITS = ("train", "test")
ROOT_NAME = "UCI HAR Dataset"
# A real signal file is about 15 MB; a member announcing far more is not one.
MAX_MEMBER_BYTES = 256 * 2**20


class _Folder:
    def __init__(self, root: Path) -> None:
        self.root = root

    def where(self, relative: str) -> str:
        return str(self.root / relative)

    def read(self, relative: str) -> bytes:
        path = self.root / relative
        if not path.is_file():
            raise UsageError(f"{path}: missing file of the UCI HAR layout")
        if path.stat().st_size > MAX_MEMBER_BYTES:
            raise UsageError(f"{path}: larger than {MAX_MEMBER_BYTES // 2**20} MiB; not a UCI HAR file")
        try:
            return path.read_bytes()
        except OSError as exc:
            raise UsageError(f"{path}: cannot read ({exc.strerror})") from None

    def fingerprint(self) -> str:
        parts = []
        for relative in _layout():
            try:
                st = (self.root / relative).stat()
                parts.append(f"{st.st_size}:{st.st_mtime_ns}")
            except OSError:
                parts.append("missing")
        return f"uci-folder:{self.root}:" + ",".join(parts)

    def close(self) -> None:
        pass


class _Zip:
    def __init__(self, path: Path, archive: zipfile.ZipFile, prefix: str) -> None:
        self.path, self.archive, self.prefix = path, archive, prefix

    def where(self, relative: str) -> str:
        return f"{self.path}: {self.prefix}{relative}"

    def read(self, relative: str) -> bytes:
        where = self.where(relative)
        try:
            info = self.archive.getinfo(self.prefix + relative)
        except KeyError:
            raise UsageError(f"{where}: missing file of the UCI HAR layout") from None
        if info.file_size > MAX_MEMBER_BYTES:
            raise UsageError(f"{where}: larger than {MAX_MEMBER_BYTES // 2**20} MiB; not a UCI HAR file")
        try:
            # Bounded read: the header's size could lie about what the member inflates to.
            with self.archive.open(info) as member:
                data = member.read(MAX_MEMBER_BYTES + 1)
        except (zipfile.BadZipFile, OSError, NotImplementedError, RuntimeError, EOFError) as exc:
            raise UsageError(f"{where}: cannot read ({exc})") from None
        if len(data) > MAX_MEMBER_BYTES:
            raise UsageError(f"{where}: inflates beyond {MAX_MEMBER_BYTES // 2**20} MiB")
        return data

    def fingerprint(self) -> str:
        st = self.path.stat()
        return f"uci-zip:{self.path}:{st.st_size}:{st.st_mtime_ns}"

    def close(self) -> None:
        self.archive.close()


def _layout() -> list[str]:
    files = []
    for split in SPLITS:
        files += [f"{split}/Inertial Signals/{c}_{split}.txt" for c in CHANNELS]
        files += [f"{split}/y_{split}.txt", f"{split}/subject_{split}.txt"]
    return files


def open_source(path: Path) -> _Folder | _Zip:
    """A zip (the download as is) or a folder: the dataset root or the folder holding it."""
    path = Path(path).expanduser().resolve()
    if path.is_dir():
        for root in (path, path / ROOT_NAME):
            if (root / "train").is_dir() or (root / "test").is_dir():
                return _Folder(root)
        raise UsageError(f"{path}: no train/ or test/ folder of the UCI HAR layout here or in '{ROOT_NAME}/'")
    if not path.is_file():
        raise UsageError(f"{path}: no such file or folder")
    try:
        archive = zipfile.ZipFile(path)
    except (zipfile.BadZipFile, OSError) as exc:
        raise UsageError(f"{path}: not a zip file or folder of the UCI HAR layout ({exc})") from None
    return _Zip(path, archive, _zip_prefix(path, archive))


def _zip_prefix(path: Path, archive: zipfile.ZipFile) -> str:
    # The download nests everything in "UCI HAR Dataset/" and adds macOS "__MACOSX/" copies;
    # accept the layout at the top of the zip or one folder down.
    prefixes = set()
    for name in archive.namelist():
        for marker in ("train/y_train.txt", "test/y_test.txt"):
            if name.endswith(marker):
                prefix = name[: -len(marker)]
                if prefix == "" or (prefix.count("/") == 1 and prefix.endswith("/") and prefix != "__MACOSX/"):
                    prefixes.add(prefix)
    if not prefixes:
        raise UsageError(f"{path}: no train/y_train.txt in the zip; not the UCI HAR Dataset zip")
    if len(prefixes) > 1:
        raise UsageError(f"{path}: several UCI HAR layouts in one zip ({', '.join(sorted(prefixes))})")
    return prefixes.pop()


_NUMBER = re.compile(rb"^[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?$")
_NUMBER_BYTES = b"0123456789eE+-. \t\r\n"
_FLOAT32_MAX = float(np.finfo(np.float32).max)


def _lines(data: bytes) -> list[bytes]:
    lines = data.replace(b"\r\n", b"\n").split(b"\n")
    if lines and lines[-1].strip() == b"":
        lines.pop()  # the final newline
    return lines


def _parse_signal(where: str, data: bytes) -> np.ndarray:
    """(n, 128) float32; a short or long row or a non-numeric token names its line."""
    rows = [line.split() for line in _lines(data)]
    for number, row in enumerate(rows, start=1):
        if len(row) != WINDOW:
            raise UsageError(f"{where}:{number}: expected {WINDOW} numbers, found {len(row)}")
    # One conversion for the whole file; only on failure do we look for the culprit line.  The
    # byte check first, because numpy's parser also takes forms such as "1_0" and "nan".
    if data.translate(None, _NUMBER_BYTES):
        _find_bad_token(where, rows)
    try:
        values = np.array(rows, dtype=np.float64) if rows else np.zeros((0, WINDOW))
    except ValueError:
        _find_bad_token(where, rows)
    with np.errstate(over="ignore"):
        values = values.astype(np.float32)
    if not np.isfinite(values).all():  # e.g. 1e999, or 1e300 beyond float32
        _find_bad_token(where, rows)
    return values


def _find_bad_token(where: str, rows: list[list[bytes]]) -> NoReturn:
    for number, row in enumerate(rows, start=1):
        for column, token in enumerate(row, start=1):
            if not _NUMBER.match(token) or not abs(float(token)) <= _FLOAT32_MAX:
                raise UsageError(f"{where}:{number}: value {column} is not a finite number: {token[:20].decode(errors='replace')!r}")
    raise UsageError(f"{where}: values are not all finite numbers")


def _parse_ints(where: str, data: bytes, allowed: range, what: str) -> np.ndarray:
    values = []
    for number, line in enumerate(_lines(data), start=1):
        token = line.strip()
        if not re.fullmatch(rb"[+-]?\d{1,9}", token):
            raise UsageError(f"{where}:{number}: expected one whole number, found {token[:20].decode(errors='replace')!r}")
        value = int(token)
        if value not in allowed:
            raise UsageError(f"{where}:{number}: {what} {value} outside {allowed.start}..{allowed.stop - 1}")
        values.append(value)
    return np.asarray(values, dtype=np.int64)


def read_split(source: _Folder | _Zip, split: str) -> Windows:
    files = {}
    for channel in CHANNELS:
        relative = f"{split}/Inertial Signals/{channel}_{split}.txt"
        files[channel] = (relative, _parse_signal(source.where(relative), source.read(relative)))
    y_rel, s_rel = f"{split}/y_{split}.txt", f"{split}/subject_{split}.txt"
    y = _parse_ints(source.where(y_rel), source.read(y_rel), range(1, len(CLASSES) + 1), "label")
    subject = _parse_ints(source.where(s_rel), source.read(s_rel), range(SUBJECTS[0], SUBJECTS[-1] + 1), "subject")
    n = len(y)
    for relative, values in [*files.values(), (s_rel, subject)]:
        if len(values) != n:
            raise UsageError(f"{source.where(relative)}: {len(values)} lines, but {y_rel} has {n}")
    if n == 0:
        raise UsageError(f"{source.where(y_rel)}: no windows")
    x = np.stack([files[c][1] for c in CHANNELS], axis=2)
    return Windows(x, y - 1, subject)


def read_uci(path: Path) -> tuple[Windows, Windows, str]:
    """(train, test, fingerprint) from a UCI HAR zip or folder."""
    source = open_source(path)
    try:
        return read_split(source, "train"), read_split(source, "test"), source.fingerprint()
    finally:
        source.close()
