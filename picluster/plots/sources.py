"""What ``picluster plot`` can draw from, told apart by what the file or directory holds.

- a sweep CSV (``run montecarlo --sweep ... --csv``, or the lab benchmark's): columns samples,
  nodes, seconds -> ``<name>-time`` and ``<name>-speedup``;
- a HAR scaling CSV (benchmarks/har_lab.py): columns mode, workers, s_per_epoch -> ``<name>``;
- a run directory: metrics.csv -> ``har-curves`` and ``har-epoch-time``; nodes.csv -> ``nodes``;
- a nodes.csv alone -> ``nodes``.
Files are untrusted input: every value drawn is checked (a number, finite, whole where it counts,
in range) and a bad one named by file, line and column in one line, exit 2, before any figure is
written.
"""

import csv
import math
from pathlib import Path

from picluster.plots import sweep, timeline, training
from picluster.plots.canvas import Rendered, check_out, check_title, write_all
from picluster.util.errors import UsageError

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


# What each column may hold: (whole number?, lowest, highest, lowest allowed?, blank allowed?).
# A time of 0 would divide a speedup by zero, a negative one be drawn as if real, 1.5 workers means nothing.
_ANY = math.inf
COLUMNS = {
    "samples": (True, 1, _ANY, True, False), "nodes": (True, 1, 4096, True, False), "seconds": (False, 0, _ANY, False, True),
    "workers": (True, 1, 4096, True, False), "s_per_epoch": (False, 0, _ANY, False, True),
    "time": (False, 0, _ANY, True, False), "cpu_percent": (False, 0, 100 * 4096, True, False),
    "memory_used": (False, 0, _ANY, True, False), "memory_total": (False, 0, _ANY, False, False),
    "epoch": (True, 0, 10**9, True, False), "train_acc": (False, 0, 1, True, True), "val_acc": (False, 0, 1, True, True),
    "train_loss": (False, 0, _ANY, True, True), "val_loss": (False, 0, _ANY, True, True),
    "input_s": (False, 0, _ANY, True, True), "compute_s": (False, 0, _ANY, True, True), "exchange_s": (False, 0, _ANY, True, True),
}
NAMES = {"node", "mode"}  # text columns: a name, never blank


def _value(path: Path, line: int, key: str, text) -> float | int | str | None:
    if key in NAMES:
        if not isinstance(text, str) or not text.strip():
            raise UsageError(f"{path}, line {line}: {key} is blank; every row needs one")
        return text
    whole, low, high, low_ok, blank_ok = COLUMNS[key]
    if text is None or (isinstance(text, str) and not text.strip()):
        if blank_ok:
            return None
        raise UsageError(f"{path}, line {line}: {key} is blank; every row needs one")
    try:
        value = float(text)
    except (TypeError, ValueError):
        raise UsageError(f"{path}, line {line}: {key} {text!r} is not a number") from None
    if not math.isfinite(value):
        raise UsageError(f"{path}, line {line}: {key} {text!r} is not a finite number")
    if whole and value != int(value):
        raise UsageError(f"{path}, line {line}: {key} {text!r} is not a whole number")
    if value < low or (value == low and not low_ok) or value > high:
        above = f"at least {low:g}" if low_ok else f"more than {low:g}"
        limit = f"{above} and at most {high:g}" if high != _ANY else above
        raise UsageError(f"{path}, line {line}: {key} {text!r} is out of range: give a number {limit}")
    return int(value) if whole else value


def _check(path: Path, rows: list[dict], keys: set[str]) -> list[dict]:
    """The rows with every drawn column checked and turned into numbers (None where blank is allowed)."""
    if not rows:
        raise UsageError(f"{path}: no rows to plot")
    checked = []
    for line, row in enumerate(rows, start=2):
        checked.append({**{k: v for k, v in row.items() if isinstance(k, str)},
                        **{key: _value(path, line, key, row.get(key)) for key in sorted(keys)}})
    return checked


def plot(source: Path, out_dir: Path | None = None, formats: tuple[str, ...] = ("png", "svg"), title: str = "") -> list[Path]:
    """Draw every figure ``source`` holds data for; the files written (all of them, or none)."""
    check_title(title)
    if out_dir is not None:
        check_out(out_dir, make=False)
    return write_all(_draw(Path(source), out_dir, formats, title))


def _draw(source: Path, out_dir: Path | None, formats: tuple[str, ...], title: str) -> list[Rendered]:
    if source.is_dir():
        return _run_dir(source, out_dir or source / "plots", formats, title)
    if not source.is_file():
        raise UsageError(f"{source}: no such file or directory (give a sweep CSV, a scaling CSV or a run directory)")
    columns, rows = read_rows(source)
    out = out_dir or source.parent
    stem = source.stem
    if columns >= SWEEP:
        rows = _check(source, rows, {"samples", "nodes", "seconds"})
        seconds = {(r["samples"], r["nodes"]): r["seconds"] for r in rows if r["seconds"] is not None}
        if not seconds:
            raise UsageError(f"{source}: every cell failed; nothing to plot")
        return (sweep.time_figure(seconds, out, f"{stem}-time", formats, title)
                + sweep.speedup_figure(seconds, out, f"{stem}-speedup", formats))
    if columns >= SCALING:
        rows = _check(source, rows, {"mode", "workers", "s_per_epoch"})
        return training.scaling_figure(rows, out, stem, formats, title)
    if columns >= TIMELINE:
        rows = _check(source, rows, TIMELINE)
        return timeline.timeline_figure(rows, out, stem, formats, title)
    if columns >= CURVES:
        return _run_dir(source.parent, out_dir or source.parent / "plots", formats, title)
    raise UsageError(f"{source}: not a sweep CSV (samples, nodes, seconds), a scaling CSV (mode, workers, s_per_epoch) "
                     "or a node timeline (time, node, cpu_percent, ...)")


def _run_dir(run: Path, out: Path, formats: tuple[str, ...], title: str) -> list[Rendered]:
    written: list[Rendered] = []
    metrics, nodes = run / "metrics.csv", run / "nodes.csv"
    if metrics.is_file():
        columns, rows = read_rows(metrics)
        missing = CURVES - columns
        if missing:
            raise UsageError(f"{metrics}: no {', '.join(sorted(missing))} column; is it a picluster run's metrics.csv?")
        rows = _check(metrics, rows, CURVES | {"input_s", "compute_s", "exchange_s"})
        written += training.curves_figure(rows, out, "har-curves", formats, title)
        written += training.epoch_time_figure(rows, out, "har-epoch-time", formats)
    if nodes.is_file():
        columns, rows = read_rows(nodes)
        if columns >= TIMELINE and rows:
            rows = _check(nodes, rows, TIMELINE)
            written += timeline.timeline_figure(rows, out, "nodes", formats)
    if not written:
        raise UsageError(f"{run}: no metrics.csv or nodes.csv to plot (is it a run directory?)")
    return written
