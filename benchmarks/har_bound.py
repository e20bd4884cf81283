"""The bound on HAR's wall time to a target, and how many epochs each worker count may take.

    wall >= start-up + E x (windows x c / N + updates x x + f)

fitted to what the lab runs of benchmarks/har_wall.py measured (their run directories): c, the
compute seconds per training window on one worker (metrics.csv's compute_s over the windows a
worker trained in the epoch); x, the exposed exchange per update (exchange_s over the epoch's
updates: receiving the weights, sending the gradients, waiting for the others and the update);
f, the seconds per epoch outside the steps (an epoch's wall time, from one row's time to the
next's, less its epoch_s); start-up, the command's start to the first step.  With one Pi's time
to the target T (the median of its runs), a speedup S holds only if

    E <= (T / S - start-up) / (windows x c / N + updates x x + f)

and the statistics emulator's rows (benchmarks/har_recipes.py, the same recipe) say how often a
seed reaches the target within that many epochs.

    .venv/bin/python benchmarks/har_bound.py --wall docs/data/har_wall_defaults.csv \\
        --runs benchmarks/results/har_wall --recipes docs/data/har_recipes.csv --variant default --speedups 4,6

``--paired`` needs no run directories: each configuration's epoch (time to the target less
start-up, over its epochs) and start-up, the medians of its rows, one Pi's likewise, give the
speedup each of the emulator's seeds would get on that lab, pairing its epochs to the target with
one Pi's of the same seed (``--pi-variant``'s rows, worker count 1; never reached: 41 epochs):

    .venv/bin/python benchmarks/har_bound.py --paired --wall docs/data/har_wall_h9_gb400.csv \\
        --recipes docs/data/har_recipes.csv --variant gb400-b2-0.95 --config gb400 --workers 8
"""

import argparse
import csv
import json
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from har_recipes import first_reach

from picluster.jobs.har.metrics import read_rows


def per_run(run_dir: Path, wall: dict) -> dict | None:
    """c and x of one lab run (medians over its epochs after the first), f and the epoch's wall
    time from its har_wall row (to the target: what is not start-up nor steps, over its epochs;
    metrics.csv's times are when a row was recorded, which the checkpoint thread and the evaluator
    beside the coordinator shift), and its shape."""
    rows = read_rows(run_dir / "metrics.csv")
    config = json.loads((run_dir / "config.json").read_text())
    if len(rows) < 3:
        return None
    workers = 1 if config["standalone"] else config["workers"]
    batch = config["batch"] if config["batch_per_worker"] or config["standalone"] else config["batch"] // workers
    steps = int(float(rows[1]["global_step"])) - int(float(rows[0]["global_step"]))  # updates an epoch (sync, or one worker)
    windows_each = steps * batch  # windows one worker trains in an epoch
    later = rows[1:]
    epochs = int(wall["epochs"])
    after_startup = float(wall["to_target_s"] or wall["wall_s"]) - float(wall["startup_s"])
    return {"workers": workers, "updates": steps, "windows": windows_each * workers,
            "c": statistics.median(float(r["compute_s"]) / windows_each for r in later),
            "x": statistics.median(float(r["exchange_s"]) / steps for r in later),
            "f": (after_startup - float(wall["steps_s"])) / epochs, "epoch": after_startup / epochs}


def paired(args, wall: list[dict]) -> None:
    """The --paired projection (see the module's text)."""
    def shape(config: str, workers: int) -> tuple[float, float, int]:
        rows = [r for r in wall if r["config"] == config and int(r["workers"]) == workers and r.get("to_target_s")]
        if not rows:
            raise SystemExit(f"{args.wall}: no run of {config} at {workers} workers reached the target")
        epoch = statistics.median((float(r["to_target_s"]) - float(r["startup_s"])) / int(r["epochs"]) for r in rows)
        return statistics.median(float(r["startup_s"]) for r in rows), epoch, len(rows)

    def epochs(variant: str, workers: int) -> dict[int, int]:
        with open(args.recipes) as f:
            return {int(r["seed"]): first_reach([float(v) for v in r["val_acc"].split(";")], args.target) or 41
                    for r in csv.DictReader(f) if r["variant"] == variant and int(r["workers"]) == workers}

    pi_start, pi_epoch, pi_runs = shape("pi", 1)
    start, epoch, runs = shape(args.config, args.workers)
    one, many = epochs(args.pi_variant, 1), epochs(args.variant, args.workers)
    seeds = sorted(set(one) & set(many))
    if not seeds:
        raise SystemExit(f"{args.recipes}: no seed has rows of both {args.pi_variant} (1) and {args.variant} ({args.workers})")
    speedups = [(pi_start + pi_epoch * one[s]) / (start + epoch * many[s]) for s in seeds]
    q1, _, q3 = statistics.quantiles(speedups, n=4)
    print(f"one Pi: start-up {pi_start:.1f} s, {pi_epoch:.2f} s an epoch ({pi_runs} runs); {args.config} x {args.workers}: "
          f"start-up {start:.1f} s, {epoch:.2f} s an epoch ({runs} runs)")
    print(f"{len(seeds)} emulator seeds: speedup median {statistics.median(speedups):.2f}x (q1-q3 {q1:.2f}-{q3:.2f}); "
          + ", ".join(f"{sum(x >= float(v) for x in speedups)} at >= {v}x" for v in args.speedups.split(",")))
    same = [(pi_start + pi_epoch * one[s]) / (start + epoch * one[s]) for s in seeds]
    print(f"if {args.workers} workers needed one Pi's epochs, seed by seed: median {statistics.median(same):.2f}x; "
          f"with no start-up either: {statistics.median((pi_start + pi_epoch * one[s]) / (epoch * one[s]) for s in seeds):.2f}x")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--wall", type=Path, required=True, help="har_wall.py's rows (one Pi's and the clusters' times)")
    parser.add_argument("--runs", type=Path, help="the folder of their run directories (CONFIG-WORKERS-SEED); not with --paired")
    parser.add_argument("--paired", action="store_true", help="project the emulator's seeds onto the lab's epochs and start-ups")
    parser.add_argument("--workers", type=int, default=8, help="--paired: the worker count [8]")
    parser.add_argument("--pi-variant", default="base", help="--paired: one Pi's rows in --recipes [base]")
    parser.add_argument("--recipes", type=Path, help="har_recipes.py's rows: the emulator's epochs to the target")
    parser.add_argument("--variant", default=None, help="the recipes' variant the lab ran [each worker count's best row]")
    parser.add_argument("--config", default="resident", help="the lab's configuration to fit [resident]")
    parser.add_argument("--speedups", default="4,6")
    parser.add_argument("--target", type=float, default=0.96)
    args = parser.parse_args()
    with open(args.wall) as f:
        wall = list(csv.DictReader(f))
    if args.paired:
        if not args.recipes or not args.variant:
            parser.error("--paired needs --recipes and --variant")
        paired(args, wall)
        return
    if args.runs is None:
        parser.error("--runs is needed (or --paired)")
    pi = [float(r["to_target_s"]) for r in wall if r["config"] == "pi" and r.get("to_target_s")]
    if not pi:
        raise SystemExit(f"{args.wall}: no one-Pi run reached the target")
    t_pi = statistics.median(pi)
    print(f"one Pi: median {t_pi:.0f} s to {args.target:.0%} over {len(pi)} runs; start-up {statistics.median(float(r['startup_s']) for r in wall if r['config'] == 'pi'):.0f} s")
    recipes: dict[int, list[list[float]]] = {}
    if args.recipes:
        with open(args.recipes) as f:
            for r in csv.DictReader(f):
                if args.variant is None or r["variant"] == args.variant:
                    recipes.setdefault(int(r["workers"]), []).append([float(v) for v in r["val_acc"].split(";")])
    print("| workers | c, ms a window | x, s an update | f, s an epoch | updates an epoch | epoch, s (model / measured) | start-up, s | "
          + " | ".join(f"E for {s}x | seeds within it (emulator)" for s in args.speedups.split(",")) + " |")
    print("|---|---|---|---|---|---|---|" + "---|---|" * len(args.speedups.split(",")))
    for workers in sorted({int(r["workers"]) for r in wall if r["config"] == args.config}):
        runs = [per_run(args.runs / f"{args.config}-{workers}-{r['seed']}", r) for r in wall
                if r["config"] == args.config and int(r["workers"]) == workers and (args.runs / f"{args.config}-{workers}-{r['seed']}").is_dir()]
        runs = [r for r in runs if r]
        if not runs:
            continue
        m = {k: statistics.median(r[k] for r in runs) for k in ("c", "x", "f", "updates", "windows", "epoch")}
        model = m["windows"] * m["c"] / workers + m["updates"] * m["x"] + m["f"]
        startup = statistics.median(float(r["startup_s"]) for r in wall if r["config"] == args.config and int(r["workers"]) == workers)
        cells = []
        for s in (float(v) for v in args.speedups.split(",")):
            budget = (t_pi / s - startup) / model
            curves = recipes.get(workers, [])
            within = sum(1 for c in curves if (e := first_reach(c, args.target)) is not None and e <= budget)
            cells.append(f"{budget:.1f} | {f'{within} of {len(curves)}' if curves else '-'}")
        print(f"| {workers} | {1000 * m['c']:.2f} | {m['x']:.3f} | {m['f']:.2f} | {m['updates']:g} | {model:.2f} / {m['epoch']:.2f} | {startup:.0f} | "
              + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
