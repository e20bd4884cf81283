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
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np

# Before TensorFlow is imported (by graph.py): its C++ start-up chatter goes to the log otherwise.
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import tensorflow as tf

from picluster.cluster.door import JobContext
from picluster.jobs.har import augment, checkpoints, exchange, metrics, noise, steptrace
from picluster.jobs.har.chief import Begun, Chief, Scoring, per_ps, save
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
    chief = rank == 0
    # Start-up, part by part, in the log (it counts in the wall time to an accuracy): the process
    # (interpreter and imports; a door's client runs in a process that has them already), ...
    times = {"t0": time.perf_counter(), "process": time.time() - (job.started if job is not None else _process_started())}

    if cfg.deterministic:
        tf.config.experimental.enable_op_determinism()
    data, held = read_data(cfg)
    times["data"] = time.perf_counter()
    tf.compat.v1.disable_eager_execution()
    server = serve_task(cluster, task) if serve and cluster else None  # noqa: F841  (serves while it lives)
    place = Place(cluster, task, rank, workers, launch, tuple(members) if cluster else ())
    g = _graph(cfg, data, place)
    kind = g.kind  # how this replica's updates meet
    steps, global_per_epoch = cfg.steps_per_epoch(len(data.x_train), workers)

    restore = None
    if chief:  # the newest intact checkpoint, or a refusal when the run has records but none is intact
        rows = metrics.read_rows(run.metrics)
        restore = checkpoints.prepare(run.checkpoints, has_records=bool(rows), last_row=max((int(r["epoch"]) for r in rows if str(r.get("epoch", "")).isdigit()), default=None))
    if job is not None:
        job.on_cancel(kind.close)  # a step blocked in the exchange returns
    with g.graph.as_default(), contextlib.closing(kind):
        times["graph"] = time.perf_counter()
        session = open_session(g, cfg, run.checkpoints, job, chief)
        with_raw = session_fn(session)
        start_step = start_epoch = 0
        if chief:
            start_step = int(with_raw(lambda s: s.run(g.global_step)))
            # The epoch the restored checkpoint ends, as recorded beside it; a run from before the
            # record (its workers never changed) counts it from the step.
            recorded = checkpoints.epoch_of(run.checkpoints, restore.checkpoint if restore is not None else None)
            start_epoch = recorded if recorded is not None else start_step // global_per_epoch
        times["session"] = time.perf_counter()
        # Every worker of this launch on the same weights, step and epoch (the kind's own way).
        start_step, start_epoch = kind.start(lambda fetches, feed=None: with_raw(lambda s: s.run(fetches, feed)), g, start_step, start_epoch,
                                             partial(_cancelled, job))
        g.schedule_at(start_epoch, start_step)
        say(_startup_line(task, times, held, members if cluster and members != list(range(len(cluster["worker"]))) else None))
        if restore is not None and (restore.checkpoint or restore.damaged):
            checkpoints.write_note(run.resume_note, restore, launch, start_epoch, start_step)
            say(f"replica {task}: {restore.describe()}")
        loop = Loop(session, g, data, cfg, steps, cfg.worker_batch(workers), task if cluster else None, run.live if chief else None, job,
                    members if cluster else None)
        # The evaluation's duties: the chief's own between epochs, or (--evaluator coordinator) a
        # process beside the coordinator's, which reads what ``trained`` records after each epoch.
        beside = chief and cluster is not None and cfg.evaluator == "coordinator"
        _epochs(loop, run, Begun(start_epoch, start_step, restore), Duties(task, launch, chief, beside, with_raw), say)
        session.close()


def _startup_line(task: int, times: dict, held: bool, members: list[int] | None) -> str:
    """The replica's start-up, part by part: the process, the data set (``held``: kept by the node's
    server from an earlier run), the graph, the session and the barrier; ``members``: the launch's
    worker tasks when some sit it out."""
    return (f"replica {task}: start-up: process {times['process']:.1f} s, data {times['data'] - times['t0']:.1f} s{' (held)' if held else ''}, "
            f"graph {times['graph'] - times['data']:.1f} s, session {times['session'] - times['graph']:.1f} s, "
            f"barrier {time.perf_counter() - times['session']:.1f} s"
            + (f" ({len(members)} workers, tasks {','.join(map(str, members))})" if members is not None else ""))


@dataclass(frozen=True)
class Duties:
    """This worker's part beyond its steps: its task, the launch, whether it is the launch's chief,
    and whether the evaluation runs beside the coordinator (``beside``: the chief then hands each
    epoch's weights over, trained.py); ``with_raw``: the raw session (session_fn)."""

    task: int
    launch: str
    chief: bool
    beside: bool
    with_raw: Callable


def _epochs(loop: "Loop", run: RunDir, begun: Begun, duties: Duties, say: Callable[[str], None]) -> None:
    """The epochs from the one after ``begun``'s to the last, each followed by this worker's
    status, and by the chief's evaluation and checkpoint (its own), or its hand-over to the
    evaluator beside the coordinator; stopped early when the chief's evaluation says so (the target)."""
    cfg, g, data, with_raw = loop.cfg, loop.g, loop.data, duties.with_raw
    tasks = range(g.workers) if cfg.emulate else [g.kind.place.rank]  # the towers fed: this worker's, or (--emulate) every worker's
    shards = [shard(len(data.x_train), t, g.workers, cfg.seed) for t in tasks]
    chief = Chief(run, cfg, Scoring(g, data, with_raw), begun, say) if duties.chief and not duties.beside else None
    trained = Trained(run.trained, duties.launch) if duties.beside else None
    snapshots = Snapshots(g.saved, run.checkpoints, run.to_evaluate, trained) if trained is not None else None
    if trained is not None:
        clear_handed_over(run.to_evaluate)
        trained.add(begin=True, start_epoch=begun.epoch, start_step=begun.step, began=time.time(), per_ps=per_ps(g), data=data.checksum,
                    restore={"checkpoint": begun.restore.checkpoint, "damaged": begun.restore.damaged} if begun.restore else None)
    status_file, started = run.worker_status(duties.task), time.time()
    # Every checkpoint begun beside the steps is written before the loop is left, a cancel's way too.
    with snapshots if snapshots is not None else contextlib.nullcontext():
        for epoch in range(begun.epoch + 1, cfg.epochs + 1):
            if loop.session.should_stop():
                break
            # Input order and augmentation: seeded by (seed, epoch, task), so a resumed epoch is the same too.
            feeds = [Feed(tower, t, mine[np.random.default_rng([cfg.seed, epoch, t]).permutation(len(mine))],
                          np.random.default_rng([cfg.seed, epoch, t, 1])) for tower, t, mine in zip(g.towers, tasks, shards)]
            stats, values = train_epoch(loop, feeds, epoch, snapshot=snapshots is not None)
            # What this worker did last, for the coordinator.
            atomic.write_json(status_file, {"epoch": epoch, "time": time.time(), "elapsed_s": time.time() - started, **stats})
            if trained is not None and snapshots is not None and values is not None:
                # The weights of the epoch's last update, fetched with its step, for the evaluator and a
                # resume: written by the chief's thread while the next epoch's steps go on (saving.py).
                snapshots.take(values, int(stats["global_step"]), epoch, stats)
            elif trained is not None:
                # Post-local SGD's epochs end in a sync of models, not an update: saved here.  In sync
                # mode nothing moves the weights until this chief's next step applies the next update.
                step = int(with_raw(lambda s: s.run(g.global_step)))
                save(with_raw, g.saver, run.checkpoints / "model.ckpt", step, epoch,
                     recorded=partial(trained.handed_over, folder=run.to_evaluate, epoch=epoch, **stats))
            elif chief is not None and chief.end_epoch(epoch, stats):
                break
    if trained is not None:
        trained.add(end=True)
    if chief is not None:
        chief.finish()


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


@dataclass
class Loop:
    """What each epoch of a replica's loop runs with: the session and graph, the data set and
    options, the steps an epoch and each tower's windows a step (``batch``); ``task``: this
    worker's on a cluster (None: no cluster), one of whose steps an epoch (the middle one) is traced
    to split the steps' time into compute and exchange (steptrace.py); ``live``: the chief's
    live.json (None elsewhere); ``job``: the door's (its cancel stops the epoch); ``members``: the
    launch's worker tasks, by rank (who a straggler is)."""

    session: Any
    g: Graph
    data: Any
    cfg: TrainConfig
    steps: int
    batch: int
    task: int | None = None
    live: Path | None = None
    job: JobContext | None = None
    members: list[int] | None = None


@dataclass
class _Tally:
    """An epoch's sums so far, and what its last step left."""

    input_s: float = 0.0
    step_s: float = 0.0
    loss_sum: float = 0.0
    correct: int = 0
    seen: int = 0
    staleness: list = field(default_factory=list)
    after: Any = 0  # the global step after the last step
    busy: float | None = None  # the traced step's own ops, seconds (None: no step traced)
    exchanged: float = 0.0  # seconds in the exchange, where the kind times it itself
    values: list | None = None  # the saved variables after the epoch's last update (snapshot)
    local_done: int = 0  # post-local SGD: the local steps since its last sync


def train_epoch(loop: Loop, feeds: list[Feed], epoch: int, snapshot: bool = False) -> tuple[dict, list | None]:
    """One pass over this worker's shard (the emulator: every worker's, one update a step): the
    epoch's timings and the first tower's training scores (the chief's), and with ``snapshot`` the
    values of every saved variable after the epoch's last update, fetched with that step (None
    when the epoch ended otherwise: post-local SGD's sync)."""
    g, cfg, steps, batch = loop.g, loop.cfg, loop.steps, loop.batch
    spec = augment.parse(cfg.augment)
    tally = _Tally()
    # Sync's chief: which worker each step waited for (None elsewhere: nobody waits on anyone).
    arrivals = Arrivals(g.workers) if g.kind.times_arrivals else None
    # Post-local SGD (localsgd.py): past --local-after, steps of this worker's own, a sync that
    # averages the models after every --local-steps of them and at the epoch's end.
    local = g.local is not None and epoch > cfg.local_after
    if local:
        arrivals = None
        if not g.local_begun:  # this launch's first local step: the weights and Adam's moments from the ps
            loop.session.run(g.local_start)
            g.local_begun = True
    begin = live_at = time.perf_counter()
    for s in range(steps):
        if loop.job is not None and loop.job.cancelled.is_set():
            raise Cancelled()
        t0 = time.perf_counter()
        feed = {g.keep: cfg.keep_prob} | g.schedule
        for f in feeds:
            idx = np.sort(f.order[s * batch:(s + 1) * batch])
            feed |= {f.tower.x: augment.augment(loop.data.x_train[idx], f.jitter, spec), f.tower.y: loop.data.y_train[idx],
                     f.tower.noise.key: noise.key(cfg.seed, f.task, epoch, s)}
        t1 = time.perf_counter()
        before: Any
        if local:
            (loss, ok), before, ran = _local_step(loop, feed, s, tally), None, None
        else:
            ran = _exchange_step(loop, feed, s, snapshot and s == steps - 1, tally)
            loss, ok, before = ran.before
        t2 = time.perf_counter()
        tally.input_s += t1 - t0
        tally.step_s += t2 - t1
        tally.loss_sum += float(loss) * batch
        tally.correct += int(ok)
        tally.seen += batch
        # Not the epoch's first step: the others start it while the chief still evaluates the last
        # epoch, so it would name the chief for the evaluation rather than for its steps.
        if arrivals is not None and s > 0 and ran is not None and ran.arrivals is not None:
            arrivals.add(*ran.arrivals)
        if not g.sync and loop.task is not None:
            tally.staleness.append(int(tally.after) - int(before) - 1)  # other workers' updates between our read and our apply
        if loop.live is not None and t2 - live_at >= LIVE_EVERY_S:
            live_at = t2
            atomic.write_json(loop.live, {"epoch": epoch, "epochs": cfg.epochs, "step": s + 1, "steps": steps, "global_step": int(tally.after),
                                          "train_acc": tally.correct / max(tally.seen, 1), "time": time.time()})
    return _epoch_stats(loop, tally, time.perf_counter() - begin, arrivals), tally.values


def _local_step(loop: Loop, feed: dict, s: int, tally: _Tally) -> tuple:
    """One of post-local SGD's own steps, and its sync after every --local-steps of them and at the
    epoch's end: (loss, correct)."""
    g, session, local = loop.g, loop.session, loop.g.local
    assert local is not None
    _, loss, ok = session.run([local.step, local.xent, local.correct], feed | {g.local_done: tally.local_done})
    tally.local_done += 1
    if tally.local_done == loop.cfg.local_steps or s == loop.steps - 1:
        session.run(g.local_sync, {g.local_done: tally.local_done})
        tally.local_done = 0
        if s == loop.steps - 1:
            tally.after = session.run(g.local_step_seen)
    return loss, ok


def _exchange_step(loop: Loop, feed: dict, s: int, saving: bool, tally: _Tally):
    """One step through the kind's exchange (Exchange.step): its ``before`` is (loss, correct, the
    global step read before it); with ``saving``, the saved variables fetched after its update.
    A step amid the others (not the one an evaluation ends) is traced, unless the kind times its
    exchange itself."""
    g = loop.g
    traced = loop.task is not None and s == loop.steps // 2 and not g.kind.times_exchange
    metadata = tf.compat.v1.RunMetadata()
    trace = {"options": steptrace.OPTIONS, "run_metadata": metadata} if traced else {}
    # The update first, what the forward pass makes, then what is read after the update.
    ran = g.kind.step(loop.session, feed, [g.xent, g.correct, g.step_before], [g.train, g.step_after, *(g.snapshot if saving else [])], **trace)
    _, tally.after, *rest = ran.after
    if saving:
        tally.values = rest
    if traced and loop.task is not None:
        tally.busy = steptrace.busy_seconds(metadata, loop.task)
    if ran.exchange_s is not None:
        tally.exchanged += ran.exchange_s
    return ran


def _epoch_stats(loop: Loop, tally: _Tally, epoch_s: float, arrivals: Arrivals | None) -> dict:
    """The epoch's row of timings and training scores (metrics.py's columns)."""
    g, steps, members = loop.g, loop.steps, loop.members
    held = arrivals.straggler(epoch_s / max(steps, 1)) if arrivals is not None else None
    compute, exchanged = (tally.step_s - tally.exchanged, tally.exchanged) if g.kind.times_exchange else steptrace.split(tally.step_s, steps, tally.busy)
    return {
        "epoch_s": epoch_s,
        "input_s": tally.input_s,
        "compute_s": compute,
        "exchange_s": exchanged,
        "train_loss": tally.loss_sum / max(tally.seen, 1),
        "train_acc": tally.correct / max(tally.seen, 1),
        "staleness_mean": float(np.mean(tally.staleness)) if tally.staleness else "",
        "staleness_max": int(np.max(tally.staleness)) if tally.staleness else "",
        "global_step": int(tally.after) if steps else "",
        "straggler": (members[held[0]] if members else held[0]) if held else "",  # its task, as the logs name it
        "straggler_ms": round(held[1] * 1000, 1) if held else "",
    }


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
