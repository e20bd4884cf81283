"""One worker's client: ``python -m picluster.jobs.har.replica --run-dir D --task i``.

Between-graph replication: every worker task runs this module beside its server, builds its
own copy of the graph with the variables on the ps tasks, and trains on its own shard of the
training windows.  Worker 0 is the chief: it initialises or restores the variables, evaluates
after each of its epochs, writes metrics.csv, TensorBoard summaries, checkpoints and
result.json.  Everything it needs comes from the run directory (config.json, layout.json),
so the same command can be started over SSH on a node.
"""

import argparse
import json
import os
import signal
import sys
import threading
import time
from pathlib import Path

import numpy as np

from picluster import atomic
from picluster.errors import PiclusterError, UsageError
from picluster.cluster.lifetime import die_with_parent
from picluster.jobs.har import metrics
from picluster.jobs.har.config import TrainConfig
from picluster.jobs.har.model import STEPS, Shape, l2_penalty, logits

PROBE_REPEATS = 3
STOP_GRACE_S = 5.0
LIVE_EVERY_S = 1.0  # the chief's live.json: where in the epoch it is


# -- data ---------------------------------------------------------------------------------------
def load_data(config: TrainConfig):
    from picluster.data.har import har_dir
    from picluster.data.har.dataset import cache_path, load
    from picluster.data.har.spec import CHANNELS, CLASSES

    # Only what `picluster data har` prepared: building it here would hide a wrong --data-dir.
    folder = Path(config.data_dir) if config.data_dir else har_dir()
    data = load(cache_path(folder))
    for split in ("train", "val", "test"):
        x, y = getattr(data, f"x_{split}"), getattr(data, f"y_{split}")
        if x.ndim != 3 or x.shape[1:] != (STEPS, len(CHANNELS)) or y.shape != (len(x),):
            raise UsageError(f"{folder}: {split} windows have shape {x.shape}, expected (n, {STEPS}, {len(CHANNELS)}); run `picluster data har` again")
        if len(x) and (y.min() < 0 or y.max() >= len(CLASSES)):
            raise UsageError(f"{folder}: {split} labels outside 0..{len(CLASSES) - 1}")
    if len(data.x_train) < config.batch * max(1, config.workers):
        raise UsageError(f"{folder}: {len(data.x_train)} training windows are fewer than --batch x workers")
    return data


def shard(n: int, task: int, workers: int, seed: int) -> np.ndarray:
    """This worker's window indices: a fixed shuffle of all of them, dealt round-robin."""
    order = np.random.default_rng(seed).permutation(n)
    return order[task::workers]


# -- graph --------------------------------------------------------------------------------------
class Graph:
    def __init__(self, tf, config: TrainConfig, task: int, data, layout=None, launch: str = "") -> None:
        self.graph = tf.Graph()
        self.shape = Shape(config.layers, config.residual, config.hidden, config.bidir,
                           norm=config.norm, relu_logits=config.relu_logits, window_stats=config.window_stats)
        workers = 1 if config.standalone else config.workers
        # A container per launch: a persistent cluster's ps keeps variables between sessions, and
        # a new run must not start from the last one's weights (a resumed one restores its checkpoint).
        with self.graph.as_default(), tf.compat.v1.container(f"picluster-{launch}" if launch else ""):  # [A-Za-z0-9.-/] only
            if layout is None:
                setter = None
                here = None
            else:
                here = f"/job:worker/task:{task}"
                setter = tf.compat.v1.train.replica_device_setter(
                    cluster=tf.train.ClusterSpec(layout.cluster_dict()), worker_device=here
                )  # round-robin: variables spread across every ps task
            with tf.compat.v1.device(setter):
                self.global_step = tf.compat.v1.train.get_or_create_global_step()
                # Start barrier: each launch of the run adds one per worker; kept in checkpoints.
                self.joined = tf.compat.v1.get_variable("workers_joined", [], tf.int64, trainable=False,
                                                        initializer=tf.compat.v1.zeros_initializer())
                self.join = self.joined.assign_add(1)
                self.x = tf.compat.v1.placeholder(tf.float32, [None, STEPS, self.shape.inputs], name="x")
                self.y = tf.compat.v1.placeholder(tf.int64, [None], name="y")
                self.keep = tf.compat.v1.placeholder_with_default(1.0, [], name="keep_prob")
                # Read the step before the forward pass reads the weights: the staleness baseline.
                self.step_before = self.global_step.read_value()
                with tf.control_dependencies([self.step_before]):
                    x = tf.identity(self.x)
                if config.standardise:
                    from picluster.jobs.har.model import channel_moments, standardise

                    x = standardise(tf, x, *channel_moments(data.x_train))
                out = logits(tf, x, self.shape, self.keep)
                xent = tf.nn.sparse_softmax_cross_entropy_with_logits(labels=self.y, logits=out)
                self.xent = tf.reduce_mean(xent)
                self.loss = self.xent + config.l2 * l2_penalty(tf, tf.compat.v1.trainable_variables())
                self.correct = tf.reduce_sum(tf.cast(tf.equal(tf.argmax(out, 1), self.y), tf.int64))
                lr = config.learning_rate
                if config.lr_schedule == "cosine":
                    _, per_epoch = config.steps_per_epoch(len(data.x_train), workers)
                    lr = tf.compat.v1.train.cosine_decay(lr, self.global_step, max(1, per_epoch * config.epochs))
                opt = tf.compat.v1.train.AdamOptimizer(lr)
                grads, variables = zip(*opt.compute_gradients(self.loss))
                self.sync = config.mode == "sync" and workers > 1
                if self.sync:
                    self.train = _sync_step(tf, opt, grads, variables, self.global_step, config, task, workers, launch)
                else:
                    grads, _ = tf.clip_by_global_norm(grads, config.clip_norm)
                    self.train = opt.apply_gradients(zip(grads, variables), global_step=self.global_step)
                if config.ema:
                    # Shadow weights beside the weights (on the ps); only a step that applies an
                    # update moves them: every worker's in async mode, the chief's in sync mode.
                    ema = tf.compat.v1.train.ExponentialMovingAverage(config.ema, num_updates=self.global_step)
                    if self.sync and task != 0:
                        ema.apply(variables)
                    else:
                        with tf.control_dependencies([self.train]):
                            self.train = ema.apply(variables)
                    out = _averaged_logits(tf, ema, x, self.shape)
                    xent = tf.nn.sparse_softmax_cross_entropy_with_logits(labels=self.y, logits=out)
                self.pred = tf.argmax(out, 1)  # evaluation: the averaged weights when --ema
                self.xent_sum = tf.reduce_sum(xent)
                with tf.control_dependencies([self.train]):
                    self.step_after = self.global_step.read_value()
            self.uninitialised = tf.compat.v1.report_uninitialized_variables()
            self.uninitialised.mark_used()  # only non-chief workers run it; unused, TF warns at exit
            self.variables = tf.compat.v1.trainable_variables()
            self.parameters = int(sum(np.prod(v.shape) for v in self.variables))
            self.saver = tf.compat.v1.train.Saver(max_to_keep=2)
            self.best_saver = tf.compat.v1.train.Saver(max_to_keep=1)
            self._exchange_probe(tf, here)

    def _exchange_probe(self, tf, here) -> None:
        """Pull every weight to this worker and push a same-sized zero update back."""
        if here is None:
            self.pull = self.push = self.noop = None
            self.zeros = {}
            return
        with tf.device(here):
            self.noop = tf.constant(0.0) + tf.compat.v1.placeholder_with_default(0.0, [])
            self.pull = tf.add_n([tf.reduce_sum(v) for v in self.variables])
            self.zeros = {v: tf.compat.v1.placeholder(v.dtype.base_dtype, v.shape) for v in self.variables}
        self.push = tf.group(*[v.assign_add(z, read_value=False) for v, z in self.zeros.items()])
        self.zero_values = {z: np.zeros(v.shape, np.float32) for v, z in self.zeros.items()}


def _averaged_logits(tf, ema, x, shape):
    """The same network reading each weight's moving average: the model that is evaluated."""
    def averaged(getter, name, *args, **kwargs):
        var = getter(name, *args, **kwargs)
        average = ema.average(var)
        return var if average is None else average  # the input moments have none: they never move

    with tf.compat.v1.variable_scope(tf.compat.v1.get_variable_scope(), reuse=True, custom_getter=averaged):
        return logits(tf, x, shape, 1.0)


def _sync_step(tf, opt, grads, variables, global_step, config, task, workers, launch):
    """One synchronous step: every worker's gradient, averaged, applied once by the chief.

    Each worker puts its gradients in its own one-slot queue on ps 0 and waits for a token;
    the chief takes one gradient from every queue, averages and clips them, applies Adam and
    hands each worker a token.  Unlike SyncReplicasOptimizer, which accepts any
    ``replicas_to_aggregate`` gradients (a fast worker may supply two), every step holds
    exactly one gradient per worker.  Queue names carry the launch id, so a persistent
    cluster's leftovers from an earlier launch are never read.
    """
    shapes = [v.shape for v in variables]
    with tf.compat.v1.device("/job:ps/task:0"):
        queues = [tf.queue.FIFOQueue(1, [tf.float32] * len(grads), shapes=shapes,
                                     shared_name=f"grads_{w}_{launch}", name=f"grads_{w}") for w in range(workers)]
        tokens = [tf.queue.FIFOQueue(1, [tf.int64], shapes=[[]], shared_name=f"token_{w}_{launch}", name=f"token_{w}")
                  for w in range(workers)]
    push = queues[task].enqueue(list(grads))
    if task != 0:
        with tf.control_dependencies([push]):
            return tokens[task].dequeue()
    with tf.control_dependencies([push]), tf.compat.v1.device("/job:ps/task:0"):
        taken = [q.dequeue() for q in queues]
        mean = [tf.add_n(list(gs)) / float(workers) for gs in zip(*taken)]
    clipped, _ = tf.clip_by_global_norm(mean, config.clip_norm)
    apply = opt.apply_gradients(zip(clipped, variables), global_step=global_step)
    with tf.control_dependencies([apply]):
        step = global_step.read_value()
        return tf.group(*[tokens[w].enqueue([step]) for w in range(1, workers)])


# -- the client ---------------------------------------------------------------------------------
class Replica:
    def __init__(self, run_dir: Path, task: int) -> None:
        self.run_dir = run_dir
        self.task = task
        self.chief = task == 0
        self.config = TrainConfig.load(run_dir / "config.json")
        layout_file = run_dir / "layout.json"
        self.layout = None
        self.launch = ""
        if not self.config.standalone:
            from picluster.clusterspec import Layout

            placed = json.loads(layout_file.read_text())
            self.layout = Layout.from_json(placed["layout"])
            self.launch = placed.get("launch", "")
        self.workers = 1 if self.config.standalone else self.config.workers

    def run(self) -> None:
        os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
        import tensorflow as tf

        tf.compat.v1.disable_eager_execution()
        t0 = time.perf_counter()
        cfg = self.config
        data = load_data(cfg)
        tf.compat.v1.set_random_seed(cfg.seed)
        g = Graph(tf, cfg, self.task, data, self.layout, self.launch)
        mine = shard(len(data.x_train), self.task, self.workers, cfg.seed)
        batch = cfg.worker_batch(self.workers)
        steps, global_per_epoch = cfg.steps_per_epoch(len(data.x_train), self.workers)

        with g.graph.as_default():
            if self.layout is None:
                target = ""
                session_config = tf.compat.v1.ConfigProto(
                    intra_op_parallelism_threads=os.cpu_count() or 1, inter_op_parallelism_threads=os.cpu_count() or 1
                )
            else:
                target = f"grpc://{self.layout.task('worker', self.task).address}"
                # A dead spare worker must not block us: only the ps and our own task must answer.
                session_config = tf.compat.v1.ConfigProto(device_filters=["/job:ps", f"/job:worker/task:{self.task}"])
            ckpt_dir = self.run_dir / "checkpoints"
            if not self.chief:
                # MonitoredTrainingSession re-checks the chief's initialisation only every 30 s.
                with tf.compat.v1.Session(target, config=session_config) as probe:
                    while len(probe.run(g.uninitialised)):
                        time.sleep(0.2)
            session = tf.compat.v1.train.MonitoredTrainingSession(
                master=target,
                is_chief=self.chief,
                checkpoint_dir=str(ckpt_dir) if self.chief else None,
                scaffold=tf.compat.v1.train.Scaffold(saver=g.saver),
                config=session_config,
                save_checkpoint_secs=None,
                save_checkpoint_steps=None,
                save_summaries_steps=None,
                save_summaries_secs=None,
                log_step_count_steps=None,
                stop_grace_period_secs=2,
            )
            # Evaluation, probes and saves run on the raw session, outside the hooks.
            def with_raw(fn):
                return session.run_step_fn(lambda step_context: fn(step_context.session))

            def raw(fetches, feed=None):
                return with_raw(lambda s: s.run(fetches, feed))

            t1 = time.perf_counter()
            self._barrier(raw, g)
            # Start-up cost, in the log: it counts in the wall time to an accuracy.
            print(f"replica {self.task}: data+graph+session {t1 - t0:.1f} s, barrier {time.perf_counter() - t1:.1f} s", flush=True)
            start_step = int(raw(g.global_step))
            start_epoch = start_step // global_per_epoch
            chief = Chief(self.run_dir, cfg, g, data, with_raw, start_epoch, start_step) if self.chief else None
            status = WorkerStatus(self.run_dir, self.task)
            started = time.time()
            for epoch in range(start_epoch + 1, cfg.epochs + 1):
                if session.should_stop():
                    break
                stats = self._epoch(session, g, data, mine, epoch, steps, batch, cfg)
                stats["exchange_s"] = min(stats["compute_s"], steps * self._probe(raw, g))
                stats["compute_s"] -= stats["exchange_s"]
                status.write(epoch, stats, started)
                if chief is not None and chief.end_epoch(epoch, stats):
                    break
            if chief is not None:
                chief.finish()
            session.close()

    def _epoch(self, session, g, data, mine, epoch, steps, batch, cfg) -> dict:
        order = mine[np.random.default_rng([cfg.seed, epoch, self.task]).permutation(len(mine))]
        t_input = t_step = 0.0
        loss_sum = correct = seen = 0
        staleness = []
        begin = live_at = time.perf_counter()
        for s in range(steps):
            t0 = time.perf_counter()
            idx = np.sort(order[s * batch:(s + 1) * batch])
            feed = {g.x: data.x_train[idx], g.y: data.y_train[idx], g.keep: cfg.keep_prob}
            t1 = time.perf_counter()
            _, loss, ok, before, after = session.run([g.train, g.xent, g.correct, g.step_before, g.step_after], feed)
            t2 = time.perf_counter()
            t_input += t1 - t0
            t_step += t2 - t1
            loss_sum += float(loss) * len(idx)
            correct += int(ok)
            seen += len(idx)
            if not g.sync and self.layout is not None:
                staleness.append(int(after) - int(before) - 1)  # other workers' updates between our read and our apply
            if self.chief and t2 - live_at >= LIVE_EVERY_S:
                live_at = t2
                atomic.write_json(self.run_dir / "live.json", {
                    "epoch": epoch, "epochs": cfg.epochs, "step": s + 1, "steps": steps, "global_step": int(after),
                    "train_acc": correct / max(seen, 1), "time": time.time()})
        return {
            "epoch_s": time.perf_counter() - begin,
            "input_s": t_input,
            "compute_s": t_step,
            "train_loss": loss_sum / max(seen, 1),
            "train_acc": correct / max(seen, 1),
            "staleness_mean": float(np.mean(staleness)) if staleness else "",
            "staleness_max": int(np.max(staleness)) if staleness else "",
            "global_step": int(after) if steps else "",
        }

    def _barrier(self, raw, g) -> None:
        """Wait until every worker of this launch has its session: sync steps then take all of them."""
        if self.layout is None:
            return
        # Checkpoints are written after the barrier, so a restored count is a multiple of the
        # worker count; our own increment tells which round of joining this launch is.
        mine = int(raw(g.join))
        want = (mine - 1) // self.workers * self.workers + self.workers
        joined = mine
        while joined < want:
            time.sleep(0.05)
            joined = int(raw(g.joined))

    def _probe(self, raw, g) -> float:
        """Seconds to move one step's parameters and gradients between this worker and the ps."""
        if g.pull is None:
            return 0.0
        times, idle = [], []
        for _ in range(PROBE_REPEATS):
            t0 = time.perf_counter()
            raw(g.pull)
            raw(g.push, g.zero_values)
            t1 = time.perf_counter()
            raw(g.noop)
            raw(g.noop)
            idle.append(time.perf_counter() - t1)
            times.append(t1 - t0)
        # Less the cost of two session runs that move nothing: a training step pays that once anyway.
        return max(0.0, float(np.median(times)) - float(np.median(idle)))


class WorkerStatus:
    """worker-<i>.json: what this worker did last, for the coordinator."""

    def __init__(self, run_dir: Path, task: int) -> None:
        self.path = run_dir / f"worker-{task}.json"

    def write(self, epoch: int, stats: dict, started: float) -> None:
        atomic.write_json(self.path, {"epoch": epoch, "time": time.time(), "elapsed_s": time.time() - started, **stats})


class Chief:
    """Evaluation, selection on validation, checkpoints and summaries: worker 0's extra duties."""

    def __init__(self, run_dir, cfg, g, data, with_raw, start_epoch, start_step) -> None:
        import tensorflow as tf

        self.tf = tf
        self.run_dir, self.cfg, self.g, self.data, self.with_raw = run_dir, cfg, g, data, with_raw
        self.raw = lambda fetches, feed=None: with_raw(lambda s: s.run(fetches, feed))
        self.csv = run_dir / "metrics.csv"
        self.state_path = run_dir / "state.json"
        self.state = json.loads(self.state_path.read_text()) if self.state_path.exists() else {}
        # Rows past the restored checkpoint are redone: drop them.
        kept = [r for r in metrics.read_rows(self.csv) if int(r["epoch"]) <= start_epoch]
        self.csv.unlink(missing_ok=True)
        for r in kept:
            metrics.append_row(self.csv, r)
        if self.state.get("best", {}).get("epoch", 0) > start_epoch:
            del self.state["best"]
        self.state.setdefault("resumes", [])
        if start_step:
            self.state["resumes"].append({"epoch": start_epoch, "global_step": start_step, "time": time.time()})
        self.state.setdefault("started", time.time())
        self.writer = tf.compat.v1.summary.FileWriter(str(run_dir / "tensorboard"), g.graph if not start_step else None)
        self.last_epoch = start_epoch
        self.stopped_early = False

    def evaluate(self, split: str) -> dict:
        x, y = getattr(self.data, f"x_{split}"), getattr(self.data, f"y_{split}")
        preds, loss = [], 0.0
        for i in range(0, len(x), self.cfg.eval_batch):
            p, l = self.raw([self.g.pred, self.g.xent_sum], {self.g.x: x[i:i + self.cfg.eval_batch], self.g.y: y[i:i + self.cfg.eval_batch]})
            preds.append(p)
            loss += float(l)
        pred = np.concatenate(preds) if preds else np.zeros(0, np.int64)
        m = metrics.confusion(y, pred, self.g.shape.classes)
        return {"loss": loss / max(len(x), 1), "acc": float((pred == y).mean()) if len(y) else 0.0,
                "f1": metrics.weighted_f1(m), "confusion": m.tolist(),
                "by_volunteer": metrics.accuracy_by(getattr(self.data, f"subject_{split}"), y, pred)}

    def end_epoch(self, epoch: int, stats: dict) -> bool:
        """Record the epoch; True when training should stop."""
        val, test = self.evaluate("val"), self.evaluate("test")
        step = int(self.raw(self.g.global_step))
        row = {"epoch": epoch, **stats, "global_step": step,
               "val_loss": val["loss"], "val_acc": val["acc"], "val_f1": val["f1"],
               "test_loss": test["loss"], "test_acc": test["acc"], "test_f1": test["f1"],
               "wall_s": time.time() - self.state["started"], "time": time.time()}
        metrics.append_row(self.csv, row)
        self._summaries(row, step)
        best = self.state.get("best")
        if best is None or val["acc"] > best["val_acc"] or (val["acc"] == best["val_acc"] and val["loss"] < best["val_loss"]):
            self.state["best"] = {"epoch": epoch, "global_step": step, "val_acc": val["acc"], "val_loss": val["loss"],
                                  "val_f1": val["f1"], "test_acc": test["acc"], "test_f1": test["f1"],
                                  "test_loss": test["loss"], "confusion": test["confusion"],
                                  "test_by_volunteer": test["by_volunteer"]}
            self.raw_save(self.g.best_saver, self.run_dir / "best" / "model", step)
        if epoch % self.cfg.checkpoint_epochs == 0 or epoch == self.cfg.epochs:
            self.raw_save(self.g.saver, self.run_dir / "checkpoints" / "model.ckpt", step)
        self.last_epoch = epoch
        atomic.write_json(self.state_path, self.state)
        atomic.write_json(self.run_dir / "progress.json", {k: v for k, v in row.items()} | {"best_epoch": self.state["best"]["epoch"]})
        if self.cfg.target_val_accuracy and val["acc"] >= self.cfg.target_val_accuracy:
            self.stopped_early = True
            return True
        return False

    def raw_save(self, saver, path: Path, step: int) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self.with_raw(lambda s: saver.save(s, str(path), global_step=step, write_meta_graph=False))

    def _summaries(self, row: dict, step: int) -> None:
        tf = self.tf
        values = [tf.compat.v1.Summary.Value(tag=k, simple_value=float(row[k]))
                  for k in ("train_loss", "train_acc", "val_loss", "val_acc", "val_f1", "test_loss", "test_acc", "test_f1",
                            "epoch_s", "input_s", "compute_s", "exchange_s")]
        self.writer.add_summary(tf.compat.v1.Summary(value=values), step)
        self.writer.flush()

    def _per_ps(self) -> dict[str, int]:
        """Where the weights live: parameters per ps task (replica_device_setter spreads them)."""
        placed: dict[str, int] = {}
        for v in self.g.variables:
            spec = self.tf.DeviceSpec.from_string(v.device or "")
            if spec.job == "ps":
                key = f"ps:{spec.task}"
                placed[key] = placed.get(key, 0) + int(np.prod(v.shape))
        return dict(sorted(placed.items()))

    def finish(self) -> None:
        best = self.state.get("best", {})
        rows = metrics.read_rows(self.csv)
        result = {
            "selected_on": "validation",
            "best_epoch": best.get("epoch"),
            "test_accuracy": best.get("test_acc"),
            "test_f1": best.get("test_f1"),
            "val_accuracy": best.get("val_acc"),
            "confusion": best.get("confusion"),
            "test_accuracy_by_volunteer": best.get("test_by_volunteer"),  # volunteers differ in posture more than models do
            "epochs_run": self.last_epoch,
            "stopped_at_target": self.stopped_early,
            "parameters": self.g.parameters,
            "parameters_per_ps": self._per_ps(),
            "resumes": self.state.get("resumes", []),
            "wall_s": time.time() - self.state["started"],
            "epoch_s_mean": float(np.mean([float(r["epoch_s"]) for r in rows])) if rows else None,
            "config": json.loads(self.cfg.to_json()),
        }
        atomic.write_json(self.run_dir / "result.json", result)
        self.writer.close()


def _exit_on_stdin_eof() -> None:
    """The coordinator is gone (its SSH channel closed): stop as on SIGTERM, and surely soon."""
    while os.read(0, 4096):  # the raw fd: a buffered reader's lock would abort the interpreter at exit
        pass
    os.kill(os.getpid(), signal.SIGTERM)
    time.sleep(STOP_GRACE_S)  # SIGTERM runs only between TensorFlow calls; a blocked one never returns
    os._exit(143)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m picluster.jobs.har.replica")
    parser.add_argument("--run-dir", required=True, type=Path)
    parser.add_argument("--task", required=True, type=int)
    parser.add_argument("--parent", type=int, help="exit when this pid (the coordinator) exits")
    parser.add_argument("--watch-stdin", action="store_true", help="exit when stdin closes (the coordinator's SSH channel)")
    args = parser.parse_args(argv)
    if args.parent:
        die_with_parent(args.parent)
    if args.watch_stdin:
        threading.Thread(target=_exit_on_stdin_eof, daemon=True).start()
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    try:
        Replica(args.run_dir, args.task).run()
    except PiclusterError as exc:
        print(f"picluster.jobs.har.replica: error: {exc}", file=sys.stderr)
        return exc.exit_code
    return 0


if __name__ == "__main__":
    sys.exit(main())
