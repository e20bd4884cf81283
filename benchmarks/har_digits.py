"""The same metrics, digit for digit, from two revisions of picluster: one sync run of one seed per
shape, a few epochs each, its metrics.csv and result.json compared value by value, times aside.

A redesign of the training's code must not change what it computes.  Each revision is exported
(`git archive`, har_startup.py's way) and run through a python that imports it first; every run
is `picluster train har --layers 3 --seed S --epochs E` with the shape's options, on this machine:

    alone       a process alone (`--workers 1`: the card's default runs here)
    local8      8 sync workers on the embedded local cluster (real servers on 127.0.0.1)
    emulate16   the statistics emulator of 16 sync workers (`--emulate --workers 16`)

    .venv/bin/python benchmarks/har_digits.py --revision before=651e461 --revision after=HEAD --epochs 2

It prints one line per shape (the values compared, and any that differ) and exits 1 when any does.
"""

import argparse
import csv
import json
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from har_startup import export, picluster

SHAPES = {"alone": ["--workers", "1"], "local8": ["--workers", "8"], "emulate16": ["--emulate", "--workers", "16"]}
# What a run's timing decides, not its arithmetic: left out of the comparison.
TIMES = {"epoch_s", "input_s", "compute_s", "exchange_s", "straggler", "straggler_ms", "wall_s", "time", "eval_s",
         "staleness_mean", "staleness_max"}
# result.json's keys that hold times, or the run's folder and options (config), not its scores.
RESULT_TIMES = {"wall_s", "epoch_s_mean", "config", "resumes", "test_scored", "lost_workers", "elastic"}


def run(venv: Path, shape: str, seed: int, epochs: int, folder: Path) -> tuple[list[dict], dict]:
    run_dir = folder / shape
    proc = picluster(venv, "train", "har", "--layers", "3", "--seed", str(seed), "--epochs", str(epochs), *SHAPES[shape],
                     "--run-dir", str(run_dir), "--json", timeout=1800)
    if proc.returncode != 0:
        raise SystemExit(f"{shape} failed ({proc.returncode}): {proc.stderr.strip()[-1500:]}")
    with open(run_dir / "metrics.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    return rows, json.loads((run_dir / "result.json").read_text())


def differences(a: tuple[list[dict], dict], b: tuple[list[dict], dict]) -> tuple[int, list[str]]:
    """(values compared, those that differ) between two runs' rows and results."""
    compared, differ = 0, []
    (rows_a, result_a), (rows_b, result_b) = a, b
    if len(rows_a) != len(rows_b):
        differ.append(f"{len(rows_a)} rows against {len(rows_b)}")
    for ra, rb in zip(rows_a, rows_b):
        for key in sorted((set(ra) | set(rb)) - TIMES):
            compared += 1
            if ra.get(key) != rb.get(key):
                differ.append(f"epoch {ra.get('epoch')} {key}: {ra.get(key)} against {rb.get(key)}")
    for key in sorted((set(result_a) | set(result_b)) - RESULT_TIMES):
        compared += 1
        if result_a.get(key) != result_b.get(key):
            differ.append(f"result {key}: {result_a.get(key)} against {result_b.get(key)}")
    return compared, differ


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--revision", action="append", required=True, metavar="NAME=REV", help="two revisions, named")
    parser.add_argument("--shapes", default="alone,local8,emulate16")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--epochs", type=int, default=2)
    args = parser.parse_args()
    if len(args.revision) != 2:
        parser.error("give two --revision NAME=REV")
    venvs = {name: export(name, rev) for name, rev in (r.split("=", 1) for r in args.revision)}
    failed = False
    with tempfile.TemporaryDirectory(prefix="har-digits-") as tmp:
        for shape in args.shapes.split(","):
            got = {name: run(venv, shape, args.seed, args.epochs, Path(tmp) / name) for name, (_, venv) in venvs.items()}
            a, b = got.values()
            compared, differ = differences(a, b)
            commits = " against ".join(f"{name} ({venvs[name][0][:7]})" for name in got)
            print(f"{shape}: {commits}: {compared} values compared, {len(differ)} differ" + "".join(f"\n  {d}" for d in differ[:20]))
            failed |= bool(differ)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
