"""HAR accuracy study: reruns the table of model/optimisation configurations in the README.

Run: .venv/bin/python benchmarks/har_study.py [--configs defaults,conv+l2-0.0005+rot45-all ...] [--seeds 1,2,3]
         [--epochs N] [-j 1] [--cluster] [--threads 1] [--common "--mode async"] [--tag T] [--keep DIR]
     .venv/bin/python benchmarks/har_study.py --cv [--folds 5] [--seeds 1,2,3,4,5] [--configs recipe-mirror,recipe-nomirror]

Each (configuration, seed) is a real `picluster train har` run, one process (--standalone)
unless --cluster (the default temporary local cluster: 1 ps + 2 workers, sync).  The model is
the epoch with the best validation accuracy (4 held-out volunteers); the table shows that
epoch, its validation accuracy and the test accuracy the run scored once at its end, and the
run's wall time.  Test accuracy is never used to choose anything.  A "summary" row per
configuration gives the mean and the sample standard deviation (n - 1) over its seeds.  The
test accuracy of a full run at 8 workers against 1 (sync, on the temporary local cluster; sync
runs repeat exactly, so the machine's load changes only their time; measured with the recipe of
the time, recipe-mirror):
    .venv/bin/python benchmarks/har_study.py --configs recipe-mirror --seeds 1,2,3,4,5 --cluster --common "--workers 1" --tag w1
    .venv/bin/python benchmarks/har_study.py --configs recipe-mirror --seeds 1,2,3,4,5 --cluster --common "--workers 8" --tag w8

--cv: leave-volunteers-out cross-validation, for recipe claims.  The training volunteers of the
prepared data (its train and validation splits; never a test volunteer) are dealt into --folds
groups (jobs/har/folds.py; with 5 folds on UCI HAR one of them is the usual validation split);
each (configuration, seed, fold) trains on the other folds and validates on its own
(--val-volunteers).  By default the recipe with and without the mirror augmentation, 5 seeds.
Per configuration: the mean and the sample standard deviation (n - 1) of validation accuracy
over every fold and seed, both at the epoch chosen on that validation (optimistic: chosen and
scored on the same volunteers) and at the last epoch (no choice made).  Test scores are not
read.  Rows (and a "summary" row per configuration) are appended to
benchmarks/results/har_study.jsonl as they finish, so an interrupted study keeps what it
measured.  A benchmark, not a test: nothing asserts.
"""

import argparse
import csv
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from picluster.util.errors import UsageError  # noqa: E402

# resbidir with its defaults: the study's baseline until issue 13.  Names joined by '+' add their
# options in order (the last value of an option wins), so "conv+l2-0.0005+rot45-all" is the
# chosen recipe spelt out, exactly as the issue-13 study ran it (docs/har.md).
RESBIDIR = ["--model", "resbidir"]
CONV = ["--model", "convlstm", "--l2", "0.005", "--augment", ""]  # convlstm on resbidir's former defaults
CONFIGS = {
    "defaults": RESBIDIR,
    "window": [*RESBIDIR, "--norm", "window", "--raw-inputs", "--linear-logits", "--lr-schedule", "constant"],
    "thesis": [*RESBIDIR, "--norm", "batch", "--raw-inputs", "--relu-logits", "--lr-schedule", "constant"],
    "norm-batch": [*RESBIDIR, "--norm", "batch"],
    "norm-step": [*RESBIDIR, "--norm", "step"],
    "norm-none": [*RESBIDIR, "--norm", "none"],
    "standardise": ["--standardise"],
    "raw": ["--raw-inputs"],
    "relu-logits": [*RESBIDIR, "--relu-logits"],
    "cosine": ["--lr-schedule", "cosine"],
    "constant": ["--lr-schedule", "constant"],
    "hidden48": [*RESBIDIR, "--hidden", "48"],
    "hidden64": [*RESBIDIR, "--hidden", "64"],
    "l2-0.001": ["--l2", "0.001"],
    "keep-0.7": ["--keep-prob", "0.7"],
    "lr-0.002": ["--lr", "0.002"],
    "ema": ["--ema", "0.99"],
    "window-stats": [*RESBIDIR, "--window-stats"],
    "res3-nobidir": [*RESBIDIR, "--residual", "3", "--no-bidir"],  # the thesis' best row (93.2 %, chosen on test)
    # issue 13: the convolutional-recurrent model and its options, and the augmentations
    "conv": [*CONV, "--standardise"],
    "conv-raw": [*CONV, "--raw-inputs"],
    "l2-0.0005": ["--l2", "0.0005"],
    "l2-0": ["--l2", "0"],
    "mean": ["--readout", "mean"],
    "both": ["--readout", "both"],
    "cnorm": ["--conv-norm"],
    "rnn2": ["--rnn-layers", "2"],
    "f32": ["--conv-filters", "32"],
    "f96": ["--conv-filters", "96"],
    "k9": ["--conv-kernel", "9"],
    "ls": ["--label-smoothing", "0.1"],
    "ema999": ["--ema", "0.999"],
    "det": ["--deterministic"],
    "rot15": ["--augment", "rotate:15"],
    "rot30": ["--augment", "rotate:30"],
    "rot180": ["--augment", "rotate:180"],
    "mirror": ["--augment", "mirror:0.5"],
    "rot15-mirror": ["--augment", "rotate:15,mirror:0.5"],
    "scale-shift": ["--augment", "scale:0.1,shift:8"],
    "mirror-ss": ["--augment", "mirror:0.5,scale:0.1,shift:8"],
    "augall": ["--augment", "rotate:15,mirror:0.5,scale:0.1,shift:8"],
    "rot45-all": ["--augment", "rotate:45,mirror:0.5,scale:0.1,shift:8"],
    "rot90-all": ["--augment", "rotate:90,mirror:0.5,scale:0.1,shift:8"],
    "rot180-all": ["--augment", "rotate:180,mirror:0.5,scale:0.1,shift:8"],
    # The recipe (convlstm's defaults) as it is; --cv's pair spells out the augmentation with and
    # without mirror (the defaults had mirror until the cross-validation chose against it).
    "recipe": [],
    "recipe-mirror": ["--augment", "rotate:45,mirror:0.5,scale:0.1,shift:8"],
    "recipe-nomirror": ["--augment", "rotate:45,scale:0.1,shift:8"],
}


def run(name: str, seed: int, args, tmp: Path, fold: tuple[int, tuple[int, ...]] | None = None) -> dict:
    label = f"{name}-s{seed}" + (f"-f{fold[0]}" if fold else "")
    run_dir = tmp / label.replace("/", "_").replace(" ", "_")
    extra = [] if args.cluster else ["--standalone"]
    epochs = ["--epochs", str(args.epochs)] if args.epochs else []  # else the model's own (convlstm 60)
    cmd = [sys.executable, "-m", "picluster", "train", "har", "--run-dir", str(run_dir), *epochs,
           "--seed", str(seed), "--json", *extra, *parse(name), *args.common.split()]
    if args.threads and not args.cluster:
        cmd += ["--threads", str(args.threads)]
    if args.data_dir:
        cmd += ["--data-dir", str(args.data_dir)]
    if fold:
        cmd += ["--val-volunteers", ",".join(map(str, fold[1]))]
    env = dict(os.environ, PICLUSTER_STATE_DIR=str(tmp / f"state-{label}".replace("/", "_").replace(" ", "_")))
    start = time.time()
    done = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=ROOT)
    wall = time.time() - start
    where = {"config": name, "seed": seed} | ({"fold": fold[0], "val_volunteers": list(fold[1])} if fold else {})
    if done.returncode != 0:
        return where | {"error": (done.stderr.strip().splitlines() or ["?"])[-1]}
    result = json.loads(done.stdout)
    with open(run_dir / "metrics.csv") as f:
        rows = list(csv.DictReader(f))
    row = where | {
        "options": " ".join(parse(name) + args.common.split()), "epochs": len(rows),
        "parameters": result["parameters"], "threads": args.threads, "tag": args.tag,
        "mode": "sync cluster" if args.cluster else "standalone",
        "best_epoch": result["best_epoch"], "val_acc": result["val_accuracy"], "last_val_acc": float(rows[-1]["val_acc"]),
        "epoch_s": result["epoch_s_mean"], "wall_s": round(wall, 1),
    }
    if fold:
        return row  # cross-validation reads no test score
    row["test_acc"] = result["test_accuracy"]  # scored once, at the end, for best_epoch
    if rows and rows[-1].get("test_acc"):  # per-epoch test columns: only with --eval-test-every-epoch in --common
        row["last_test_acc"] = float(rows[-1]["test_acc"])
        row["max_test_acc_not_used"] = max(float(r["test_acc"]) for r in rows)
    return row


def summary(name: str, rows: list[dict]) -> dict:
    """Mean and sample standard deviation over every fold and seed of ``name``: validation accuracy
    (chosen and last epoch), and without folds the test accuracy each run scored once."""
    done = [r for r in rows if r["config"] == name and "error" not in r]
    out: dict = {"summary": name, "runs": len(done), "failed": sum(r["config"] == name and "error" in r for r in rows),
                 "folds": len({r["fold"] for r in done if "fold" in r}), "seeds": len({r["seed"] for r in done})}
    for key in ("val_acc", "last_val_acc", "test_acc"):
        values = [float(r[key]) for r in done if key in r]
        if key == "test_acc" and not values:
            continue  # cross-validation reads no test score
        out[f"{key}_mean"] = statistics.fmean(values) if values else None
        out[f"{key}_sd"] = statistics.stdev(values) if len(values) > 1 else None  # sample (n - 1)
    return out


def cv_folds(args) -> list[tuple[int, tuple[int, ...]]]:
    """(index, volunteers) of each fold over the prepared data's training volunteers."""
    from picluster.data.har.dataset import cache_path, har_dir, load
    from picluster.jobs.har.folds import folds, training_volunteers

    data = load(cache_path(args.data_dir or har_dir()))
    return list(enumerate(folds(training_volunteers(data), args.folds)))


def parse(name: str) -> list[str]:
    """A named configuration, or several joined by '+', or raw options after ':' (e.g. 'x:--hidden 48')."""
    if ":" in name:
        return name.split(":", 1)[1].split()
    return [opt for part in name.split("+") for opt in CONFIGS[part]]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--configs", help="[defaults,thesis,norm-batch,norm-step,norm-none,standardise,relu-logits,cosine; "
                        "with --cv: recipe-mirror,recipe-nomirror]")
    parser.add_argument("--seeds", help="[1,2; with --cv: 1,2,3,4,5]")
    parser.add_argument("--cv", action="store_true", help="leave-volunteers-out cross-validation over the training volunteers")
    parser.add_argument("--folds", type=int, default=5, help="--cv: folds of training volunteers [5]")
    parser.add_argument("--data-dir", type=Path, help="prepared HAR folder [picluster data har's]")
    parser.add_argument("--epochs", type=int, help="[the model's own: convlstm 60, resbidir 40]")
    parser.add_argument("-j", "--jobs", type=int, default=1, help="runs at once (each uses every core)")
    parser.add_argument("--cluster", action="store_true", help="the default local cluster instead of --standalone")
    parser.add_argument("--threads", type=int, default=0, help="standalone runs: threads each (e.g. 1 with -j 2)")
    parser.add_argument("--common", default="", help="options added to every configuration")
    parser.add_argument("--tag", default="", help="recorded in each row (e.g. the study round)")
    parser.add_argument("--keep", type=Path, help="keep the run directories here")
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "har_study.jsonl")
    args = parser.parse_args()
    configs = (args.configs or ("recipe-mirror,recipe-nomirror" if args.cv else
                                "defaults,thesis,norm-batch,norm-step,norm-none,standardise,relu-logits,cosine")).split(",")
    seeds = args.seeds or ("1,2,3,4,5" if args.cv else "1,2")
    try:
        for name in configs:
            parse(name)
    except KeyError as exc:
        raise UsageError(f"--configs: no configuration {exc} (see CONFIGS in {Path(__file__).name})") from None
    if not all(s.strip().isdigit() for s in seeds.split(",")):
        raise UsageError(f"--seeds {seeds!r}: give whole numbers separated by commas, e.g. 1,2,3,4,5")
    folds = cv_folds(args) if args.cv else [None]
    jobs = [(c, int(s), f) for c in configs for s in seeds.split(",") for f in folds]
    args.out.parent.mkdir(parents=True, exist_ok=True)
    rows = []
    with tempfile.TemporaryDirectory() as scratch:
        tmp = args.keep or Path(scratch)
        tmp.mkdir(parents=True, exist_ok=True)
        with ThreadPoolExecutor(args.jobs) as pool:
            for row in pool.map(lambda job: run(job[0], job[1], args, tmp, job[2]), jobs):
                rows.append(row)
                record(args.out, row)
    for name in configs:
        record(args.out, summary(name, rows) | {"tag": args.tag, "epochs": args.epochs or "model's own",
                                                "options": " ".join(parse(name) + args.common.split())})


def record(out: Path, row: dict) -> None:
    with open(out, "a") as f:
        f.write(json.dumps(row) + "\n")
    print(json.dumps(row), flush=True)


if __name__ == "__main__":
    try:
        main()
    except UsageError as exc:
        print(f"har_study.py: error: {exc}", file=sys.stderr)
        sys.exit(2)
