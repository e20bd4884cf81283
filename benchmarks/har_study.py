"""HAR accuracy study: reruns the table of model/optimisation configurations in the README.

Run: .venv/bin/python benchmarks/har_study.py [--configs defaults,conv+l2-0.0005+rot45-all ...] [--seeds 1,2,3]
         [--epochs 40] [-j 1] [--cluster] [--threads 1] [--common "--mode async"] [--tag T] [--keep DIR]

Each (configuration, seed) is a real `picluster train har` run, one process (--standalone)
unless --cluster (the default temporary local cluster: 1 ps + 2 workers, sync).  The model is
the epoch with the best validation accuracy (4 held-out volunteers); the table shows that
epoch, its validation and test accuracy, and the run's wall time.  Test accuracy is never used
to choose anything.  Rows are appended to benchmarks/results/har_study.jsonl as they finish,
so an interrupted study keeps what it measured.  A benchmark, not a test: nothing asserts.
"""

import argparse
import csv
import json
import os
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

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
}


def run(name: str, seed: int, args, tmp: Path) -> dict:
    run_dir = tmp / f"{name}-s{seed}".replace("/", "_").replace(" ", "_")
    extra = [] if args.cluster else ["--standalone"]
    cmd = [sys.executable, "-m", "picluster", "train", "har", "--run-dir", str(run_dir), "--epochs", str(args.epochs),
           "--seed", str(seed), "--json", *extra, *parse(name), *args.common.split()]
    if args.threads and not args.cluster:
        cmd += ["--threads", str(args.threads)]
    env = dict(os.environ, PICLUSTER_STATE_DIR=str(tmp / f"state-{name}-s{seed}".replace("/", "_").replace(" ", "_")))
    start = time.time()
    done = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=ROOT)
    wall = time.time() - start
    if done.returncode != 0:
        return {"config": name, "seed": seed, "error": (done.stderr.strip().splitlines() or ["?"])[-1]}
    result = json.loads(done.stdout)
    with open(run_dir / "metrics.csv") as f:
        rows = list(csv.DictReader(f))
    return {
        "config": name, "options": " ".join(parse(name) + args.common.split()), "seed": seed, "epochs": len(rows),
        "parameters": result["parameters"], "threads": args.threads, "tag": args.tag,
        "mode": "sync cluster" if args.cluster else "standalone",
        "best_epoch": result["best_epoch"], "val_acc": result["val_accuracy"], "test_acc": result["test_accuracy"],
        "last_test_acc": float(rows[-1]["test_acc"]), "max_test_acc_not_used": max(float(r["test_acc"]) for r in rows),
        "epoch_s": result["epoch_s_mean"], "wall_s": round(wall, 1),
    }


def parse(name: str) -> list[str]:
    """A named configuration, or several joined by '+', or raw options after ':' (e.g. 'x:--hidden 48')."""
    if ":" in name:
        return name.split(":", 1)[1].split()
    return [opt for part in name.split("+") for opt in CONFIGS[part]]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--configs", default="defaults,thesis,norm-batch,norm-step,norm-none,standardise,relu-logits,cosine")
    parser.add_argument("--seeds", default="1,2")
    parser.add_argument("--epochs", type=int, default=40)
    parser.add_argument("-j", "--jobs", type=int, default=1, help="runs at once (each uses every core)")
    parser.add_argument("--cluster", action="store_true", help="the default local cluster instead of --standalone")
    parser.add_argument("--threads", type=int, default=0, help="standalone runs: threads each (e.g. 1 with -j 2)")
    parser.add_argument("--common", default="", help="options added to every configuration")
    parser.add_argument("--tag", default="", help="recorded in each row (e.g. the study round)")
    parser.add_argument("--keep", type=Path, help="keep the run directories here")
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "har_study.jsonl")
    args = parser.parse_args()
    args.out.parent.mkdir(parents=True, exist_ok=True)
    jobs = [(c, int(s)) for c in args.configs.split(",") for s in args.seeds.split(",")]
    with tempfile.TemporaryDirectory() as scratch:
        tmp = args.keep or Path(scratch)
        tmp.mkdir(parents=True, exist_ok=True)
        with ThreadPoolExecutor(args.jobs) as pool:
            for row in pool.map(lambda job: run(*job, args, tmp), jobs):
                with open(args.out, "a") as f:
                    f.write(json.dumps(row) + "\n")
                print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main()
