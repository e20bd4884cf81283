"""Scores from predictions, and the per-epoch metrics.csv the chief appends to.

metrics.csv scores validation only: the test volunteers are scored once, at the end (chief.py).
Its test columns are there with --eval-test-every-epoch (for study) and in runs made before;
an existing file's header names its columns, so a resumed run appends rows of the same shape.
"""

import csv
import io
import os
from pathlib import Path

import numpy as np

from picluster.util import atomic
from picluster.util.errors import UsageError

TEST_COLUMNS = ("test_loss", "test_acc", "test_f1")
COLUMNS = (
    "epoch", "global_step", "train_loss", "train_acc", "val_loss", "val_acc", "val_f1",
    *TEST_COLUMNS, "epoch_s", "input_s", "compute_s", "exchange_s",
    "staleness_mean", "staleness_max", "straggler", "straggler_ms", "wall_s", "time",
    # Between the epoch's steps and its row, on the sync critical path with --evaluator chief: the
    # validation pass.  Checkpoints come after the row.  (Runs of earlier versions also have probe_s:
    # an exchange probe between epochs, which held every sync worker up.)
    "eval_s",
)


def columns(with_test: bool) -> tuple[str, ...]:
    """The columns of a new metrics.csv: the test ones only when the test set is scored every epoch."""
    return COLUMNS if with_test else tuple(c for c in COLUMNS if c not in TEST_COLUMNS)


def confusion(y_true: np.ndarray, y_pred: np.ndarray, classes: int) -> np.ndarray:
    """Rows are true classes, columns predicted ones."""
    m = np.zeros((classes, classes), dtype=np.int64)
    np.add.at(m, (y_true, y_pred), 1)
    return m


def accuracy_by(groups: np.ndarray, y_true: np.ndarray, y_pred: np.ndarray) -> dict[str, float]:
    """Accuracy within each group (e.g. each test volunteer), keyed by the group as a string."""
    return {str(int(g)): float((y_pred[groups == g] == y_true[groups == g]).mean()) for g in np.unique(groups)}


def weighted_f1(m: np.ndarray) -> float:
    """F1 per class weighted by the class's true count (scikit-learn's 'weighted')."""
    tp = np.diag(m).astype(float)
    predicted, actual = m.sum(0), m.sum(1)
    with np.errstate(divide="ignore", invalid="ignore"):
        precision = np.where(predicted > 0, tp / predicted, 0.0)
        recall = np.where(actual > 0, tp / actual, 0.0)
        f1 = np.where(precision + recall > 0, 2 * precision * recall / (precision + recall), 0.0)
    return float((f1 * actual).sum() / actual.sum()) if actual.sum() else 0.0


def append_row(path: Path, row: dict, names: tuple[str, ...] = COLUMNS) -> None:
    """Add one row (and the header to a new file), flushed to disk.

    metrics.csv is appended to, not replaced, so a failed write (a full disk) could leave half a
    row; the file is cut back to its last complete row instead, and readers ignore an unfinished
    last line in any case (read_rows)."""
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o666)
    try:
        size = os.fstat(fd).st_size
        data = _render([row], header=size == 0, names=_header(path) if size else names).encode()
        try:
            while data:
                data = data[os.write(fd, data):]
            os.fsync(fd)
        except OSError:
            try:
                os.ftruncate(fd, size)  # frees the blocks it took: possible on a full disk too
            except OSError:
                pass  # read_rows skips the unfinished line
            raise
    finally:
        os.close(fd)


def write_rows(path: Path, rows: list[dict], names: tuple[str, ...] = COLUMNS) -> None:
    """Replace the file with these rows (under its own header, if it has one): whole, or (on any failure) not at all."""
    atomic.write_text(path, _render(rows, header=True, names=_header(path) or names))


def _header(path: Path) -> tuple[str, ...]:
    """The columns an existing metrics.csv names (() for none): new rows keep to them."""
    try:
        with open(path, newline="") as f:
            first = next(csv.reader(f), [])
    except FileNotFoundError:
        return ()
    return tuple(first) if first and set(first) <= set(COLUMNS) else ()


def read_rows(path: Path) -> list[dict]:
    """The complete rows.  A last line without its newline is a row still being written (or cut
    short by a failed write): it is left out.  Any other malformed row is an error naming its line."""
    try:
        with open(path, newline="") as f:
            text = f.read()
    except FileNotFoundError:
        return []
    if not text.endswith("\n"):
        text = text[:text.rfind("\n") + 1]
    reader = csv.DictReader(io.StringIO(text, newline=""))
    rows = list(reader)
    for number, row in enumerate(rows, start=2):
        if None in row or None in row.values() or not str(row.get("epoch", "")).isdigit() or not all(map(_number, row.values())):
            raise UsageError(f"{path}: line {number} is not a complete row of {len(reader.fieldnames or COLUMNS)} numbers; the file was damaged")
    return rows


def _number(text: str) -> bool:
    if text == "":
        return True  # a column this row has no value for (staleness in sync mode)
    try:
        float(text)  # nan too: a diverged run's loss is a record, not damage
    except ValueError:
        return False
    return True


def _render(rows: list[dict], header: bool, names: tuple[str, ...] = COLUMNS) -> str:
    out = io.StringIO()
    writer = csv.DictWriter(out, names, extrasaction="ignore", lineterminator="\n")
    if header:
        writer.writeheader()
    for row in rows:
        writer.writerow({k: _fmt(row.get(k, "")) for k in names})
    return out.getvalue()


def _fmt(v):
    if isinstance(v, float):
        return f"{v:.3f}" if v > 1e6 else f"{v:.6g}"  # unix times keep their milliseconds
    return v
