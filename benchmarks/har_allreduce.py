"""What a user would run instead of a parameter server: TensorFlow's own collective all-reduce
(``tf.distribute.MultiWorkerMirroredStrategy``, ring over gRPC, no ps) on the same Pi-shaped hosts,
the same model, recipe and data, to validation >= a target, timed as har_wall.py times
`picluster train har`: from the launch of the processes to the epoch that reached the target.

Run as root, on a quiet machine, into a rows file that har_wall.py's runs (the one Pi, the ps)
fill too, to pair with:
    .venv/bin/python benchmarks/har_allreduce.py --rows benchmarks/results/har_table.csv \\
        --workers 8,16 --seeds 1,2,3,4,5 --share-of 17
    .venv/bin/python benchmarks/har_wall.py --rows benchmarks/results/har_table.csv --report

The lab: max(--workers) hosts, each limited to 1/--share-of of this machine's cores (2/17 of a core:
the share har_wall.py's 17-host lab gives each host) and the pi3b profile's 1 GiB, every link
shaped to --link.  No picluster servers run: each worker host runs one process of this file
(``--task I``), started in the host (its namespaces and cgroup, as root, as the one-Pi run is),
with TF_CONFIG naming every worker's address.  That process is what a user's MWMS script does:
import TensorFlow, load the data set from the host's disk, build the model, join the collective
group, train.  Its training loop follows picluster's replica step for step:

- the model of ``picluster.jobs.har.graph.network`` (the recipe's, the same ops and variable
  shapes), its variables plain per-worker copies kept equal by all-reduce (worker 0's initial
  weights broadcast first), as MirroredVariables are;
- each step: the worker's batch of --batch windows from its shard (``data.shard``, the same
  order and augmentation draws per (seed, epoch, task)), its gradients, **one all-reduce of the
  list (mean)** by the strategy's replica context, clipping by the global norm, Adam (the v1
  optimizer's update, by hand), the rate scaled and warmed up as ``graph.learning_rate`` does;
- after each epoch: validation split across the workers, the sums all-reduced (every worker takes
  the same stop decision); the best epoch's weights kept; at the end the test set scored once,
  for the epoch chosen on validation.

Validation is on the path here (as Keras' fit with validation_data is under MWMS), shared by the
workers; picluster's default validates beside the coordinator, off the path.  Worker 0 prints one
JSON line per epoch; rows go to --rows in har_wall.py's columns (config "allreduce").
"""

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

PORT = 2223  # each worker's collective server, on its host's address


def task_main(args: argparse.Namespace) -> None:
    """One worker of the collective: runs inside its host; JSON lines on stdout (worker 0)."""
    born = time.time()  # before TensorFlow's import, which a user's script pays too
    import numpy as np
    import tensorflow as tf

    from picluster.jobs.har import augment
    from picluster.jobs.har.config import TrainConfig
    from picluster.jobs.har.data import load_data, shard
    from picluster.jobs.har.graph import network
    from picluster.jobs.har.model import channel_moments, l2_penalty, standardise
    from picluster.jobs.har.noise import TASK_SEED_STRIDE
    from picluster.util import cpus

    threads = cpus.usable()  # as picluster's servers size theirs
    tf.config.threading.set_intra_op_parallelism_threads(threads)
    tf.config.threading.set_inter_op_parallelism_threads(threads + 1)
    task, workers = args.task, int(args.workers)
    cfg = TrainConfig.for_model(seed=int(args.seeds), workers=workers, epochs=args.epochs, data_dir=args.data_dir)
    data = load_data(cfg)
    loaded = time.time()
    strategy = tf.distribute.MultiWorkerMirroredStrategy(
        communication_options=tf.distribute.experimental.CommunicationOptions(
            implementation=tf.distribute.experimental.CommunicationImplementation.RING))
    tf.random.set_seed(cfg.seed + TASK_SEED_STRIDE * task)  # each worker its own dropout stream

    _, forward = network(cfg)
    store: dict[str, tf.Variable] = {}

    def getter(getter, name, shape=None, dtype=tf.float32, initializer=None, trainable=True, **_):
        if name not in store:  # the first call makes it, every later one shares it
            value = initializer(shape, dtype=dtype) if callable(initializer) else initializer
            store[name] = tf.Variable(value, name=name.replace("/", "_"), trainable=trainable)
        return store[name]

    moments = channel_moments(data.x_train)

    class Dropout:
        """Stateful dropout, each worker's stream seeded by its task (tf.random.set_seed above): in a
        tf.function the masks move on with every call, where picluster's graph feeds a key a step."""

        def __init__(self, keep: float) -> None:
            self.keep = keep

        def dropout(self, h, site: int):
            return tf.nn.dropout(h, rate=1.0 - self.keep) if self.keep < 1.0 else h

    def logits(x, keep):
        with tf.compat.v1.variable_scope("har", custom_getter=getter, reuse=tf.compat.v1.AUTO_REUSE):
            return forward(standardise(x, *moments) if cfg.standardise else x, Dropout(keep))

    logits(tf.zeros([1, *data.x_train.shape[1:]]), 1.0)  # makes the variables
    variables = [v for v in store.values() if v.trainable]
    slots = [(tf.Variable(tf.zeros_like(v)), tf.Variable(tf.zeros_like(v))) for v in variables]
    updates = tf.Variable(0.0)  # Adam's t
    beta1, beta2, eps = cfg.adam_beta1, cfg.adam_beta2, 1e-8  # tf.compat.v1.train.AdamOptimizer's

    def all_reduce(op, make):
        """``make()``'s tensors reduced over the workers; made inside the replica function, on the
        worker's device (tensors made outside it have none, and the reduction no destination)."""
        return strategy.run(lambda: tf.distribute.get_replica_context().all_reduce(op, make()))

    @tf.function
    def broadcast():
        first = lambda: [v.read_value() if task == 0 else tf.zeros_like(v) for v in variables]
        for v, value in zip(variables, all_reduce(tf.distribute.ReduceOp.SUM, first)):
            v.assign(value)

    @tf.function
    def train_step(x, y, lr):
        def replica(x, y, lr):
            with tf.GradientTape() as tape:
                out = logits(x, cfg.keep_prob)
                loss = tf.reduce_mean(tf.nn.sparse_softmax_cross_entropy_with_logits(labels=y, logits=out))
                loss += cfg.l2 * l2_penalty(variables)
            grads = tape.gradient(loss, variables)
            grads = tf.distribute.get_replica_context().all_reduce(tf.distribute.ReduceOp.MEAN, grads)
            grads, _ = tf.clip_by_global_norm(grads, cfg.clip_norm)
            t = updates.assign_add(1.0)
            rate = lr * tf.sqrt(1.0 - beta2**t) / (1.0 - beta1**t)
            for v, (m, s), g in zip(variables, slots, grads):
                m.assign(beta1 * m + (1.0 - beta1) * g)
                s.assign(beta2 * s + (1.0 - beta2) * tf.square(g))
                v.assign_sub(rate * m / (tf.sqrt(s) + eps))
            return loss
        return strategy.run(replica, args=(x, y, lr))

    @tf.function
    def sums(x, y):
        out = logits(x, 1.0)
        xent = tf.nn.sparse_softmax_cross_entropy_with_logits(labels=y, logits=out)
        return tf.stack([tf.reduce_sum(tf.cast(tf.equal(tf.argmax(out, 1), y), tf.float32)), tf.reduce_sum(xent),
                         tf.cast(tf.size(y), tf.float32)])

    @tf.function
    def total(local):
        return all_reduce(tf.distribute.ReduceOp.SUM, lambda: tf.identity(local))

    def score(x, y):
        """(accuracy, mean cross-entropy) over every worker's share of the windows."""
        mine = np.arange(task, len(x), workers)
        local = tf.zeros([3])
        for at in range(0, len(mine), cfg.eval_batch):
            idx = mine[at:at + cfg.eval_batch]
            local += sums(x[idx], y[idx])
        correct, xent, n = total(local).numpy()
        return correct / n, xent / n

    def say(**fields):
        if task == 0:
            print(json.dumps(fields), flush=True)

    broadcast()
    built = time.time()
    spec = augment.parse(cfg.augment)
    mine = shard(len(data.x_train), task, workers, cfg.seed)
    batch = cfg.worker_batch(workers)
    steps, per_epoch = cfg.steps_per_epoch(len(data.x_train), workers)
    peak = cfg.learning_rate * cfg.lr_scale(workers)
    warm = cfg.warmup_updates + cfg.warmup_epochs * per_epoch
    say(started=time.time(), process_s=round(loaded - born, 1), graph_s=round(built - loaded, 1), threads=threads)
    best, best_key, update = None, None, 0
    for epoch in range(1, cfg.epochs + 1):
        t0 = time.time()
        order = mine[np.random.default_rng([cfg.seed, epoch, task]).permutation(len(mine))]
        jitter = np.random.default_rng([cfg.seed, epoch, task, 1])
        for step in range(steps):
            idx = order[step * batch:(step + 1) * batch]
            # graph.learning_rate's rule (constant schedule), in float64 as the rows were measured:
            # the same rule in float32 rounds the warm-up differently, and the runs part after epoch 1.
            lr = peak if warm <= 0 or peak == cfg.learning_rate else (
                cfg.learning_rate + (peak - cfg.learning_rate) * min(1.0, update / warm))
            train_step(augment.augment(data.x_train[idx], jitter, spec), data.y_train[idx], tf.constant(lr, tf.float32))
            update += 1
        trained = time.time()
        val_acc, val_loss = score(data.x_val, data.y_val)
        key = (-val_acc, val_loss, epoch)
        if best_key is None or key < best_key:
            best_key, best = key, [v.numpy() for v in variables]
        say(epoch=epoch, time=time.time(), epoch_s=round(trained - t0, 2), eval_s=round(time.time() - trained, 2),
            val_acc=float(val_acc), val_loss=float(val_loss))
        if args.target and val_acc >= args.target:
            break
    for v, value in zip(variables, best):
        v.assign(value)
    test_acc, _ = score(data.x_test, data.y_test)
    say(test_acc=float(test_acc), best_epoch=best_key[2])


def run_lab(args: argparse.Namespace) -> None:
    from har_wall import load, prepared_har, report, save, stage_har  # the same rows as its, to pair with its one-Pi rows
    from labcluster import lab_cluster

    from picluster.lab.limits import Limits, fair_share, machine, resolve

    rows = load(args.rows)
    prepared_har()  # before a lab is built for nothing
    counts = [int(w) for w in args.workers.split(",")]
    hosts = max(counts)
    share = args.share_of or hosts
    cpu = fair_share(machine()[0], share)
    limits = Limits(cpu=cpu, memory=resolve(share, profile="pi3b").memory)
    with lab_cluster(hosts, limits, rate=args.link, start=False) as (lab, _inventory, inv):
        stage_har(lab.hosts, inv)
        for seed in (int(s) for s in args.seeds.split(",")):
            for workers in counts:
                if not args.again and rows.get(("allreduce", workers, seed), {}).get("ok") == "yes":
                    continue
                row = one_run(lab, inv, workers, seed, args)
                row |= {"config": "allreduce", "workers": workers, "seed": seed, "cpu_per_host": f"{cpu:g}",
                        "link": args.link, "target": f"{args.target:g}", "evaluator": "workers"}
                rows[("allreduce", workers, seed)] = row
                save(rows, args.rows)
                print(f"allreduce x{workers} seed {seed}: {json.dumps(row)}", flush=True)
    report(rows)


def one_run(lab, inv, workers: int, seed: int, args: argparse.Namespace) -> dict:
    """Start one process per worker host, at once, and read worker 0's lines into a row."""
    from har_wall import up_to_target

    chosen = lab.hosts[:workers]
    cluster = {"worker": [f"{h.address}:{PORT}" for h in chosen]}
    started = time.time()
    procs = []
    for task, host in enumerate(chosen):
        env = os.environ | {"TF_CONFIG": json.dumps({"cluster": cluster, "task": {"type": "worker", "index": task}}),
                            "TF_CPP_MIN_LOG_LEVEL": "2"}
        command = ["nsenter", "-t", str(host.pid), "-n", "-m", "-u", "--", sys.executable, __file__, "--task", str(task),
                   "--workers", str(workers), "--seeds", str(seed), "--epochs", str(args.epochs), "--target", str(args.target),
                   "--data-dir", f"{inv.data_dir}/har"]
        procs.append(subprocess.Popen(command, env=env, stdout=subprocess.PIPE if task == 0 else subprocess.DEVNULL,
                                      stderr=subprocess.PIPE, text=True, preexec_fn=host._joiner()))
    try:
        out, err = procs[0].communicate(timeout=3 * 3600)
        others = [p.wait(timeout=120) for p in procs[1:]]
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    wall = time.time() - started
    lines = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    status = procs[0].returncode or next((s for s in others if s), 0)
    last = (err.strip().splitlines() or [""])[-1]
    row: dict = {"wall_s": f"{wall:.1f}", "ok": "yes" if status == 0 else f"exit {status}: {last}"[:200]}
    epochs = [line for line in lines if "epoch" in line]
    head = next((line for line in lines if "started" in line), None)
    if not epochs or head is None:
        return row
    upto, reached = up_to_target(epochs, args.target)
    end = upto[-1]["time"]
    steps = sum(r["epoch_s"] for r in upto)
    evals = sum(r["eval_s"] for r in upto)
    test = next((line["test_acc"] for line in lines if "test_acc" in line), None)
    return row | {"to_target_s": f"{end - started:.1f}" if reached else "", "epochs": len(upto),
                  "startup_s": f"{head['started'] - started:.1f}", "steps_s": f"{steps:.1f}", "probe_s": "0.0",
                  "eval_s": f"{evals:.1f}", "rest_s": f"{end - head['started'] - steps - evals:.1f}",
                  "val_acc": f"{upto[-1]['val_acc']:.4f}", "test_acc": f"{test:.4f}" if test is not None else "",
                  "process_s": f"{head['process_s']}", "graph_s": f"{head['graph_s']}"}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--workers", default="8,16", help="worker counts, comma-separated (the lab has the largest hosts)")
    parser.add_argument("--seeds", default="1,2,3")
    parser.add_argument("--share-of", type=int, default=0,
                        help="each host gets this machine's cores / N (har_wall.py's lab of N hosts) [the largest count]")
    parser.add_argument("--target", type=float, default=0.96, help="validation accuracy to reach [0.96]")
    parser.add_argument("--epochs", type=int, default=40, help="at most this many epochs per run [40]")
    parser.add_argument("--link", default="300mbit", help="each host's link rate, as tc writes it [300mbit: a Pi 3B+]")
    parser.add_argument("--rows", type=Path, required=False, help="the rows kept (har_wall.py's columns)")
    parser.add_argument("--again", action="store_true", help="measure again what the rows kept already hold")
    # One worker's process (started by the lab run inside its host).
    parser.add_argument("--task", type=int, default=None, help=argparse.SUPPRESS)
    parser.add_argument("--data-dir", default="", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.task is not None:
        task_main(args)
        return
    if args.rows is None:
        raise SystemExit("--rows FILE: the rows kept (copy har_wall.py's one-Pi rows into it to pair with)")
    run_lab(args)


if __name__ == "__main__":
    main()
