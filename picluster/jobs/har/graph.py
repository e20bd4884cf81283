"""The training graph one replica builds: the model, its loss and optimiser, the update step.

Between-graph replication: every worker builds this same graph, with the variables placed on the
ps tasks by ``replica_device_setter`` and its own ops on its worker task.  Several ps tasks share
the variables by bytes, not by count (``GreedyLoadBalancingStrategy``: round robin put every
weight matrix on one ps and every bias on another).  Sync mode adds the gradient queues of
``_sync_step``, one set per ps, so each ps averages its own share; ``--ema`` a moving average that
evaluation reads; every replica also gets a probe that times moving the weights, for the epoch's
exchange figure.
"""

import contextlib

import numpy as np
import tensorflow as tf

from picluster.cluster.containers import container
from picluster.jobs.har import fusion
from picluster.jobs.har.config import TrainConfig
from picluster.jobs.har.convlstm import ConvShape, conv_logits
from picluster.jobs.har.localsgd import LocalSteps
from picluster.jobs.har.model import STEPS, Shape, channel_moments, l2_penalty, logits, standardise
from picluster.util.errors import UsageError

# Each worker's graph-level seed: the chief's (task 0, which initialises the weights) is the
# seed itself, as in a standalone run; the others get their own dropout streams.
TASK_SEED_STRIDE = 1_000_003


def network(config: TrainConfig):
    """(shape, forward): the chosen model's shape and ``forward(x, keep_prob) -> logits``."""
    if config.model == "convlstm":
        conv = ConvShape(config.layers, config.conv_filters, config.conv_kernel, config.conv_pool, config.rnn_layers,
                         config.rnn_hidden, config.bidir, config.readout, config.conv_norm)
        return conv, lambda x, keep: conv_logits(x, conv, keep)
    thesis = Shape(config.layers, config.residual, config.hidden, config.bidir,
                   norm=config.norm, relu_logits=config.relu_logits, window_stats=config.window_stats)
    return thesis, lambda x, keep: logits(x, thesis, keep)


class Graph:
    def __init__(self, config: TrainConfig, task: int, data, cluster: dict | None = None, launch: str = "") -> None:
        self.graph = tf.Graph()
        self.shape, self.forward = network(config)
        workers = self.workers = 1 if config.standalone else config.workers
        # A container per launch: a persistent cluster's ps keeps variables between sessions, and
        # a new run must not start from the last one's weights (a resumed one restores its checkpoint).
        # The coordinator drops the container when the launch's clients have stopped (containers.py).
        with self.graph.as_default(), tf.compat.v1.container(container(launch) if launch else ""):
            # The graph-level seed belongs to the graph it is set on: set on the default graph
            # (as it was until issue 13), it seeded nothing, and initial weights and dropout masks
            # changed from run to run.  Set first, so every op's seed is the same in every run.
            tf.compat.v1.set_random_seed(config.seed + TASK_SEED_STRIDE * task)
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
                self.x = tf.compat.v1.placeholder(tf.float32, [None, STEPS, self.shape.inputs], name="x")
                self.y = tf.compat.v1.placeholder(tf.int64, [None], name="y")
                self.keep = tf.compat.v1.placeholder_with_default(1.0, [], name="keep_prob")
                # Read the step before the forward pass reads the weights: the staleness baseline.
                self.step_before = self.global_step.read_value()
                with tf.control_dependencies([self.step_before]):
                    x = tf.identity(self.x)
                # The worker's device when the exchange is fused (fusion.py), None otherwise.
                fused_on = here if here is not None and config.exchange == "fused" else None
                value = (lambda v: v)
                self.weights = None
                if fused_on:
                    # Built once to make the variables (those ops never run), then again on the
                    # local copies one fused read per ps brings.
                    before = {v.name for v in tf.compat.v1.global_variables()}
                    with tf.compat.v1.name_scope("made"):
                        self.forward(_inputs(x, config, data), self.keep)
                    made = [v for v in tf.compat.v1.global_variables() if v.name not in before]
                    self.weights = fusion.FusedWeights(made, fused_on)
                    value = self.weights.value
                    with tf.compat.v1.variable_scope(tf.compat.v1.get_variable_scope(), reuse=True,
                                                     custom_getter=self.weights.getter):
                        x = _inputs(x, config, data)
                        out = self.forward(x, self.keep)
                else:
                    x = _inputs(x, config, data)
                    out = self.forward(x, self.keep)
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
                opt = tf.compat.v1.train.AdamOptimizer(lr, beta1=config.adam_beta1)
                if fused_on:  # with respect to the local copies: computed here, sent fused
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
                            return opt.apply_gradients(zip(clipped, variables), global_step=self.global_step)

                    self.train, self.arrivals = _sync_step(grads, variables, self.global_step, task, workers, launch, adam,
                                                           fused_on)
                else:
                    clipped, _ = tf.clip_by_global_norm(grads, config.clip_norm)  # where the gradients are
                    if fused_on:
                        clipped = fusion.send(clipped, variables, fused_on)
                    with on_ps():
                        self.train = opt.apply_gradients(zip(clipped, variables), global_step=self.global_step)
                if config.ema:
                    # Shadow weights beside the weights (on the ps); only a step that applies an
                    # update moves them: every worker's in async mode, the chief's in sync mode.
                    ema = tf.compat.v1.train.ExponentialMovingAverage(config.ema, num_updates=self.global_step)
                    if self.sync and task != 0:
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
                    self._local_steps(made, opt, fused_on, config, per_epoch, workers, task, launch, data, on_ps)
            self.variables = tf.compat.v1.trainable_variables()
            if cluster is not None:
                _check_shards(tf.train.ClusterSpec(cluster).num_tasks("ps"), tf.compat.v1.global_variables())
            self.parameters = int(sum(np.prod(v.shape) for v in self.variables))
            # The last two: a resume's fallback when the newest is damaged (checkpoints.py); an
            # evaluator beside the coordinator gets each epoch's handed over (trained.hand_over).
            self.saver = tf.compat.v1.train.Saver(max_to_keep=2)
            self.best_saver = tf.compat.v1.train.Saver(max_to_keep=1)
            self._exchange_probe(here)

    def _losses(self, out, config: TrainConfig, value):
        """(training loss, its cross-entropy, correct predictions, each window's plain cross-entropy)
        of the logits ``out``; ``value``: the tensor holding a variable's value (its local copy)."""
        xent = tf.nn.sparse_softmax_cross_entropy_with_logits(labels=self.y, logits=out)
        if config.label_smoothing:  # the training loss only; evaluation's stays the plain one
            smooth = config.label_smoothing
            target = tf.one_hot(self.y, self.shape.classes) * (1.0 - smooth) + smooth / self.shape.classes
            mean = tf.reduce_mean(tf.nn.softmax_cross_entropy_with_logits(labels=target, logits=out))
        else:
            mean = tf.reduce_mean(xent)
        loss = mean + config.l2 * l2_penalty(tf.compat.v1.trainable_variables(), value)
        correct = tf.reduce_sum(tf.cast(tf.equal(tf.argmax(out, 1), self.y), tf.int64))
        return loss, mean, correct, xent

    def _local_steps(self, made, opt, here, config, per_epoch, workers, task, launch, data, on_ps) -> None:
        """The local phase's steps and its model-averaging sync (localsgd.py)."""
        variables = tuple(tf.compat.v1.trainable_variables())
        x = self.x

        def loss_of(getter, value):
            with tf.compat.v1.variable_scope(tf.compat.v1.get_variable_scope(), reuse=True, custom_getter=getter):
                out = self.forward(_inputs(x, config, data), self.keep)
            loss, mean, correct, _ = self._losses(out, config, value)
            return loss, mean, correct

        # The rate of the step the worker is at: the global step at the last sync plus its own steps.
        self.local_done = tf.compat.v1.placeholder(tf.int64, [], name="local_done")
        with tf.compat.v1.device(here):
            self.global_step_seen = tf.compat.v1.get_variable("local_global_step", [], tf.int64, trainable=False,
                                                              collections=[tf.compat.v1.GraphKeys.LOCAL_VARIABLES],
                                                              initializer=tf.compat.v1.zeros_initializer())
            rate = learning_rate(config, self.global_step_seen + self.local_done, per_epoch, workers)
        if task != 0:
            # Only the chief's graph applies Adam (_sync_step), so only it holds the names of
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

        synced, _ = _sync_step(local.trainable_changes(variables), variables, self.global_step, task, workers, launch,
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

    def _exchange_probe(self, here) -> None:
        """Pull every weight to this worker and push a same-sized zero update back, as a step
        moves them (fused or variable by variable)."""
        if here is None:
            self.pull = self.push = self.noop = None
            self.zeros = {}
            return
        with tf.device(here):
            self.noop = tf.constant(0.0) + tf.compat.v1.placeholder_with_default(0.0, [])
            read = self.weights.flats if self.weights else self.variables
            self.pull = tf.add_n([tf.reduce_sum(t) for t in read])
            self.zeros = {v: tf.compat.v1.placeholder(v.dtype.base_dtype, v.shape) for v in self.variables}
        updates = list(self.zeros.values())
        if self.weights:
            updates = fusion.send(updates, self.variables, here)
        self.push = tf.group(*[v.assign_add(u, read_value=False) for v, u in zip(self.variables, updates)])
        self.zero_values = {z: np.zeros(v.shape, np.float32) for v, z in self.zeros.items()}


class ByteBalancer:
    """replica_device_setter's ps_strategy: each variable to the ps task holding the fewest bytes so
    far (the greedy rule of TF 1's GreedyLoadBalancingStrategy, which TF 2 no longer exports).
    Every worker builds the same graph in the same order, so all agree on the placement."""

    def __init__(self, tasks: int) -> None:
        self.load = [0] * tasks

    def __call__(self, op) -> int:
        shape = tf.TensorShape(op.get_attr("shape"))
        size = shape.num_elements() if shape.is_fully_defined() else 1
        task = min(range(len(self.load)), key=lambda t: (self.load[t], t))
        self.load[task] += max(1, size) * tf.as_dtype(op.get_attr("dtype")).size
        return task


def _inputs(x, config: TrainConfig, data):
    """The network's input: ``x`` standardised by the training set's moments (kept as variables)."""
    return standardise(x, *channel_moments(data.x_train)) if config.standardise else x


def _check_shards(tasks: int, variables) -> None:
    """Every ps task must hold a share: an empty one would be started, waited for and never used."""
    used = {v.device for v in variables}
    empty = [t for t in range(tasks) if f"/job:ps/task:{t}" not in used]
    if empty:
        raise UsageError(f"--ps {tasks} leaves ps task {empty[0]} without variables (this model has {len(used)} "
                         f"to place); use --ps {len(used)} or fewer")


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
        return forward(x, 1.0)


def _sync_step(grads, variables, global_step, task, workers, launch, apply, fused_on=None, tag=""):
    """One synchronous step: every worker's gradient, averaged, applied once by the chief.

    Per ps task, each worker puts the gradients of that ps's variables in its own one-slot queue
    there and then waits for a token; the chief takes one gradient from every queue, each ps
    averages its own share (the work is spread as the bytes are), the chief applies the means
    (``apply(means, squares)``: the means in the order of ``variables`` and each ps's sum of their
    squares, for a global norm; Adam's clipped apply, or post-local SGD's average of the models)
    and hands each worker a token.  Each worker also leaves (its task, the time) in one queue on
    ps 0 once its gradients are all there, stamped by ps 0's clock so that the workers' clocks
    never need to agree; the chief takes them with the gradients (the ``arrivals`` it returns),
    and the last one each step is the worker the others waited for.  Unlike
    SyncReplicasOptimizer, which accepts any ``replicas_to_aggregate`` gradients (a fast worker
    may supply two), every step holds exactly one gradient per worker.  Queue names carry the
    launch id (and ``tag``, one set of queues per kind of sync), so a persistent cluster's
    leftovers from an earlier launch are never read.  Fused (``fused_on``: this worker's device;
    fusion.py) each worker's share for a ps is one flat tensor, and the ps averages it flat
    before cutting it into the variables' gradients.
    """
    pushes, means = [], [None] * len(variables)
    squares = []
    for s, (device, members) in enumerate(fusion.by_ps(variables)):
        sent = [fusion.flatten([grads[i] for i in members], fused_on)] if fused_on else [grads[i] for i in members]
        with tf.compat.v1.device(device):
            queues = [tf.queue.FIFOQueue(1, [tf.float32] * len(sent), shapes=[g.shape for g in sent],
                                         shared_name=f"{tag}grads_{s}_{w}_{launch}", name=f"{tag}grads_{s}_{w}")
                      for w in range(workers)]
        pushes.append(queues[task].enqueue(sent))
        if task == 0:
            with tf.control_dependencies(pushes[-1:]), tf.compat.v1.device(device):
                taken = [q.dequeue() for q in queues]
                taken = [t if isinstance(t, list | tuple) else [t] for t in taken]
                mean = [tf.add_n(list(gs)) / float(workers) for gs in zip(*taken)]
                squares.append(tf.add_n([tf.reduce_sum(tf.square(g)) for g in mean]))
                if fused_on:
                    mean = fusion.split(mean[0], [variables[i].shape for i in members])
            for i, g in zip(members, mean):
                means[i] = g
    with tf.compat.v1.device("/job:ps/task:0"):
        tokens = [tf.queue.FIFOQueue(1, [tf.int64], shapes=[[]], shared_name=f"{tag}token_{w}_{launch}", name=f"{tag}token_{w}")
                  for w in range(workers)]
        arrivals = tf.queue.FIFOQueue(workers, [tf.int32, tf.float64], shapes=[[], []], shared_name=f"{tag}arrivals_{launch}",
                                      name=f"{tag}arrivals")
        with tf.control_dependencies(pushes):
            arrived = arrivals.enqueue([tf.constant(task, tf.int32), tf.timestamp()])
    if task != 0:
        with tf.control_dependencies([*pushes, arrived]):
            return tokens[task].dequeue(), None
    with tf.control_dependencies([arrived]), tf.compat.v1.device("/job:ps/task:0"):
        stamps = arrivals.dequeue_many(workers)
    applied = apply(means, squares)
    with tf.control_dependencies([applied, *stamps]):
        step = global_step.read_value()
        return tf.group(*[tokens[w].enqueue([step]) for w in range(1, workers)]), stamps
