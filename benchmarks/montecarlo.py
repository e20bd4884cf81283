"""Monte-Carlo pi: picluster against the machine's RNG bound, the thesis's style and NumPy.

Run: .venv/bin/python benchmarks/montecarlo.py [--quick]

All rows come from one run on one machine, so the ratios are what matter:
- RNG bound: the same TensorFlow Philox draws, chunked, with no counting and no cluster,
  in one single-threaded process per core, all at once; samples/s summed.
- picluster: `MonteCarlo` on a fresh temporary local cluster of N workers (N = 1, 2, 4, 8).
- thesis style: each task draws its whole share as ONE [n, 2] tensor in [-1, 1] and
  counts points with distance < 1, as the thesis's client.py did; skipped with its
  projected memory when that would exceed --thesis-max-gb.
- NumPy: one process, float32 chunks (the same draws per sample as picluster).
Peak RSS per task is the kernel's high-water mark (VmHWM) of each server process.
"""

import argparse
import json
import multiprocessing as mp
import os
import sys
import time
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from picluster.cluster.local import LocalCluster  # noqa: E402
from picluster.jobs.montecarlo.estimate import CHUNK, MonteCarlo  # noqa: E402

sys.path.insert(0, str(ROOT / "benchmarks"))
from thesis_style import ThesisStyle  # noqa: E402

GB = 1024**3


def peak_rss(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    return 0


# -- the RNG bound ---------------------------------------------------------------------------
def _rng_worker(samples: int, start, out) -> None:
    import tensorflow as tf

    # The same threading as a local server with one core to itself (see picluster.cluster.server).
    tf.config.threading.set_intra_op_parallelism_threads(1)
    tf.config.threading.set_inter_op_parallelism_threads(2)
    graph = tf.Graph()
    with graph.as_default():
        n = tf.compat.v1.placeholder(tf.int64, [])
        chunk = tf.constant(CHUNK, tf.int64)

        def body(j, acc):
            size = tf.minimum(chunk, n - j * chunk)
            pts = tf.random.stateless_uniform(tf.stack([tf.constant(2, tf.int64), size]),
                                              seed=tf.stack([tf.constant(1, tf.int64), j]), alg="philox")
            return j + 1, acc + tf.cast(pts[0, 0] > 2.0, tf.int64)  # keeps the draw alive, costs nothing

        _, total = tf.while_loop(lambda j, _: j < (n + chunk - 1) // chunk, body,
                                 [tf.constant(0, tf.int64), tf.constant(0, tf.int64)], parallel_iterations=2)
    with tf.compat.v1.Session(graph=graph) as sess:
        sess.run(total, {n: CHUNK})
        start.wait()
        t0 = time.perf_counter()
        sess.run(total, {n: samples})
        out.put(samples / (time.perf_counter() - t0))


def rng_bound(samples_per_core: int) -> float:
    cores = os.cpu_count() or 1
    ctx = mp.get_context("spawn")
    start, out = ctx.Event(), ctx.Queue()
    procs = [ctx.Process(target=_rng_worker, args=(samples_per_core, start, out)) for _ in range(cores)]
    for p in procs:
        p.start()
    time.sleep(8)  # let every process import TensorFlow and warm up before the common start
    start.set()
    rates = [out.get() for _ in procs]
    for p in procs:
        p.join()
    return sum(rates)


# -- NumPy -------------------------------------------------------------------------------------
def numpy_rate(samples: int) -> float:
    import numpy as np

    rng = np.random.default_rng(1)
    hits = 0
    t0 = time.perf_counter()
    for start in range(0, samples, CHUNK):
        size = min(CHUNK, samples - start)
        x = rng.random(size, dtype=np.float32)
        y = rng.random(size, dtype=np.float32)
        hits += int(np.count_nonzero(x * x + y * y < 1.0))
    return samples / (time.perf_counter() - t0)


def on_fresh_cluster(workers: int, job):
    """Run ``job(layout)`` on a new local cluster; return its result and the peak RSS per task."""
    cluster = LocalCluster.start(ps=0, workers=workers, temporary=True)
    try:
        result = job(cluster.layout)
        rss = max(peak_rss(pid) for pid in cluster.pids.values())
    finally:
        cluster.stop()
    return result, rss


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true", help="smaller sizes, for a smoke run")
    parser.add_argument("--thesis-max-gb", type=float, default=6.0, help="skip thesis-style runs projected above this")
    parser.add_argument("--json", type=Path, default=ROOT / "benchmarks" / "results" / "montecarlo.json")
    args = parser.parse_args()

    cores = os.cpu_count() or 1
    sizes = [10**7, 10**8] if args.quick else [10**8, 10**9]
    flat_sizes = [10**7, 10**8] if args.quick else [10**8, 10**9, 10**10]
    node_counts = [1, 2] if args.quick else [1, 2, 4, 8]
    rows = []

    def add(config, samples, workers, seconds, rss=None, note=""):
        rate = samples / seconds if seconds else None
        rows.append({"config": config, "samples": samples, "workers": workers, "seconds": seconds,
                     "samples_per_s": rate, "peak_rss_per_task": rss, "note": note})
        shown = f"{rate / 1e6:8.1f} M/s" if rate else "       -"
        print(f"  {config:<12} {samples:>8.0e} x{workers:<2} {shown}  {note}", flush=True)

    print(f"machine: {cores} cores; chunk {CHUNK} points", flush=True)
    bound = rng_bound(max(sizes) // cores)
    add("rng-bound", max(sizes), cores, max(sizes) / bound, note="TF Philox, 1 process per core")
    add("numpy", max(sizes), 1, max(sizes) / numpy_rate(max(sizes)), note="1 process, float32 chunks")

    for nodes in node_counts:
        def picluster_job(layout, nodes=nodes):
            with MonteCarlo(layout, nodes) as job:
                return [job.estimate(s, seed=1) for s in sizes]
        estimates, rss = on_fresh_cluster(nodes, picluster_job)
        for e in estimates:
            add("picluster", e.samples, nodes, e.compute_s, rss)

    for nodes in node_counts:
        feasible = [s for s in sizes if s * 2 * 4 * 3 / GB <= args.thesis_max_gb]
        def thesis_job(layout, nodes=nodes, feasible=feasible):
            job = ThesisStyle(layout, nodes)
            try:
                return [(s, job.run(s)) for s in feasible]
            finally:
                job.close()
        timings, rss = on_fresh_cluster(nodes, thesis_job) if feasible else ([], None)
        for s, seconds in timings:
            add("thesis", s, nodes, seconds, rss)
        for s in sizes:
            if s not in feasible:
                add("thesis", s, nodes, None, None, note=f"N/A: one [n,2] tensor needs ~{s * 2 * 4 * 3 / GB:.0f} GB")

    flat = []
    for s in flat_sizes:
        def one(layout, s=s):
            with MonteCarlo(layout, cores) as job:
                return job.estimate(s, seed=2)
        e, rss = on_fresh_cluster(cores, one)
        add("rss-flat", s, cores, e.compute_s, rss)
        flat.append(rss)

    best = max(r["samples_per_s"] for r in rows if r["config"] == "picluster" and r["workers"] == cores and r["samples"] == max(sizes))
    numpy = next(r["samples_per_s"] for r in rows if r["config"] == "numpy")
    print()
    print("| config | samples | workers | seconds | M samples/s | of RNG bound | x NumPy | peak RSS/task |")
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        rate = r["samples_per_s"]
        cells = [
            r["config"], f"{r['samples']:.0e}", str(r["workers"]),
            f"{r['seconds']:.3f}" if r["seconds"] else "-",
            f"{rate / 1e6:.1f}" if rate else r["note"],
            f"{rate / bound:.0%}" if rate else "-",
            f"{rate / numpy:.2f}" if rate else "-",
            f"{r['peak_rss_per_task'] / 2**20:.0f} MiB" if r["peak_rss_per_task"] else "-",
        ]
        print("| " + " | ".join(cells) + " |")
    print()
    print(f"workers = cores ({cores}) at {max(sizes):.0e}: {best / bound:.0%} of the RNG bound (target >= 80%), "
          f"{best / numpy:.2f}x NumPy (target >= 2x)")
    spread = (max(flat) - min(flat)) / min(flat)
    print(f"peak RSS per task from {flat_sizes[0]:.0e} to {flat_sizes[-1]:.0e} samples: "
          f"{', '.join(f'{r / 2**20:.0f}' for r in flat)} MiB, spread {spread:.1%} (target <= 10%)")
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps({"rng_bound": bound, "numpy": numpy, "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
