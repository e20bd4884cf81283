"""HAR accuracy study: reruns the table of model/optimisation configurations in the README.

Run: .venv/bin/python benchmarks/har_study.py [--configs base,cosine ...] [--seeds 1,2,3] [--epochs 40] [-j 1] [--cluster]

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

# Options on top of the current defaults; "thesis" undoes every deviation from the thesis.
CONFIGS = {
    "defaults": [],
    "window": ["--norm", "window", "--raw-inputs", "--linear-logits", "--lr-schedule", "constant"],
    "thesis": ["--norm", "batch", "--raw-inputs", "--relu-logits", "--lr-schedule", "constant"],
    "norm-batch": ["--norm", "batch"],
    "norm-step": ["--norm", "step"],
    "norm-none": ["--norm", "none"],
    "standardise": ["--standardise"],
    "raw": ["--raw-inputs"],
    "relu-logits": ["--relu-logits"],
    "cosine": ["--lr-schedule", "cosine"],
    "constant": ["--lr-schedule", "constant"],
    "hidden48": ["--hidden", "48"],
    "hidden64": ["--hidden", "64"],
    "l2-0.001": ["--l2", "0.001"],
    "keep-0.7": ["--keep-prob", "0.7"],
    "lr-0.002": ["--lr", "0.002"],
    "ema": ["--ema", "0.99"],
    "window-stats": ["--window-stats"],
    "res3-nobidir": ["--residual", "3", "--no-bidir"],  # the thesis' best row (93.2 %, chosen on test)
}


def run(name: str, seed: int, args, tmp: Path) -> dict:
    run_dir = tmp / f"{name}-s{seed}"
    extra = [] if args.cluster else ["--standalone"]
    cmd = [sys.executable, "-m", "picluster", "train", "har", "--run-dir", str(run_dir), "--epochs", str(args.epochs),
           "--seed", str(seed), "--json", *extra, *parse(name)]
    env = dict(os.environ, PICLUSTER_STATE_DIR=str(tmp / f"state-{name}-s{seed}"))
    start = time.time()
    done = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=ROOT)
    wall = time.time() - start
    if done.returncode != 0:
        return {"config": name, "seed": seed, "error": (done.stderr.strip().splitlines() or ["?"])[-1]}
    result = json.loads(done.stdout)
    with open(run_dir / "metrics.csv") as f:
        rows = list(csv.DictReader(f))
    return {
        "config": name, "options": " ".join(parse(name)), "seed": seed, "epochs": len(rows),
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
