"""The size of a sync update, chosen by the wall time it predicts: the emulator's epochs to the
target (har_recipes.py, 30 seeds a size) times the cost model's epoch at that size (har_cost.py's
parts, measured on the lab), plus the start-up.

An update of B windows split over N workers holds U = n / B updates an epoch (n: the training
windows); a worker computes B / N windows a step at the compute seconds a window measured, and
the exchange costs what one update costs at N workers (the bytes do not depend on B).  Larger
updates make fewer, cheaper epochs' worth of exchanges but need more epochs: the median seed's
epochs to validation >= 96 % (a seed that never gets there in 40 counts as 41), and the share of
seeds that never get there, decide.

    .venv/bin/python benchmarks/har_batch.py --recipes docs/data/har_batch.csv \\
        --exchange docs/data/har_exchange_h17.csv --design allreduce --workers 8,16
"""

import argparse
import csv
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from har_cost import exchange, fit_hops, load
from har_recipes import first_reach

TRAIN_WINDOWS = 5_998  # the training volunteers' windows (picluster data har)


def size_of(options: str) -> int | None:
    """The update's windows a variant's options give (--global-batch --batch B)."""
    words = options.split()
    if "--global-batch" in words and "--batch" in words:
        return int(words[words.index("--batch") + 1])
    return None


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--recipes", type=Path, required=True, help="har_recipes.py's rows: a variant per update size")
    ap.add_argument("--exchange", nargs="+", type=Path, required=True, help="har_exchange.py's rows (the parts)")
    ap.add_argument("--design", default="allreduce")
    ap.add_argument("--workers", default="8,16")
    ap.add_argument("--target", type=float, default=0.96)
    ap.add_argument("--startup", type=float, default=0.0, help="seconds before the first step, added to each [0]")
    args = ap.parse_args()
    runs = load(args.exchange)
    hops = fit_hops(runs, 8)
    with open(args.recipes, newline="") as f:
        rows = list(csv.DictReader(f))
    print("| workers | update, windows | updates an epoch | seeds | never reach it | epochs to it: median (never = 41) | "
          "s an epoch, predicted | to the target, predicted s (median seed) |")
    print("|---|---|---|---|---|---|---|---|")
    for n in (int(w) for w in args.workers.split(",")):
        measured = [r for r in runs if r.design == args.design and r.workers == n]
        if not measured:
            print(f"| {n} | no {args.design} run measured at {n} workers |")
            continue
        run = sorted(measured, key=lambda r: r.epoch)[len(measured) // 2]  # the median run's parts
        per_window = run.compute / (TRAIN_WINDOWS / n / run.updates)  # compute seconds a window
        per_input = run.input / (TRAIN_WINDOWS / n / run.updates)
        x = exchange(run, hops)
        sizes: dict[int, list[dict]] = {}
        for r in rows:
            b = size_of(r["options"])
            if int(r["workers"]) == n and b is not None:
                sizes.setdefault(b, []).append(r)
        for b in sorted(sizes):
            curves = [[float(v) for v in r["val_acc"].split(";")] for r in sizes[b]]
            reach = [first_reach(c, args.target) or len(c) + 1 for c in curves]
            never = sum(first_reach(c, args.target) is None for c in curves)
            updates = TRAIN_WINDOWS // b
            epoch = updates * ((b // n) * (per_window + per_input) + x)
            epochs = statistics.median(reach)
            print(f"| {n} | {b} | {updates} | {len(curves)} | {never} | {epochs:g} | {epoch:.2f} | "
                  f"{args.startup + epochs * epoch:.0f} |")


if __name__ == "__main__":
    main()
