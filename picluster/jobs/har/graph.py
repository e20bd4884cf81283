"""The training graph one replica builds: the model, its loss and optimiser, the update step.

Between-graph replication: every worker builds this same graph, with the variables placed on the
ps tasks by ``replica_device_setter`` (placement.py: by bytes) and its own ops on its worker task.
Sync mode adds the gradient queues of ``sync.sync_step``, one set per ps, so each ps averages its
own share; ``--ema`` a moving average that evaluation reads.  The statistics emulator (``--emulate``:
sync without a cluster) builds every worker's tower here instead, and ``sync.emulated_step`` makes
the cluster's update from them.  The dropout and the initial weights draw from noise.py's keys.
"""

import contextlib
from dataclasses import dataclass
from typing import Any

import numpy as np
import tensorflow as tf

from picluster.cluster.containers import container
from picluster.jobs.har import fusion
from picluster.jobs.har.config import TrainConfig
from picluster.jobs.har.convlstm import ConvShape, conv_logits
from picluster.jobs.har.localsgd import LocalSteps
from picluster.jobs.har.model import STEPS, Shape, channel_moments, l2_penalty, logits, standardise
from picluster.jobs.har.noise import Noise, seeded_initializers
from picluster.jobs.har.placement import ByteBalancer, check_shards, ps_groups
from picluster.jobs.har.sync import emulated_step, sync_step


def network(config: TrainConfig):
    """(shape, forward): the chosen model's shape and ``forward(x, noise) -> logits`` (noise.Noise:
    the dropout), whose new variables start from their names' seeds (noise.seeded_initializers)."""
    shape: ConvShape | Shape
    if config.model == "convlstm":
        conv = shape = ConvShape(config.layers, config.conv_filters, config.conv_kernel, config.conv_pool, config.rnn_layers,
                                 config.rnn_hidden, config.bidir, config.readout, config.conv_norm)
        build = lambda x, noise: conv_logits(x, conv, noise)
    else:
        thesis = shape = Shape(config.layers, config.residual, config.hidden, config.bidir,
                               norm=config.norm, relu_logits=config.relu_logits, window_stats=config.window_stats)
        build = lambda x, noise: logits(x, thesis, noise)
    getter = seeded_initializers(config.seed)

    def forward(x, noise: Noise):
        with tf.compat.v1.variable_scope(tf.compat.v1.get_variable_scope(), custom_getter=getter):
            return build(x, noise)

    return shape, forward


class Graph:
    def __init__(self, config: TrainConfig, task: int, data, cluster: dict | None = None, launch: str = "",
                 rank: int | None = None, workers: int | None = None) -> None:
        """task: this worker's task in ``cluster`` (where its ops run); rank: its place among the
        ``workers`` of this launch (the chief is 0), which differs from ``task`` when a run goes on
        without a lost worker's task (elastic.py); by default the task and config.replicas."""
        self.graph = tf.Graph()
        self.shape, self.forward = network(config)
        workers = self.workers = workers or config.replicas
        rank = task if rank is None else rank
        # A container per launch: a persistent cluster's ps keeps variables between sessions, and
        # a new run must not start from the last one's weights (a resumed one restores its checkpoint).
        # The coordinator drops the container when the launch's clients have stopped (containers.py).
        with self.graph.as_default(), tf.compat.v1.container(container(launch) if launch else ""):
            # The graph-level seed belongs to the graph it is set on (set on the default graph, it
            # seeded nothing).  With it, each initializer's op seed comes from its variable's name
            # (noise.py); dropout draws from the key each step feeds, not from a stateful stream.
            tf.compat.v1.set_random_seed(config.seed)
            if cluster is None:
                setter = None
                here = None
            else:
                here = f"/job:worker/task:{task}"
                spec = tf.train.ClusterSpec(cluster)
                shards = spec.num_tasks("ps")
                setter = tf.compat.v1.train.replica_device_setter(
                    cluster=spec, worker_device=here,
                    ps_strategy=ByteBalancer(shards),
                )
            with tf.compat.v1.device(setter):
                self.global_step = tf.compat.v1.train.get_or_create_global_step()
                # Start barrier: each launch of the run adds one per worker; kept in checkpoints.
                self.joined = tf.compat.v1.get_variable("workers_joined", [], tf.int64, trainable=False,
                                                        initializer=tf.compat.v1.zeros_initializer())
                self.join = self.joined.assign_add(1)
                # The chief's "every variable is initialised", for the other workers: one scalar to
                # look at.  Kept out of the global collection: the chief initialises it after all the
                # others (init_op would not wait), and checkpoints do not carry it.
                self.ready = None
                if cluster is not None:
                    self.ready = tf.compat.v1.get_variable("chief_ready", [], tf.bool, trainable=False, collections=["picluster_ready"],
                                                           initializer=tf.compat.v1.constant_initializer(True))
                    self.ready_now = tf.compat.v1.is_variable_initialized(self.ready)
                    self.ready_now.mark_used()  # the chief never asks: no "never used" warning from its graph
                    # The epoch this launch starts after, as the chief's restored checkpoint says it
                    # (its step alone does not once the workers changed): the others read it once
                    # ready, so every worker runs the same epochs.  Not in checkpoints either.
                    self.start_epoch_in = tf.compat.v1.placeholder(tf.int64, [], name="start_epoch_in")
                    self.start_epoch = tf.compat.v1.get_variable("start_epoch", trainable=False, collections=["picluster_ready"],
                                                                 initializer=self.start_epoch_in, validate_shape=True)
                self.x = tf.compat.v1.placeholder(tf.float32, [None, STEPS, self.shape.inputs], name="x")
                self.y = tf.compat.v1.placeholder(tf.int64, [None], name="y")
                self.keep = tf.compat.v1.placeholder_with_default(1.0, [], name="keep_prob")
                self.noise = Noise(self.keep)  # the training loop feeds its key every step
                # Read the step before the forward pass reads the weights: the staleness baseline.
                self.step_before = self.global_step.read_value()
                with tf.control_dependencies([self.step_before]):
                    x = fed = tf.identity(self.x)
                # The worker's device when the exchange is fused (fusion.py), None otherwise.
                fused_on = here if here is not None and config.exchange == "fused" else None
                wire = fusion.WIRES[config.wire]
                emulated = config.mode == "sync" and workers > 1 and cluster is None  # every worker's tower here
                value = (lambda v: v)
                self.weights = None
                rounded = None  # the emulator's weights as a 16-bit wire brings them
                if fused_on:
                    # Built once, reading a stand-in for each variable; once every variable is made,
                    # each stand-in reads the local copy that one fused read per ps brings.
                    stand_ins = fusion.StandIns()
                    with tf.compat.v1.variable_scope(tf.compat.v1.get_variable_scope(), custom_getter=stand_ins.getter):
                        x = _inputs(x, config, data)
                        out = self.forward(x, self.noise)
                    made = stand_ins.variables
                    self.weights = fusion.FusedWeights(made, fused_on, wire)
                    stand_ins.read(self.weights.value)
                    value = self.weights.value
                elif emulated and config.exchange == "fused" and wire != tf.float32:
                    # The workers' model reads the weights as the wire brings them: rounded, once a step.
                    rounded = fusion.Rounded(wire)
                    value = rounded.value
                    with tf.compat.v1.variable_scope(tf.compat.v1.get_variable_scope(), custom_getter=rounded.getter):
                        x = _inputs(x, config, data)
                        out = self.forward(x, self.noise)
                else:
                    x = _inputs(x, config, data)
                    out = self.forward(x, self.noise)
                self.loss, self.xent, self.correct, xent = self._losses(out, config, value)
                _, per_epoch = config.steps_per_epoch(len(data.x_train), workers)
                # Fused, the rate (from the global step) and Adam's constants are made on ps 0, where
                # the step and the updates are: made here, each would be one more transfer a step.
                on_ps = (lambda: tf.compat.v1.device("/job:ps/task:0")) if fused_on else contextlib.nullcontext
                self.sync = config.mode == "sync" and workers > 1
                self.arrivals = None  # sync, the chief: (tasks, times) of the step's gradients as ps 0 saw them
                with on_ps():
                    self.learning_rate = learning_rate(config, self.global_step, per_epoch, workers)
                    lr = self.learning_rate
                    if not self.sync and config.async_lr == "staleness" and workers > 1:
                        lr = lr / self._staleness()
                opt = tf.compat.v1.train.AdamOptimizer(lr, beta1=config.adam_beta1, beta2=config.adam_beta2)
                # The towers fed each step: this worker's, or in the emulator every worker's.
                self.towers = [Tower(self.x, self.y, self.noise)]
                if fused_on or emulated:  # with respect to the values the model read (fused: the local copies)
                    variables = tuple(tf.compat.v1.trainable_variables())
                    grads = tuple(tf.gradients(self.loss, [value(v) for v in variables]))
                else:
                    grads, variables = zip(*opt.compute_gradients(self.loss))
                if self.sync:
                    def adam(means, squares):
                        with on_ps():  # fused: on the ps, where the averaged gradients are
                            norm = tf.sqrt(tf.add_n(squares))
                            scale = config.clip_norm / tf.maximum(norm, config.clip_norm)  # clip_by_global_norm's factor
                        clipped = []
                        for v, g in zip(variables, means):
                            with tf.compat.v1.device(v.device):
                                clipped.append(g * scale)
                        with on_ps():
                            applied = opt.apply_gradients(zip(clipped, variables), global_step=self.global_step)
                        return self.weights.refresh(applied) if self.weights else applied  # then the 16-bit copies

                    if emulated:
                        others = [self._tower(config, data, w, value, rounded.getter if rounded else None)
                                  for w in range(1, workers)]
                        self.towers += [t for t, _ in others]
                        every = [grads] + [tuple(tf.gradients(loss, [value(v) for v in variables])) for _, loss in others]
                        self.train = emulated_step(every, variables, ps_groups(config.ps), config.exchange == "fused", adam, wire)
                    else:
                        self.train, self.arrivals = sync_step(grads, variables, self.global_step, rank, workers, launch, adam,
                                                               fused_on, wire=wire)
                else:
                    clipped, _ = tf.clip_by_global_norm(grads, config.clip_norm)  # where the gradients are
                    if fused_on:
                        clipped = fusion.send(clipped, variables, fused_on, wire)
                    with on_ps():
                        self.train = opt.apply_gradients(zip(clipped, variables), global_step=self.global_step)
                    if self.weights:
                        self.train = self.weights.refresh(self.train)
                if rounded is not None:  # evaluated on the float32 weights, as the evaluator restores them
                    with tf.compat.v1.variable_scope(tf.compat.v1.get_variable_scope(), reuse=True):
                        x = _inputs(fed, config, data)
                        out = self.forward(x, Noise(1.0))
                    xent = tf.nn.sparse_softmax_cross_entropy_with_logits(labels=self.y, logits=out)
                if config.ema:
                    # Shadow weights beside the weights (on the ps); only a step that applies an
                    # update moves them: every worker's in async mode, the chief's in sync mode.
                    ema = tf.compat.v1.train.ExponentialMovingAverage(config.ema, num_updates=self.global_step)
                    if self.sync and rank != 0:
                        ema.apply(variables)
                    else:
                        with tf.control_dependencies([self.train]):
                            self.train = ema.apply(variables)
                    out = _averaged_logits(ema, x, self.forward)
                    xent = tf.nn.sparse_softmax_cross_entropy_with_logits(labels=self.y, logits=out)
                self.pred = tf.argmax(out, 1)  # evaluation: the averaged weights when --ema
                self.xent_sum = tf.reduce_sum(xent)
                with tf.control_dependencies([self.train]):
                    self.step_after = self.global_step.read_value()
                self.local: LocalSteps | None = None  # post-local SGD's ops (localsgd.py), with --local-steps above 1
                if self.sync and fused_on and config.local_steps > 1:
                    self._local_steps(made, opt, fused_on, config, per_epoch, workers, rank, launch, data, on_ps)
                if self.ready is not None:
                    self._announce(rank == 0)
            # A session's reports of uninitialised variables, replaced on a cluster (open_session):
            # the chief's announce comes after every variable is initialised or restored, and the
            # others open their sessions only once its flag is up; each report asks the ps about
            # every variable, twice a session.  None: TensorFlow's own reports (a process alone).
            self.nothing_missing = tf.constant([], tf.string, name="nothing_missing") if self.ready is not None else None
            self.variables = tf.compat.v1.trainable_variables()
            if cluster is not None:
                check_shards(tf.train.ClusterSpec(cluster).num_tasks("ps"), tf.compat.v1.global_variables())
            self.parameters = int(sum(np.prod(v.shape) for v in self.variables))
            # Only what this replica runs is built: each piece below costs a Pi-shaped host about
            # half a second, and the chief's graph is on every worker's path to the first step.
            # Only the chief of a launch (or a process alone) saves and restores; the others read
            # what it initialised or restored.
            keeps = cluster is None or rank == 0
            # The last two: a resume's fallback when the newest is damaged (checkpoints.py); an
            # evaluator beside the coordinator gets each epoch's handed over (trained.hand_over).
            self.saver: Any = tf.compat.v1.train.Saver(max_to_keep=2) if keeps else None
            # The best epoch's weights: kept and scored where validation runs, not by a chief whose
            # evaluator runs beside the coordinator (that one builds its graph alone).
            evaluates = cluster is None or config.evaluator != "coordinator"
            self.best_saver: Any = tf.compat.v1.train.Saver(max_to_keep=1) if keeps and evaluates else None
            # What the Saver saves, read again once a step's update has landed: the chief fetches
            # them with an epoch's last step, for a checkpoint written beside the training (saving.py).
            self.saved = tf.compat.v1.global_variables()
            self.snapshot = []
            if keeps and not evaluates:
                with tf.control_dependencies([self.train]):
                    self.snapshot = [tf.identity(v.read_value()) for v in self.saved]

    def _announce(self, chief: bool) -> None:
        """The start of a launch, each side in one run (each run of a new kind costs a Pi-shaped
        host a tenth of a second or more to set up).  The chief's ``announce`` (fed start_epoch_in):
        the 16-bit copies from the weights it initialised or restored, the epoch this launch
        starts after, the barrier's count from 0 whatever a checkpoint restored (an earlier launch
        may have had more or fewer workers), its own join, and only then the one flag the other
        workers wait for; it returns the count after its join.  The others' ``arrive``: (the step,
        their join's count, the epoch to start after), once they have seen the flag."""
        assert self.ready is not None  # on a cluster
        first = [self.start_epoch.initializer, self.joined.assign(0, read_value=False)]
        if self.weights is not None and self.weights.start is not None:
            first.append(self.weights.start)
        if chief:
            with tf.control_dependencies(first):
                mine = self.joined.assign_add(1)
            with tf.control_dependencies([mine]):
                flag = self.ready.initializer
            with tf.control_dependencies([flag]):
                self.announce = tf.identity(mine)
        else:
            self.arrive = [self.global_step.read_value(), self.join, self.start_epoch.read_value()]

    def _tower(self, config: TrainConfig, data, worker: int, value, getter=None):
        """(the emulated ``worker``'s tower, its training loss): the model again, on the worker's
        own windows and dropout key, reading the same variables (through ``getter``: as the wire
        brings them, ``value(v)`` each)."""
        with tf.compat.v1.name_scope(f"worker_{worker}"):
            tower = Tower(tf.compat.v1.placeholder(tf.float32, self.x.shape, name="x"),
                          tf.compat.v1.placeholder(tf.int64, self.y.shape, name="y"), Noise(self.keep))
            with tf.compat.v1.variable_scope(tf.compat.v1.get_variable_scope(), reuse=True, custom_getter=getter):
                out = self.forward(_inputs(tower.x, config, data), tower.noise)
            return tower, self._losses(out, config, value, tower.y)[0]

    def _losses(self, out, config: TrainConfig, value, y=None):
        """(training loss, its cross-entropy, correct predictions, each window's plain cross-entropy)
        of the logits ``out`` for the labels ``y`` (the graph's own); ``value``: the tensor holding a
        variable's value (its local copy)."""
        y = self.y if y is None else y
        xent = tf.nn.sparse_softmax_cross_entropy_with_logits(labels=y, logits=out)
        if config.label_smoothing:  # the training loss only; evaluation's stays the plain one
            smooth = config.label_smoothing
            target = tf.one_hot(y, self.shape.classes) * (1.0 - smooth) + smooth / self.shape.classes
            mean = tf.reduce_mean(tf.nn.softmax_cross_entropy_with_logits(labels=target, logits=out))
        else:
            mean = tf.reduce_mean(xent)
        loss = mean + config.l2 * l2_penalty(tf.compat.v1.trainable_variables(), value)
        correct = tf.reduce_sum(tf.cast(tf.equal(tf.argmax(out, 1), y), tf.int64))
        return loss, mean, correct, xent

    def _local_steps(self, made, opt, here, config, per_epoch, workers, rank, launch, data, on_ps) -> None:
        """The local phase's steps and its model-averaging sync (localsgd.py)."""
        variables = tuple(tf.compat.v1.trainable_variables())
        x = self.x

        def loss_of(getter, value):
            with tf.compat.v1.variable_scope(tf.compat.v1.get_variable_scope(), reuse=True, custom_getter=getter):
                out = self.forward(_inputs(x, config, data), self.noise)
            loss, mean, correct, _ = self._losses(out, config, value)
            return loss, mean, correct

        # The rate of the step the worker is at: the global step at the last sync plus its own steps.
        self.local_done = tf.compat.v1.placeholder(tf.int64, [], name="local_done")
        with tf.compat.v1.device(here):
            self.global_step_seen = tf.compat.v1.get_variable("local_global_step", [], tf.int64, trainable=False,
                                                              collections=[tf.compat.v1.GraphKeys.LOCAL_VARIABLES],
                                                              initializer=tf.compat.v1.zeros_initializer())
            rate = learning_rate(config, self.global_step_seen + self.local_done, per_epoch, workers)
        if rank != 0:
            # Only the chief's graph applies Adam (sync.sync_step), so only it holds the names of
            # Adam's moments on the ps; a launch's first local step reads them on every worker.
            # Built, never run: it names the same variables on the ps, which the chief initialises.
            with on_ps():
                opt.apply_gradients([(tf.zeros_like(v), v) for v in variables])
        local = self.local = LocalSteps(made, opt, here, config, rate, loss_of, variables)
        self.local_begun = False  # the training loop runs local_start once a launch, before its first local step
        self.local_step_seen = self.global_step_seen.read_value()

        def average(means, _squares):
            adds = []
            for v, change in zip(variables, means):
                with tf.compat.v1.device(v.device):
                    adds.append(v.assign_add(change, read_value=False))
            with on_ps():
                counted = self.global_step.assign_add(self.local_done, read_value=False)  # the steps it covers
            return tf.group(*adds, counted)

        synced, _ = sync_step(local.trainable_changes(variables), variables, self.global_step, rank, workers, launch,
                               average, here, tag="avg_")
        with tf.control_dependencies([synced]):  # then every worker reads the averaged weights
            self.local_sync = tf.group(local.pull(), self.global_step_seen.assign(self.global_step.read_value()))
        self.local_start = tf.group(local.start(), self.global_step_seen.assign(self.global_step.read_value()))

    def _staleness(self):
        """How many updates landed since this step read its weights (at least 1): an async update's
        learning rate is divided by it, so a stale gradient moves the weights less (Zhang et al.,
        "Staleness-aware Async-SGD", 2016)."""
        now = self.global_step.read_value()
        return tf.cast(tf.maximum(tf.constant(1, tf.int64), now - self.step_before), tf.float32)


@dataclass(frozen=True)
class Tower:
    """What one worker's step is fed: its windows, their labels and its dropout key (noise.Noise)."""

    x: tf.Tensor
    y: tf.Tensor
    noise: Noise


def _inputs(x, config: TrainConfig, data):
    """The network's input: ``x`` standardised by the training set's moments (kept as variables)."""
    return standardise(x, *channel_moments(data.x_train)) if config.standardise else x


def learning_rate(config: TrainConfig, global_step, per_epoch: int, workers: int):
    """The rate of each update: --lr times lr_scale (for the windows one update sees), reached
    linearly over --warmup-updates updates or --warmup-epochs epochs (a large batch's first steps
    diverge at the full rate: Goyal et al., 2017), then constant or cosine-decayed to 0 at the
    last epoch."""
    base = config.learning_rate
    peak = base * config.lr_scale(workers)
    step = tf.cast(global_step, tf.float32)
    lr = tf.constant(peak, tf.float32)
    warm = config.warmup_updates + config.warmup_epochs * per_epoch  # one of the two is 0
    if warm > 0 and peak != base:
        lr = base + (peak - base) * tf.minimum(1.0, step / warm)
    if config.lr_schedule == "cosine":
        total = float(max(1, per_epoch * config.epochs))
        lr = lr * 0.5 * (1.0 + tf.cos(np.pi * tf.minimum(1.0, step / total)))
    return lr


def _averaged_logits(ema, x, forward):
    """The same network reading each weight's moving average: the model that is evaluated."""
    def averaged(getter, name, *args, **kwargs):
        var = getter(name, *args, **kwargs)
        average = ema.average(var)
        return var if average is None else average  # the input moments have none: they never move

    with tf.compat.v1.variable_scope(tf.compat.v1.get_variable_scope(), reuse=True, custom_getter=averaged):
        return forward(x, Noise(1.0))


