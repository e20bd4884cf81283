"""What ``picluster plot`` can draw from, told apart by what the file or directory holds.

- a sweep CSV (``run montecarlo --sweep ... --csv``, or the lab benchmark's): columns samples,
  nodes, seconds -> ``<name>-time`` and ``<name>-speedup``;
- a HAR scaling CSV (benchmarks/har_lab.py): columns mode, workers, s_per_epoch -> ``<name>``;
- a run directory: metrics.csv -> ``har-curves`` and ``har-epoch-time``; nodes.csv -> ``nodes``;
- a nodes.csv alone -> ``nodes``.
Files are untrusted input: a missing column or a number that is not one is one line, exit 2.
"""

import csv
import math
from pathlib import Path

from picluster.errors import UsageError
from picluster.plots import sweep, timeline, training

SWEEP = {"samples", "nodes", "seconds"}
SCALING = {"mode", "workers", "s_per_epoch"}
TIMELINE = {"time", "node", "cpu_percent", "memory_used", "memory_total"}
CURVES = {"epoch", "train_acc", "val_acc", "train_loss", "val_loss"}


def read_rows(path: Path) -> tuple[set[str], list[dict]]:
    try:
        with open(path, newline="") as f:
            reader = csv.DictReader(f)
            rows = list(reader)
            return set(reader.fieldnames or ()), rows
    except (OSError, UnicodeDecodeError, csv.Error) as exc:
        raise UsageError(f"{path}: cannot read it as CSV ({exc})") from None


def _number(path: Path, row: dict, key: str, line: int) -> float:
    try:
        value = float(row[key])
    except (TypeError, ValueError):
        raise UsageError(f"{path}, line {line}: {key} {row.get(key)!r} is not a number") from None
    if not math.isfinite(value):
        raise UsageError(f"{path}, line {line}: {key} {row[key]!r} is not a finite number")
    return value


def _check(path: Path, rows: list[dict], keys: set[str]) -> None:
    if not rows:
        raise UsageError(f"{path}: no rows to plot")
    for line, row in enumerate(rows, start=2):
        for key in keys:
            if row.get(key) not in (None, ""):
                _number(path, row, key, line)


def plot(source: Path, out_dir: Path | None = None, formats: tuple[str, ...] = ("png", "svg"), title: str = "") -> list[Path]:
    """Draw every figure ``source`` holds data for; the files written."""
    source = Path(source)
    if source.is_dir():
        return _run_dir(source, out_dir or source / "plots", formats, title)
    if not source.is_file():
        raise UsageError(f"{source}: no such file or directory (give a sweep CSV, a scaling CSV or a run directory)")
    columns, rows = read_rows(source)
    out = out_dir or source.parent
    stem = source.stem
    if columns >= SWEEP:
        _check(source, rows, {"samples", "nodes", "seconds"})
        seconds = {(int(float(r["samples"])), int(float(r["nodes"]))): float(r["seconds"]) for r in rows if r["seconds"] not in ("", None)}
        if not seconds:
            raise UsageError(f"{source}: every cell failed; nothing to plot")
        return (sweep.time_figure(seconds, out, f"{stem}-time", formats, title)
                + sweep.speedup_figure(seconds, out, f"{stem}-speedup", formats))
    if columns >= SCALING:
        _check(source, rows, {"workers", "s_per_epoch"})
        return training.scaling_figure(rows, out, stem, formats, title)
    if columns >= TIMELINE:
        _check(source, rows, TIMELINE - {"node"})
        return timeline.timeline_figure(rows, out, stem, formats, title)
    if columns >= CURVES:
        return _run_dir(source.parent, out_dir or source.parent / "plots", formats, title)
    raise UsageError(f"{source}: not a sweep CSV (samples, nodes, seconds), a scaling CSV (mode, workers, s_per_epoch) "
                     "or a node timeline (time, node, cpu_percent, ...)")


def _run_dir(run: Path, out: Path, formats: tuple[str, ...], title: str) -> list[Path]:
    written: list[Path] = []
    metrics, nodes = run / "metrics.csv", run / "nodes.csv"
    if metrics.is_file():
        columns, rows = read_rows(metrics)
        missing = CURVES - columns
        if missing:
            raise UsageError(f"{metrics}: no {', '.join(sorted(missing))} column; is it a picluster run's metrics.csv?")
        _check(metrics, rows, CURVES | {"input_s", "compute_s", "exchange_s"})
        written += training.curves_figure(rows, out, "har-curves", formats, title)
        written += training.epoch_time_figure(rows, out, "har-epoch-time", formats)
    if nodes.is_file():
        columns, rows = read_rows(nodes)
        if columns >= TIMELINE and rows:
            _check(nodes, rows, TIMELINE - {"node"})
            written += timeline.timeline_figure(rows, out, "nodes", formats)
    if not written:
        raise UsageError(f"{run}: no metrics.csv or nodes.csv to plot (is it a run directory?)")
    return written
