"""HAR training: sync and async on the local cluster (1 ps + 2 workers) against one process with no ps.

Run: .venv/bin/python benchmarks/har.py [--epochs 30] [--targets 0.85,0.9] [--layers 3 ...]

Each configuration is a real `picluster train har` run on the prepared data (fresh temporary
local cluster, default model unless options say otherwise).  Reported per configuration:
- seconds per epoch (mean of the chief's epochs: training only, evaluation excluded), split
  into input / compute / exchange as the chief measured them;
- wall time to the first epoch with validation accuracy >= each of --targets, from the command's start
  (cluster start-up, TensorFlow import and graph building included);
- the selected (on validation) model's test accuracy.
The single-process run is the baseline: overhead ratio = distributed s/epoch / single s/epoch.
Writes benchmarks/results/har.json.  This is a benchmark, not a test: nothing asserts.

`--cells` instead times one training step (batch 100, one process, no cluster) of the fused
BlockLSTM kernel against a tf.while_loop cell for a few model sizes: how the cell was chosen.
"""

import argparse
import csv
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

CASES = {
    "sync": ["--mode", "sync"],
    "async": ["--mode", "async"],
    "single": ["--standalone"],
}


def run_case(name: str, extra: list[str], args, tmp: Path) -> dict:
    run_dir = tmp / name
    cmd = [sys.executable, "-m", "picluster", "train", "har", "--run-dir", str(run_dir),
           "--epochs", str(args.epochs), "--json", *CASES[name], *extra]
    env = dict(os.environ, PICLUSTER_STATE_DIR=str(tmp / "state"))
    start = time.time()
    done = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=ROOT)
    wall = time.time() - start
    if done.returncode != 0:
        raise SystemExit(f"{name}: {done.stderr.strip().splitlines()[-1]}")
    result = json.loads(done.stdout)
    with open(run_dir / "metrics.csv") as f:
        rows = list(csv.DictReader(f))
    mean = lambda key: sum(float(r[key]) for r in rows) / len(rows)
    def first(target):
        hits = [r for r in rows if float(r["val_acc"]) >= target]
        return (round(float(hits[0]["time"]) - start, 1), int(hits[0]["epoch"])) if hits else None

    stale = [float(r["staleness_mean"]) for r in rows if r["staleness_mean"]]
    return {
        "case": name,
        "epochs": len(rows),
        "epoch_s": mean("epoch_s"),
        "input_s": mean("input_s"),
        "compute_s": mean("compute_s"),
        "exchange_s": mean("exchange_s"),
        "to_target": {str(t): first(t) for t in args.targets},  # (wall s from the command's start, epoch)
        "best_epoch": result["best_epoch"],
        "test_accuracy": result["test_accuracy"],
        "test_f1": result["test_f1"],
        "staleness_mean": sum(stale) / len(stale) if stale else None,
        "wall_s": wall,
        "per_epoch": [{k: r[k] for k in ("epoch", "val_acc", "test_acc", "epoch_s", "wall_s")} for r in rows],
        "start_to_first_epoch_s": float(rows[0]["time"]) - start,
    }


def cells() -> None:
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    sys.path.insert(0, str(ROOT))
    import numpy as np
    import tensorflow as tf

    from picluster.jobs.har.model import Shape, l2_penalty, logits

    tf.compat.v1.disable_eager_execution()
    print(f"{'model':24} {'params':>7} {'BlockLSTM ms/step':>18} {'while_loop ms/step':>19}")
    for shape in (Shape(3, 1, 32, True), Shape(3, 2, 32, True), Shape(3, 3, 28, True), Shape(3, 1, 32, False)):
        times = []
        for cell in ("block", "loop"):
            with tf.Graph().as_default():
                x = tf.compat.v1.placeholder(tf.float32, [None, 128, 9])
                y = tf.compat.v1.placeholder(tf.int64, [None])
                out = logits(x, shape, 0.85, cell)
                loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=y, logits=out))
                loss += 0.005 * l2_penalty(tf.compat.v1.trainable_variables())
                step = tf.compat.v1.train.AdamOptimizer(1e-3).minimize(loss)
                with tf.compat.v1.Session() as session:
                    session.run(tf.compat.v1.global_variables_initializer())
                    feed = {x: np.random.default_rng(0).normal(size=(100, 128, 9)).astype(np.float32),
                            y: np.arange(100) % 6}
                    session.run(step, feed)
                    start = time.perf_counter()
                    for _ in range(5):
                        session.run(step, feed)
                    times.append((time.perf_counter() - start) / 5 * 1000)
        name = f"{shape.layers}x{shape.residual} {'bidir' if shape.bidir else 'uni'} {shape.hidden}"
        print(f"{name:24} {shape.parameter_count():7d} {times[0]:18.0f} {times[1]:19.0f}")


def main() -> None:
    if "--cells" in sys.argv:
        cells()
        return
    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", type=int, default=30)
    parser.add_argument("--targets", default="0.85,0.9", help="validation accuracies to time, comma-separated")
    parser.add_argument("--cases", default="sync,async,single")
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "har.json")
    args, extra = parser.parse_known_args()
    args.targets = [float(t) for t in args.targets.split(",")]
    rows = []
    with tempfile.TemporaryDirectory(prefix="har-bench-") as tmp:
        for name in args.cases.split(","):
            print(f"running {name} ...", file=sys.stderr, flush=True)
            rows.append(run_case(name, extra, args, Path(tmp)))
            print(json.dumps(rows[-1]), file=sys.stderr, flush=True)
    single = next((r for r in rows if r["case"] == "single"), None)
    print(f"{'case':8} {'s/epoch':>8} {'input':>6} {'compute':>8} {'exchange':>8} {'x single':>8} "
          + " ".join(f"{'to val>=' + format(t, '.0%'):>16}" for t in args.targets) + f" {'test acc':>8} {'stale':>6}")
    for r in rows:
        ratio = r["epoch_s"] / single["epoch_s"] if single else float("nan")
        to = " ".join(f"{(f'{v[0]:.0f} s (ep {v[1]})' if v else 'not reached'):>16}" for v in r["to_target"].values())
        stale = f"{r['staleness_mean']:.2f}" if r["staleness_mean"] is not None else "-"
        print(f"{r['case']:8} {r['epoch_s']:8.2f} {r['input_s']:6.2f} {r['compute_s']:8.2f} {r['exchange_s']:8.2f} "
              f"{ratio:8.2f} {to} {r['test_accuracy']:8.2%} {stale:>6}")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"targets": args.targets, "extra": extra, "machine_cpus": os.cpu_count(),
                                    "rows": rows}, indent=1))
    print(f"wrote {args.out}", file=sys.stderr)


if __name__ == "__main__":
    main()
