"""Scores from predictions, and the per-epoch metrics.csv the chief appends to."""

import csv
import os
from pathlib import Path

import numpy as np

COLUMNS = (
    "epoch", "global_step", "train_loss", "train_acc", "val_loss", "val_acc", "val_f1",
    "test_loss", "test_acc", "test_f1", "epoch_s", "input_s", "compute_s", "exchange_s",
    "staleness_mean", "staleness_max", "wall_s", "time",
)


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


def append_row(path: Path, row: dict) -> None:
    new = not path.exists()
    with open(path, "a", newline="") as f:
        writer = csv.DictWriter(f, COLUMNS, extrasaction="ignore")
        if new:
            writer.writeheader()
        writer.writerow({k: _fmt(row.get(k, "")) for k in COLUMNS})
        f.flush()
        os.fsync(f.fileno())


def read_rows(path: Path) -> list[dict]:
    if not path.exists():
        return []
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def _fmt(v):
    if isinstance(v, float):
        return f"{v:.3f}" if v > 1e6 else f"{v:.6g}"  # unix times keep their milliseconds
    return v
