"""One worker's client: in a process of its own (``python -m picluster.jobs.har.process --run-dir D
[--launch ID] [--serve]``), or inside the node's resident server process through its door
(``door_job``, picluster/cluster/door.py: no TensorFlow import, no server restart).

Between-graph replication: every worker task runs this module beside its server, builds its
own copy of the graph with the variables on the ps tasks, and trains on its own shard of the
training windows.  As in Kubeflow's TFJob, the launcher writes ``TF_CONFIG`` (the cluster and
this replica's task) and the replica does not care who launched it; without ``TF_CONFIG`` it
trains alone, in one process.  Everything else comes from the run directory (config.json), so
the same command runs locally or over SSH on a node.  Worker 0 is the chief (chief.py).

The training loop, top to bottom: load the data, build the graph, open the session (the chief
initialises or restores), wait for every worker of this launch, then per epoch: train on this
worker's shard, time the exchange with the ps, record, and let the chief evaluate and save.

Over 400 lines: the loop is meant to read top to bottom in one file (as nanoGPT's train.py
does), so the session, the barrier and the epoch stay beside it; the chief's evaluation and
records (chief.py), the graph (graph.py) and checkpoints (checkpoints.py) live apart.
"""

import argparse
import contextlib
import json
import os
import signal
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path

import numpy as np

# Before TensorFlow is imported (by graph.py): its C++ start-up chatter goes to the log otherwise.
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import tensorflow as tf

from picluster.cluster.door import JobContext
from picluster.jobs.har import augment, checkpoints, exchange, metrics, noise, steptrace
from picluster.jobs.har.chief import Chief, per_ps, save
from picluster.jobs.har.config import TrainConfig
from picluster.jobs.har.data import read_data, shard
from picluster.jobs.har.exchange import Place
from picluster.jobs.har.graph import Graph, Tower
from picluster.jobs.har.rundir import RunDir
from picluster.jobs.har.saving import Snapshots
from picluster.jobs.har.straggler import Arrivals
from picluster.jobs.har.trained import Trained, clear_handed_over
from picluster.util import atomic, cpus
from picluster.util.atomic import STORAGE_ERRNOS
from picluster.util.errors import STORAGE_EXIT, ClusterError, PiclusterError, StorageError, UsageError

LIVE_EVERY_S = 1.0  # the chief's live.json: where in the epoch it is
CANCELLED = 143  # the exit status of a client stopped on the coordinator's word (as SIGTERM's)


class Cancelled(Exception):
    """The coordinator stopped this client (its door's knocker went)."""


def say_line(text: str) -> None:
    print(text, flush=True)


def train(run: RunDir, launch: str = "", serve: bool = False, tf_config: str | None = None,
          say: Callable[[str], None] = say_line, job: JobContext | None = None) -> None:
    """tf_config: the cluster and this task (TF_CONFIG's text; None: alone); job: run through a
    door, in the node's server process (its cancel ends the loop and closes the session)."""
    cfg = TrainConfig.load(run.config)
    cluster, task, members = cluster_and_task(cfg, tf_config)
    # This launch's workers: the tasks TF_CONFIG names as members (a run that went on without a lost
    # worker's task skips it); each worker's place among them (its rank) is what it trains as.
    rank = members.index(task) if cluster else 0
    workers = len(members) if cluster else cfg.replicas
    # The workers whose towers this process feeds: its own, or (--emulate) every one of them.
    tasks = range(workers) if cfg.emulate else [rank]
    chief = rank == 0
    # Start-up, part by part, in the log (it counts in the wall time to an accuracy): the process
    # (interpreter and imports; a door's client runs in a process that has them already), ...
    t0 = time.perf_counter()
    process_s = time.time() - (job.started if job is not None else _process_started())

    if cfg.deterministic:
        tf.config.experimental.enable_op_determinism()
    data, held = read_data(cfg)
    t_data = time.perf_counter()
    tf.compat.v1.disable_eager_execution()
    server = serve_task(cluster, task) if serve and cluster else None  # noqa: F841  (serves while it lives)
    place = Place(cluster, task, rank, workers, launch, tuple(members) if cluster else ())
    g = _graph(cfg, data, place)
    kind = g.kind  # how this replica's updates meet
    shards = [shard(len(data.x_train), t, workers, cfg.seed) for t in tasks]
    batch = cfg.worker_batch(workers)
    steps, global_per_epoch = cfg.steps_per_epoch(len(data.x_train), workers)

    restore = None
    if chief:  # the newest intact checkpoint, or a refusal when the run has records but none is intact
        rows = metrics.read_rows(run.metrics)
        restore = checkpoints.prepare(run.checkpoints, has_records=bool(rows), last_row=max((int(r["epoch"]) for r in rows if str(r.get("epoch", "")).isdigit()), default=None))
    if job is not None:
        job.on_cancel(kind.close)  # a step blocked in the exchange returns
    with g.graph.as_default(), contextlib.closing(kind):
        t_graph = time.perf_counter()
        session = open_session(g, cfg, run.checkpoints, job, chief)
        with_raw = session_fn(session)

        def raw(fetches, feed=None):
            return with_raw(lambda s: s.run(fetches, feed))

        start_step = start_epoch = 0
        if chief:
            start_step = int(raw(g.global_step))
            # The epoch the restored checkpoint ends, as recorded beside it; a run from before the
            # record (its workers never changed) counts it from the step.
            recorded = checkpoints.epoch_of(run.checkpoints, restore.checkpoint if restore is not None else None)
            start_epoch = recorded if recorded is not None else start_step // global_per_epoch
        t1 = time.perf_counter()
        # Every worker of this launch on the same weights, step and epoch (the kind's own way).
        start_step, start_epoch = kind.start(raw, g, start_step, start_epoch, partial(_cancelled, job))
        g.schedule_at(start_epoch, start_step)
        say(f"replica {task}: start-up: process {process_s:.1f} s, data {t_data - t0:.1f} s{' (held)' if held else ''}, graph {t_graph - t_data:.1f} s, "
            f"session {t1 - t_graph:.1f} s, barrier {time.perf_counter() - t1:.1f} s"
            + (f" ({workers} workers, tasks {','.join(map(str, members))})" if cluster and members != list(range(len(cluster["worker"]))) else ""))
        if restore is not None and (restore.checkpoint or restore.damaged):
            checkpoints.write_note(run.resume_note, restore, launch, start_epoch, start_step)
            say(f"replica {task}: {restore.describe()}")
        # The evaluation's duties: the chief's own between epochs, or (--evaluator coordinator) a
        # process beside the coordinator's, which reads what ``trained`` records after each epoch.
        beside = chief and cluster is not None and cfg.evaluator == "coordinator"
        duties = Chief(run, cfg, g, data, with_raw, start_epoch, start_step, restore, say) if chief and not beside else None
        trained = Trained(run.trained, launch) if beside else None
        snapshots = Snapshots(g.saved, run.checkpoints, run.to_evaluate, trained) if trained is not None else None
        if trained is not None:
            clear_handed_over(run.to_evaluate)
            trained.add(begin=True, start_epoch=start_epoch, start_step=start_step, began=time.time(), per_ps=per_ps(g), data=data.checksum,
                        restore={"checkpoint": restore.checkpoint, "damaged": restore.damaged} if restore else None)
        status_file, started = run.worker_status(task), time.time()
        # Every checkpoint begun beside the steps is written before the loop is left, a cancel's way too.
        with snapshots if snapshots is not None else contextlib.nullcontext():
            for epoch in range(start_epoch + 1, cfg.epochs + 1):
                if session.should_stop():
                    break
                # Input order and augmentation: seeded by (seed, epoch, task), so a resumed epoch is the same too.
                feeds = [Feed(tower, t, mine[np.random.default_rng([cfg.seed, epoch, t]).permutation(len(mine))],
                              np.random.default_rng([cfg.seed, epoch, t, 1])) for tower, t, mine in zip(g.towers, tasks, shards)]
                live = run.live if chief else None
                stats, values = train_epoch(session, g, data, feeds, steps, batch, cfg, epoch, task if cluster else None, live, job,
                                            snapshot=snapshots is not None, members=members if cluster else None)
                # What this worker did last, for the coordinator.
                atomic.write_json(status_file, {"epoch": epoch, "time": time.time(), "elapsed_s": time.time() - started, **stats})
                if trained is not None and snapshots is not None and values is not None:
                    # The weights of the epoch's last update, fetched with its step, for the evaluator and a
                    # resume: written by the chief's thread while the next epoch's steps go on (saving.py).
                    snapshots.take(values, int(stats["global_step"]), epoch, stats)
                elif trained is not None:
                    # Post-local SGD's epochs end in a sync of models, not an update: saved here.  In sync
                    # mode nothing moves the weights until this chief's next step applies the next update.
                    step = int(raw(g.global_step))
                    save(with_raw, g.saver, run.checkpoints / "model.ckpt", step, epoch,
                         recorded=partial(trained.handed_over, folder=run.to_evaluate, epoch=epoch, **stats))
                elif duties is not None and duties.end_epoch(epoch, stats):
                    break
        if trained is not None:
            trained.add(end=True)
        if duties is not None:
            duties.finish()
        session.close()


# The last graph built in this process, for the next run of the same shape: a node's resident
# server runs run after run, and building the graph is most of a Pi-shaped host's start-up
# (10-15 s at a ninth of a core).  Only a kind whose graph names no launch is kept (Exchange.reusable).
_BUILT: dict[tuple, Graph] = {}
# Options that change nothing in the graph: a run that differs only in them reuses it.
_NOT_IN_GRAPH = ("target_val_accuracy", "data_dir", "checkpoint_epochs", "eval_batch", "eval_test_every_epoch", "max_restarts", "worker_deadline")


def _graph(cfg: TrainConfig, data, place: Place) -> Graph:
    """The replica's graph: the one this process built for the last run if nothing in it differs
    (the same options, data and place but the launch), else a new one."""
    shape = {k: v for k, v in json.loads(cfg.to_json()).items() if k not in _NOT_IN_GRAPH}
    key = (json.dumps(shape, sort_keys=True), data.checksum, place.cluster is None, place.rank, place.workers)
    built = _BUILT.get(key)
    if built is not None:
        built.kind.relaunch(place)
        return built
    g = Graph(cfg, data, exchange.choose(cfg, place))
    _BUILT.clear()
    if g.kind.reusable:
        _BUILT[key] = g
    return g


def _process_started() -> float:
    """When this process started (seconds since the epoch, as time.time())."""
    import psutil

    return psutil.Process().create_time()


def cluster_and_task(cfg: TrainConfig, tf_config: str | None) -> tuple[dict | None, int, list[int]]:
    """The ClusterSpec (as a dict), this worker's index and the worker tasks that train in this
    launch (TF_CONFIG's "members", picluster's own key; every worker when absent), from TF_CONFIG's
    text; (None, 0, [0]) alone."""
    if cfg.standalone:
        return None, 0, [0]
    try:
        if tf_config is None:
            raise KeyError("TF_CONFIG")
        spec = json.loads(tf_config)
        cluster, task = spec["cluster"], spec["task"]
        if task["type"] != "worker" or not 0 <= int(task["index"]) < len(cluster["worker"]):
            raise ValueError(f"task {task} is not one of the cluster's workers")
        members = spec.get("members", list(range(len(cluster["worker"]))))
        if (not isinstance(members, list) or not all(isinstance(m, int) and 0 <= m < len(cluster["worker"]) for m in members)
                or sorted(set(members)) != members or int(task["index"]) not in members):
            raise ValueError(f"members {members} are not the cluster's workers in order, with task {task['index']}")
        return cluster, int(task["index"]), members
    except KeyError as exc:
        raise UsageError(f"TF_CONFIG is missing {exc}; start replicas with 'picluster train har'") from None
    except (ValueError, TypeError) as exc:
        raise UsageError(f"TF_CONFIG is not a worker's cluster spec ({exc})") from None


def serve_task(cluster: dict, task: int):
    """This worker's TensorFlow server, hosted here: the node runs one TensorFlow runtime, not a
    server beside a client that imports TensorFlow again (see docs/lab.md for what that saves)."""
    from picluster.cluster.server import COLLECTIVE_LEADER
    from picluster.cluster.shim import only_on

    host, port = cluster["worker"][task].rsplit(":", 1)
    config = tf.compat.v1.ConfigProto()
    config.experimental.collective_group_leader = COLLECTIVE_LEADER  # as every node's server (--exchange collective)
    server = tf.distribute.Server(tf.train.ClusterSpec(cluster), job_name="worker", task_index=task, protocol="grpc",
                                  config=config, start=True)
    wrong = only_on(host, int(port))
    if wrong:
        raise ClusterError(f"worker {task} refuses to serve: {wrong}")
    say_line(f"replica {task}: serving worker {task} in this process at {host}:{port}")
    return server


class _Kept:
    """A session creator that hands each session it makes to ``keep`` (the door's cancel closes it,
    so a step blocked on the ps returns) and makes none once the job is cancelled."""

    def __init__(self, creator, job: JobContext | None) -> None:
        self.creator, self.job = creator, job

    def create_session(self):
        if self.job is not None and self.job.cancelled.is_set():
            raise Cancelled()
        session = self.creator.create_session()
        if self.job is not None:
            self.job.on_cancel(session.close)
        return session


def open_session(g: Graph, cfg: TrainConfig, checkpoint_dir: Path, job: JobContext | None = None, chief: bool = True):
    """A MonitoredSession on the kind's target: the chief restores the checkpoint the state file
    names (checkpoints.prepare made it the newest intact one) or initialises; another worker
    initialises its own copy where the kind gives it one, or waits for what the chief
    initialised (Exchange.await_chief: on a ps, one readiness flag, where a report of every
    uninitialised variable asked the ps about each of them five times a second)."""
    target, config = g.kind.target()
    if config is None:
        # A fixed thread count: a different one is a different (still reproducible) run.
        threads = cfg.threads or cpus.usable()  # as a server sizes its pools: the emulator then repeats a local cluster's numbers
        config = tf.compat.v1.ConfigProto(intra_op_parallelism_threads=threads, inter_op_parallelism_threads=threads)
    if not chief:
        g.kind.await_chief(job, g.graph, partial(_cancelled, job))
    # No reports of uninitialised variables where the kind waits itself (Graph.nothing_missing);
    # a worker's scaffold gets no Saver (it neither saves nor restores; Scaffold would build one).
    # One scaffold a graph: its ops are made once, and a graph reused for the next run (_graph) is
    # finalised by then.
    g.scaffold = scaffold = g.scaffold or tf.compat.v1.train.Scaffold(
        saver=g.saver if g.saver is not None else _NoSaver(), ready_op=g.nothing_missing, ready_for_local_init_op=g.nothing_missing)
    if chief or g.kind.initialises_own:
        creator = tf.compat.v1.train.ChiefSessionCreator(scaffold=scaffold, master=target, config=config,
                                                         checkpoint_dir=str(checkpoint_dir) if chief else None)
    else:
        creator = tf.compat.v1.train.WorkerSessionCreator(scaffold=scaffold, master=target, config=config)
    # MonitoredTrainingSession's, with its saving and logging hooks off (the chief saves by epoch).
    return tf.compat.v1.train.MonitoredSession(session_creator=_Kept(creator, job), hooks=[], stop_grace_period_secs=2)


def _cancelled(job: JobContext | None) -> None:
    """Raise Cancelled once the coordinator has stopped this client."""
    if job is not None and job.cancelled.is_set():
        raise Cancelled()


class _NoSaver:
    """A worker's scaffold's saver: never used, and nothing to build."""

    def build(self) -> None:
        pass


def session_fn(session):
    """Evaluation, probes and saves run on the raw session, outside the training hooks."""
    return lambda fn: session.run_step_fn(lambda step_context: fn(step_context.session))


@dataclass
class Feed:
    """One tower's epoch: the worker ``task``'s windows in ``order``, each batch augmented with
    ``jitter``'s draws (--augment) and its dropout keyed by (seed, task, epoch, step)."""

    tower: Tower
    task: int
    order: np.ndarray
    jitter: np.random.Generator


def train_epoch(session, g: Graph, data, feeds: list[Feed], steps: int, batch: int, cfg: TrainConfig,
                epoch: int, task: int | None, live: Path | None, job: JobContext | None = None,
                snapshot: bool = False, members: list[int] | None = None) -> tuple[dict, list | None]:
    """One pass over this worker's shard (the emulator: every worker's, one update a step): the
    epoch's timings and the first tower's training scores (the chief's), and with ``snapshot`` the
    values of every saved variable after the epoch's last update, fetched with that step (None
    when the epoch ended otherwise: post-local SGD's sync).  ``task``: this worker's on a cluster
    (None: no cluster), one of whose steps (the epoch's middle one) is traced to split the steps' time into
    compute and exchange (steptrace.py); ``members``: the launch's worker tasks, by rank (who a
    straggler is)."""
    distributed = task is not None
    spec = augment.parse(cfg.augment)
    t_input = t_step = loss_sum = 0.0
    correct = seen = 0
    staleness = []
    # Sync's chief: which worker each step waited for (None elsewhere: nobody waits on anyone).
    # The update first, what the forward pass makes, then what is read after the update.
    fetches = [g.train, g.xent, g.correct, g.step_before, g.step_after]
    arrivals = Arrivals(g.workers) if g.kind.times_arrivals else None
    # Post-local SGD (localsgd.py): past --local-after, steps of this worker's own, a sync that
    # averages the models after every --local-steps of them and at the epoch's end.
    local = g.local if g.local is not None and epoch > cfg.local_after else None
    if local is not None:
        fetches = [local.step, local.xent, local.correct]
        arrivals = None
        if not g.local_begun:  # this launch's first local step: the weights and Adam's moments from the ps
            session.run(g.local_start)
            g.local_begun = True
    done = 0
    after = 0
    values = None
    busy = None  # the traced step's own ops, seconds (None: no step traced)
    exchanged = 0.0  # seconds in the exchange, where the kind times it itself
    begin = live_at = time.perf_counter()
    for s in range(steps):
        if job is not None and job.cancelled.is_set():
            raise Cancelled()
        t0 = time.perf_counter()
        feed = {g.keep: cfg.keep_prob} | g.schedule
        for f in feeds:
            idx = np.sort(f.order[s * batch:(s + 1) * batch])
            feed |= {f.tower.x: augment.augment(data.x_train[idx], f.jitter, spec), f.tower.y: data.y_train[idx],
                     f.tower.noise.key: noise.key(cfg.seed, f.task, epoch, s)}
        t1 = time.perf_counter()
        if local is not None:
            _, loss, ok = session.run(fetches, feed | {g.local_done: done})
            done += 1
            if done == cfg.local_steps or s == steps - 1:
                session.run(g.local_sync, {g.local_done: done})
                done = 0
                after = session.run(g.local_step_seen) if s == steps - 1 else after
        else:
            # A step amid the others (not the one an evaluation ends) traced, unless the kind times its exchange itself.
            traced = task is not None and s == steps // 2 and not g.kind.times_exchange
            saving = snapshot and s == steps - 1
            metadata = tf.compat.v1.RunMetadata()
            trace = {"options": steptrace.OPTIONS, "run_metadata": metadata} if traced else {}
            ran = g.kind.step(session, feed, fetches[1:4], [fetches[0], fetches[4], *(g.snapshot if saving else [])], **trace)
            (loss, ok, before), (_, after, *rest) = ran.before, ran.after
            values = rest if saving else values
            if traced and task is not None:
                busy = steptrace.busy_seconds(metadata, task)
            if ran.exchange_s is not None:
                exchanged += ran.exchange_s
        t2 = time.perf_counter()
        t_input += t1 - t0
        t_step += t2 - t1
        loss_sum += float(loss) * batch
        correct += int(ok)
        seen += batch
        # Not the epoch's first step: the others start it while the chief still evaluates the last
        # epoch, so it would name the chief for the evaluation rather than for its steps.
        if arrivals is not None and s > 0 and ran.arrivals is not None:
            arrivals.add(*ran.arrivals)
        if not g.sync and distributed:
            staleness.append(int(after) - int(before) - 1)  # other workers' updates between our read and our apply
        if live is not None and t2 - live_at >= LIVE_EVERY_S:
            live_at = t2
            atomic.write_json(live, {"epoch": epoch, "epochs": cfg.epochs, "step": s + 1, "steps": steps,
                                     "global_step": int(after), "train_acc": correct / max(seen, 1), "time": time.time()})
    epoch_s = time.perf_counter() - begin
    held = arrivals.straggler(epoch_s / max(steps, 1)) if arrivals is not None else None
    compute, exchange = (t_step - exchanged, exchanged) if g.kind.times_exchange else steptrace.split(t_step, steps, busy)
    return {
        "epoch_s": epoch_s,
        "input_s": t_input,
        "compute_s": compute,
        "exchange_s": exchange,
        "train_loss": loss_sum / max(seen, 1),
        "train_acc": correct / max(seen, 1),
        "staleness_mean": float(np.mean(staleness)) if staleness else "",
        "staleness_max": int(np.max(staleness)) if staleness else "",
        "global_step": int(after) if steps else "",
        "straggler": (members[held[0]] if members else held[0]) if held else "",  # its task, as the logs name it
        "straggler_ms": round(held[1] * 1000, 1) if held else "",
    }, values


def arguments(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m picluster.jobs.har.process")
    parser.add_argument("--run-dir", required=True, type=Path)
    parser.add_argument("--launch", default="", help="this launch's id: its variables and queues are its own on the ps")
    parser.add_argument("--serve", action="store_true", help="host this worker's TensorFlow server in this process (one runtime per node)")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    """A replica in a process of its own (picluster.jobs.har.process put the bind shim in place)."""
    args = arguments(argv)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(CANCELLED))
    run = RunDir(args.run_dir.resolve())  # on a node: '.', its run directory
    return _exit_code(lambda: train(run, args.launch, args.serve, os.environ.get("TF_CONFIG")), run.path, _error)


def door_job(argv: list[str], job: JobContext) -> int:
    """A replica inside the node's resident server process, run by its door: the server serves
    this worker's task already, so the replica only connects to it."""
    args = arguments(argv)
    run = RunDir((job.cwd / args.run_dir).resolve())

    def said(exc: Exception) -> None:
        job.say(f"picluster.jobs.har.replica: error: {exc}")

    def work() -> None:
        try:
            train(run, args.launch, False, job.env.get("TF_CONFIG"), job.say, job)
        except (Cancelled, tf.errors.CancelledError, tf.errors.AbortedError):
            if not job.cancelled.is_set():
                raise
            raise SystemExit(CANCELLED) from None
        except (RuntimeError, tf.errors.OpError, ClusterError):
            if job.cancelled.is_set():  # the session (or the all-reduce's group) closed under a step: the cancel's doing
                raise SystemExit(CANCELLED) from None
            raise

    return _exit_code(work, run.path, said)


def _exit_code(work: Callable[[], None], run_dir: Path, said: Callable[[Exception], None]) -> int:
    """0, or the exit status of what went wrong, said in one line (a full disk: STORAGE_EXIT)."""
    try:
        work()
    except StorageError as exc:
        said(exc)
        return STORAGE_EXIT
    except PiclusterError as exc:
        said(exc)
        return exc.exit_code
    except OSError as exc:
        if exc.errno not in STORAGE_ERRNOS:
            raise
        said(StorageError(exc.filename or run_dir, exc))
        return STORAGE_EXIT
    return 0


def _error(exc: Exception) -> None:
    try:  # the log may be on the full disk itself: the exit status still tells the coordinator
        print(f"picluster.jobs.har.replica: error: {exc}", file=sys.stderr, flush=True)
    except OSError:
        pass


if __name__ == "__main__":  # clients start picluster.jobs.har.process, which puts the bind shim in place first
    sys.exit(main())
