"""HAR training per model and mode: one process, sync and async on the local cluster (1 ps + 2 workers).

Run: .venv/bin/python benchmarks/har.py [--models convlstm,resbidir] [--modes single,sync,async]
                                        [--seeds 1,2,3] [--epochs N] [--target 0.9] [-- extra train options]

Each (model, mode, seed) is a real `picluster train har` run with that model's defaults (a fresh
temporary local cluster for sync and async), one after the other.  Reported per model and mode:
- s/epoch: the chief's mean training seconds per epoch (evaluation excluded), mean over seeds;
- wall to validation >= --target: from the command's start (cluster start-up, TensorFlow import
  and graph building included) to the end of the first epoch that reaches it, mean over the
  seeds that reached it ("k/n" says how many did);
- test accuracy of the model chosen on validation, mean +- population std over the seeds;
- parameters (result.json), and the peak RSS (VmHWM) of each kind of process: the command
  (coordinator), each replica (training client), the ps and worker servers; the largest over
  seeds, read every 0.5 s from /proc while the run lasts.
`--epochs` defaults to each model's own (60 / 40).  Short runs (few epochs or seeds) time the
modes; their accuracies are not the models' (see README: HAR).  Writes benchmarks/results/har.json.
This is a benchmark, not a test: nothing asserts.

`--cells` instead times one training step (batch 100, one process, no cluster) of the fused
BlockLSTM kernel against a tf.while_loop cell for a few model sizes: how the cell was chosen.
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
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parent.parent

MODES = {
    "single": ["--standalone"],
    "sync": ["--mode", "sync"],
    "async": ["--mode", "async"],
}


def role(proc: psutil.Process, top: int) -> str | None:
    """What a process of the run is: coordinator, replica N, ps or worker server (None: not ours)."""
    if proc.pid == top:
        return "coordinator"
    try:
        cmd = proc.cmdline()
    except psutil.Error:
        return None
    if "picluster.jobs.har.process" in cmd:
        return "replica"
    if "picluster.cluster.server" in cmd and "--job" in cmd:
        return f"{cmd[cmd.index('--job') + 1]} server"
    return None


def peak_rss(pid: int) -> int | None:
    """VmHWM: the process's peak resident set, in bytes."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None


def run_one(model: str, mode: str, seed: int, args, extra: list[str], tmp: Path) -> dict:
    run_dir = tmp / f"{model}-{mode}-{seed}"
    cmd = [sys.executable, "-m", "picluster", "train", "har", "--model", model, "--run-dir", str(run_dir),
           "--seed", str(seed), "--json", "--no-live", *MODES[mode], *extra]
    if args.epochs:
        cmd += ["--epochs", str(args.epochs)]
    env = dict(os.environ, PICLUSTER_STATE_DIR=str(tmp / "state"))
    start = time.time()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=ROOT)
    top = psutil.Process(proc.pid)
    peaks: dict[int, tuple[str, int]] = {}
    while proc.poll() is None:
        try:
            family = [top, *top.children(recursive=True)]
        except psutil.Error:
            family = []
        for p in family:
            kind = peaks.get(p.pid, (None, 0))[0] or role(p, top.pid)
            rss = peak_rss(p.pid) if kind else None
            if kind and rss:
                peaks[p.pid] = (kind, max(rss, peaks.get(p.pid, (kind, 0))[1]))
        time.sleep(0.5)
    out, err = proc.communicate()
    wall = time.time() - start
    if proc.returncode != 0:
        raise SystemExit(f"{model} {mode} seed {seed}: {(err.strip().splitlines() or ['?'])[-1]}")
    result = json.loads(out)
    with open(run_dir / "metrics.csv") as f:
        rows = list(csv.DictReader(f))
    hits = [r for r in rows if float(r["val_acc"]) >= args.target]
    by_role: dict[str, int] = {}
    for kind, rss in peaks.values():
        by_role[kind] = max(rss, by_role.get(kind, 0))
    return {
        "model": model, "mode": mode, "seed": seed, "epochs": len(rows),
        "epoch_s": statistics.fmean(float(r["epoch_s"]) for r in rows),
        "to_target_s": float(hits[0]["time"]) - start if hits else None,
        "to_target_epoch": int(hits[0]["epoch"]) if hits else None,
        "best_epoch": result["best_epoch"], "val_accuracy": result["val_accuracy"],
        "test_accuracy": result["test_accuracy"], "parameters": result["parameters"],
        "peak_rss": by_role, "wall_s": wall,
    }


def _spread(runs: list[dict], key: str) -> str:
    values = [r[key] for r in runs]
    return f"{statistics.fmean(values):.2%} ± {statistics.pstdev(values):.2%}"


def summarise(runs: list[dict], target: float) -> list[str]:
    lines = [f"{'model':9} {'mode':6} {'seeds':>5} {'epochs':>6} {'s/epoch':>8} {'to val>=' + format(target, '.0%'):>16} "
             f"{'val acc':>15} {'test acc':>15} {'params':>7} {'wall s':>7}  peak RSS MiB per process"]
    groups: dict[tuple[str, str], list[dict]] = {}
    for r in runs:
        groups.setdefault((r["model"], r["mode"]), []).append(r)
    for (model, mode), rs in groups.items():
        reached = [r["to_target_s"] for r in rs if r["to_target_s"] is not None]
        to = f"{statistics.fmean(reached):.0f} s ({len(reached)}/{len(rs)})" if reached else f"never (0/{len(rs)})"
        rss: dict[str, int] = {}
        for r in rs:
            for kind, value in r["peak_rss"].items():
                rss[kind] = max(value, rss.get(kind, 0))
        memory = ", ".join(f"{kind} {value / 2**20:.0f}" for kind, value in sorted(rss.items()))
        lines.append(f"{model:9} {mode:6} {len(rs):5d} {rs[0]['epochs']:6d} {statistics.fmean(r['epoch_s'] for r in rs):8.2f} "
                     f"{to:>16} {_spread(rs, 'val_accuracy'):>15} {_spread(rs, 'test_accuracy'):>15} {rs[0]['parameters']:7d} "
                     f"{statistics.fmean(r['wall_s'] for r in rs):7.0f}  {memory}")
    return lines


def cells() -> None:
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    sys.path.insert(0, str(ROOT))
    import numpy as np
    import tensorflow as tf

    from picluster.jobs.har.model import Shape, l2_penalty, logits
    from picluster.jobs.har.noise import Noise

    tf.compat.v1.disable_eager_execution()
    print(f"{'model':24} {'params':>7} {'BlockLSTM ms/step':>18} {'while_loop ms/step':>19}")
    for shape in (Shape(3, 1, 32, True), Shape(3, 2, 32, True), Shape(3, 3, 28, True), Shape(3, 1, 32, False)):
        times = []
        for cell in ("block", "loop"):
            with tf.Graph().as_default():
                x = tf.compat.v1.placeholder(tf.float32, [None, 128, 9])
                y = tf.compat.v1.placeholder(tf.int64, [None])
                noise = Noise(tf.constant(0.85))  # timing only: the default key, the same masks every step
                out = logits(x, shape, noise, cell)
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
    parser = argparse.ArgumentParser(description="HAR training per model and mode (see the module docstring)")
    parser.add_argument("--models", default="convlstm,resbidir")
    parser.add_argument("--modes", default="single,sync,async")
    parser.add_argument("--seeds", default="1,2,3")
    parser.add_argument("--epochs", type=int, default=0, help="0: each model's default")
    parser.add_argument("--target", type=float, default=0.9, help="the validation accuracy to time")
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "har.json")
    args, extra = parser.parse_known_args()
    extra = [e for e in extra if e != "--"]
    modes = args.modes.split(",")
    if set(modes) - set(MODES):
        parser.error(f"--modes: each of {', '.join(MODES)}")
    runs = []
    started = time.time()
    with tempfile.TemporaryDirectory(prefix="har-bench-") as tmp:
        for model in args.models.split(","):
            for mode in modes:
                for seed in (int(s) for s in args.seeds.split(",")):
                    print(f"running {model} {mode} seed {seed} ...", file=sys.stderr, flush=True)
                    runs.append(run_one(model, mode, seed, args, extra, Path(tmp)))
                    print(json.dumps(runs[-1]), file=sys.stderr, flush=True)
    lines = summarise(runs, args.target)
    print("\n".join(lines))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"argv": sys.argv[1:], "machine_cpus": os.cpu_count(), "total_s": time.time() - started,
                                    "table": lines, "runs": runs}, indent=1))
    print(f"wrote {args.out}", file=sys.stderr)


if __name__ == "__main__":
    main()
