"""Recipes for few, large updates, judged on validation with the statistics emulator, 30+ seeds each.

Each run is `picluster train har --emulate --workers N` (one process making exactly the updates
of N sync workers; N = 1: `--standalone`, one Pi alone), 40 epochs, one thread (as a worker on a
Pi-shaped test host has: the numbers are then the lab's own), two runs at a time (one a core).  A
run's row keeps its validation accuracy and loss after every epoch; the test set is never read
here for a choice: every choice is made on validation.  The test set is scored once per run, at
its end, for the model validation chose (the best epoch), and kept in the row (``best_epoch``,
``test_acc``) for the accuracy pairs against one Pi, by seed (``--pairs``).  The report gives,
per variant and worker count: the seeds whose validation reached the target within the epochs,
the distribution of the epochs it took (first epoch >= target; and two epochs in a row), and
validation's mean and its swing (the mean absolute change from one epoch to the next) over the
last half of the epochs.

    .venv/bin/python benchmarks/har_recipes.py --rows benchmarks/results/har_recipes.csv --workers 1,8,16 \\
        --seeds 1-30 --variant "base=" --variant "beta2-0.99=--adam-beta2 0.99"
    .venv/bin/python benchmarks/har_recipes.py --report benchmarks/results/har_recipes.csv
    .venv/bin/python benchmarks/har_recipes.py --pairs benchmarks/results/har_recipes.csv

A run already in the rows file is not run again, so the command continues where it stopped.
Each row keeps the options its run resolved to (``config_id``: config.json's digest, without the
seed and the data folder, and ``config``: the fields that differ from the defaults) and the
revision that ran it.  A variant whose new run resolves to another config than the rows it
already has (the defaults changed under its name) stops the study, naming both: give the variant
a new name or its own rows file; the report and the pairs keep each config apart.
"""

import argparse
import csv
import hashlib
import itertools
import json
import os
import shlex
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PICLUSTER = Path(sys.executable).with_name("picluster")
COLUMNS = ["variant", "options", "workers", "seed", "epochs", "threads", "wall_s", "val_acc", "val_loss", "train_loss",
           "best_epoch", "test_acc", "config_id", "config", "revision"]  # the last ones empty in rows made before they were kept
NOT_THE_RECIPE = ("seed", "data_dir")  # fields of config.json that differ by run, not by recipe


def revision() -> str:
    """The commit that runs, marked ``-dirty`` when picluster/ differs from it."""
    git = lambda *a: subprocess.run(["git", "-C", str(ROOT), *a], capture_output=True, text=True).stdout.strip()
    head = git("rev-parse", "--short=12", "HEAD") or "unknown"
    return head + ("-dirty" if git("status", "--porcelain", "--", "picluster") else "")


def recipe(config: dict) -> tuple[str, str]:
    """(digest, the fields that differ from TrainConfig's defaults) of a run's resolved config."""
    from picluster.jobs.har.config import TrainConfig

    kept = {k: v for k, v in config.items() if k not in NOT_THE_RECIPE}
    defaults = json.loads(TrainConfig().to_json())
    digest = hashlib.sha256(json.dumps(kept, sort_keys=True).encode()).hexdigest()[:12]
    return digest, " ".join(f"{k}={v}" for k, v in sorted(kept.items()) if defaults.get(k) != v)


def seeds(text: str) -> list[int]:
    out: list[int] = []
    for part in text.split(","):
        low, _, high = part.partition("-")
        out += range(int(low), int(high or low) + 1)
    return out


def run_one(variant: str, options: str, workers: int, seed: int, epochs: int, threads: int, data_dir: str | None) -> dict:
    with tempfile.TemporaryDirectory(prefix="har-recipe-") as tmp:
        run_dir = Path(tmp) / "run"
        where = ["--standalone"] if workers == 1 else ["--emulate", "--workers", str(workers)]
        argv = [str(PICLUSTER), "train", "har", *where, "--seed", str(seed), "--epochs", str(epochs), "--threads", str(threads),
                "--run-dir", str(run_dir), "--no-live", "--json", *(["--data-dir", data_dir] if data_dir else []), *shlex.split(options)]
        started = time.perf_counter()
        done = subprocess.run(argv, capture_output=True, text=True, env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2"))
        wall = time.perf_counter() - started
        if done.returncode != 0:
            raise SystemExit(f"{shlex.join(argv)} failed ({done.returncode}): {done.stderr.strip()[-2000:]}")
        with open(run_dir / "metrics.csv") as f:
            rows = list(csv.DictReader(f))
        result = json.loads((run_dir / "result.json").read_text())
        config_id, config = recipe(json.loads((run_dir / "config.json").read_text()))
    join = lambda key: ";".join(f"{float(r[key]):.5f}" for r in rows)
    return {"variant": variant, "options": options, "workers": workers, "seed": seed, "epochs": len(rows), "threads": threads,
            "wall_s": f"{wall:.1f}", "val_acc": join("val_acc"), "val_loss": join("val_loss"), "train_loss": join("train_loss"),
            "best_epoch": result["best_epoch"], "test_acc": f"{result['test_accuracy']:.5f}",
            "config_id": config_id, "config": config, "revision": revision()}


def measure(args) -> None:
    path = Path(args.rows)
    path.parent.mkdir(parents=True, exist_ok=True)
    done = set()
    configs: dict[tuple[str, int], str] = {}  # (variant, workers): the config its rows resolved to
    lock = threading.Lock()
    if path.exists():
        with open(path) as f:
            reader = csv.DictReader(f)
            old, header = list(reader), reader.fieldnames
        done = {(r["variant"], int(r["workers"]), int(r["seed"])) for r in old}
        for r in old:
            if r.get("config_id"):
                configs.setdefault((r["variant"], int(r["workers"])), r["config_id"])
        if header != COLUMNS:  # rows of an earlier version: the new columns added, empty
            with open(path, "w", newline="") as f:
                writer = csv.DictWriter(f, COLUMNS, restval="")
                writer.writeheader()
                writer.writerows(old)
    else:
        with open(path, "w", newline="") as f:
            csv.DictWriter(f, COLUMNS).writeheader()
    todo = [(name, opts, w, s) for name, _, opts in (v.partition("=") for v in args.variant)
            for w in (int(x) for x in args.workers.split(",")) for s in seeds(args.seeds) if (name, w, s) not in done]
    print(f"{len(todo)} runs to make ({len(done)} in {path} already)", file=sys.stderr)

    def one(item):
        while args.pause_while and Path(args.pause_while).exists():  # a timing run has the machine: wait between runs
            time.sleep(5)
        row = run_one(*item, args.epochs, args.threads, args.data_dir)
        with lock:
            had = configs.setdefault((row["variant"], row["workers"]), row["config_id"])
        if had != row["config_id"]:
            raise SystemExit(f"{row['variant']} x{row['workers']}: this revision resolves its options to config {row['config_id']} "
                             f"({row['config'] or 'the defaults'}), the rows in {path} to {had}: the defaults changed under the name; "
                             "give the variant a new name or --rows another file (the run's row is not kept)")
        with open(path, "a", newline="") as f:  # one row a run: an interrupted study keeps what it made
            csv.DictWriter(f, COLUMNS).writerow(row)
        print(f"{row['variant']} x{row['workers']} seed {row['seed']}: {row['wall_s']} s, epochs to target "
              f"{first_reach([float(v) for v in row['val_acc'].split(';')], args.target) or '-'}", file=sys.stderr)

    with ThreadPoolExecutor(args.jobs) as pool:
        list(pool.map(one, todo))


def first_reach(val: list[float], target: float, run: int = 1) -> int | None:
    """The first epoch (from 1) ending ``run`` epochs in a row at or above ``target``."""
    streak = 0
    for epoch, v in enumerate(val, 1):
        streak = streak + 1 if v >= target else 0
        if streak >= run:
            return epoch
    return None


def summary(rows: list[dict], target: float) -> dict:
    curves = [[float(v) for v in r["val_acc"].split(";")] for r in rows]
    reach = [first_reach(c, target) for c in curves]
    twice = [first_reach(c, target, 2) for c in curves]
    hit = sorted(e for e in reach if e is not None)
    late = [c[len(c) // 2:] for c in curves]
    means = [statistics.fmean(c) for c in late]
    swings = [statistics.fmean(abs(b - a) for a, b in itertools.pairwise(c)) for c in late]
    q = lambda xs, p: xs[min(len(xs) - 1, int(p * (len(xs) - 1) + 0.5))] if xs else None
    return {"seeds": len(rows), "reached": len(hit), "never": len(rows) - len(hit),
            "epochs_median": statistics.median(hit) if hit else None, "epochs_q1": q(hit, 0.25), "epochs_q3": q(hit, 0.75),
            # Seeds that never reach the target count as beyond the last epoch: the median over all seeds.
            "epochs_median_all": statistics.median([e if e is not None else len(curves[0]) + 1 for e in reach]),
            "twice_median": statistics.median([e for e in twice if e is not None]) if any(e is not None for e in twice) else None,
            "twice_reached": sum(e is not None for e in twice),
            "val_mean": statistics.fmean(means), "val_mean_sd": statistics.stdev(means) if len(means) > 1 else 0.0,
            "swing": statistics.fmean(swings)}


def _named(rows: list[dict]) -> list[str]:
    """Each row's variant as the tables name it: with its config (``name@config_id``, ``@?`` for rows
    made before it was kept) where the variant's rows at one worker count resolved to more than one."""
    seen: dict[tuple[str, str], set[str]] = {}
    for r in rows:
        seen.setdefault((r["variant"], r["workers"]), set()).add(r.get("config_id") or "?")
    return [r["variant"] if len(seen[(r["variant"], r["workers"])]) == 1 else f"{r['variant']}@{r.get('config_id') or '?'}" for r in rows]


def report(args) -> None:
    with open(args.report) as f:
        rows = list(csv.DictReader(f))
    groups: dict[tuple, list[dict]] = {}
    for r, name in zip(rows, _named(rows)):
        groups.setdefault((int(r["workers"]), name), []).append(r)
    out = []
    never = len(next(iter(groups.values()))[0]["val_acc"].split(";")) + 1  # a seed that never reaches it, counted as one epoch past the last
    print(f"| workers | variant | options | seeds | never reach {args.target:.0%} | epochs to it: median (q1-q3) | median, never = {never} "
          f"| two in a row: median (seeds) | val mean, last half | swing |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for (workers, variant), rs in sorted(groups.items()):
        s = summary(rs, args.target)
        out.append({"workers": workers, "variant": variant, "options": rs[0]["options"], **s})
        epochs = f"{s['epochs_median']:g} ({s['epochs_q1']}-{s['epochs_q3']})" if s["reached"] else "-"
        twice = f"{s['twice_median']:g} ({s['twice_reached']})" if s["twice_median"] is not None else "-"
        print(f"| {workers} | {variant} | `{rs[0]['options'] or '(defaults)'}` | {s['seeds']} | {s['never']} ({s['never'] / s['seeds']:.0%}) | {epochs} "
              f"| {s['epochs_median_all']:g} | {twice} | {s['val_mean']:.2%} ± {s['val_mean_sd']:.2%} | {s['swing']:.2%} |")
    if args.json:
        print(json.dumps(out, indent=1))


def pairs(args) -> None:
    """Test accuracy of each variant against one Pi (1 worker, the baseline variant), seed by seed:
    the test set scored once per run, for the epoch validation chose.  With ``--against NAME``:
    each variant against NAME at its own worker count instead (e.g. a wire against float32's)."""
    with open(args.pairs) as f:
        rows = [r for r in csv.DictReader(f) if r.get("test_acc")]
    groups: dict[tuple, dict[int, float]] = {}
    for r, name in zip(rows, _named(rows)):
        groups.setdefault((int(r["workers"]), name), {})[int(r["seed"])] = float(r["test_acc"])
    if args.against:
        print(f"| workers | variant | pairs | test acc, mean ± sd | minus {args.against}: mean ± sd | its 95 % interval | seeds below it by > 0.5 points |")
        print("|---|---|---|---|---|---|---|")
        for (workers, variant), by_seed in sorted(groups.items()):
            if variant != args.against and (workers, args.against) in groups:
                _paired(workers, variant, by_seed, groups[(workers, args.against)])
        return
    pi = groups.get((1, args.baseline), {})
    if len(pi) < 2:
        raise SystemExit(f"{args.pairs}: fewer than 2 one-Pi rows ({args.baseline}, 1 worker) with a test score: nothing to pair")
    print(f"one Pi ({args.baseline}): {len(pi)} seeds, test {statistics.fmean(pi.values()):.2%} ± {statistics.stdev(pi.values()):.2%}")
    print("| workers | variant | pairs | test acc, mean ± sd | minus one Pi: mean ± sd | its 95 % interval | seeds below one Pi by > 0.5 points |")
    print("|---|---|---|---|---|---|---|")
    for (workers, variant), by_seed in sorted(groups.items()):
        if workers > 1:
            _paired(workers, variant, by_seed, pi)


def _paired(workers: int, variant: str, by_seed: dict[int, float], base: dict[int, float]) -> None:
    """One row: ``by_seed``'s test accuracy less ``base``'s over their common seeds (at least 2)."""
    common = sorted(set(by_seed) & set(base))
    if len(common) < 2:
        return
    diff = [100 * (by_seed[s] - base[s]) for s in common]
    mean, sd = statistics.fmean(diff), statistics.stdev(diff)
    half = 2.045 * sd / len(diff) ** 0.5 if len(diff) >= 30 else 2.26 * sd / len(diff) ** 0.5  # t(29) / t(9), near enough for 10-30
    acc = [100 * by_seed[s] for s in common]
    print(f"| {workers} | {variant} | {len(common)} | {statistics.fmean(acc):.2f} ± {statistics.stdev(acc):.2f} % | {mean:+.2f} ± {sd:.2f} | "
          f"{mean - half:+.2f} to {mean + half:+.2f} | {sum(d < -0.5 for d in diff)} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", help="CSV of runs, appended to")
    parser.add_argument("--workers", default="1,8,16")
    parser.add_argument("--seeds", default="1-30")
    parser.add_argument("--variant", action="append", default=[], help="NAME=OPTIONS (train har's options; NAME= alone: the defaults)")
    parser.add_argument("--epochs", type=int, default=40)
    parser.add_argument("--threads", type=int, default=1, help="each run's threads (1: as a worker on a Pi-shaped test host)")
    parser.add_argument("--jobs", type=int, default=2, help="runs at once")
    parser.add_argument("--pause-while", metavar="FILE",
                        help="start no run while FILE exists (a timing benchmark shares the machine; runs under way finish)")
    parser.add_argument("--data-dir", default=None)
    parser.add_argument("--target", type=float, default=0.96)
    parser.add_argument("--report", help="print the table of a rows CSV")
    parser.add_argument("--json", action="store_true", help="with --report: the summaries as JSON too")
    parser.add_argument("--pairs", help="print each variant's test accuracy against one Pi's, paired by seed, from a rows CSV")
    parser.add_argument("--baseline", default="base", help="with --pairs: the one-Pi variant [base]")
    parser.add_argument("--against", help="with --pairs: pair each variant with this one at the same worker count, not with one Pi")
    args = parser.parse_args()
    if args.report:
        report(args)
    elif args.pairs:
        pairs(args)
    elif args.rows and args.variant:
        measure(args)
    else:
        parser.error("give --rows and --variant, --report or --pairs")


if __name__ == "__main__":
    main()
