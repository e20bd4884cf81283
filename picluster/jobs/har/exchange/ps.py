"""The parameter-server exchange (``--exchange fused`` or ``variables``): the weights live on the ps
tasks, each worker reads them at the start of a step and sends its gradients back.

Between-graph replication: every worker builds the same graph, with the variables placed on the
ps tasks by ``replica_device_setter`` (placement.py: by bytes) and its own ops on its worker task.
Fused (fusion.py) each ps's share travels as one flat tensor each way; variable by variable, one
tensor per variable.  Sync mode adds the gradient queues of ``sync.sync_step``, one set per ps,
so each ps averages its own share and the chief applies the mean; async, each worker applies its
own gradient.  A launch starts with the chief's announce (the epoch to start after, the barrier
from 0) and every worker's join, on ps 0.
"""

import contextlib
import time
from typing import Any

import tensorflow as tf

from picluster.jobs.har import fusion
from picluster.jobs.har.exchange.kind import Exchange, Place
from picluster.jobs.har.placement import ByteBalancer, check_shards
from picluster.jobs.har.sync import Carried, sync_step

READY_POLL_S = 0.2  # a worker's look at the chief's one readiness flag
BARRIER_POLL_S = 0.05


class Ps(Exchange):
    name = "ps"

    def __init__(self, config, place: Place) -> None:
        super().__init__(config, place)
        assert place.cluster is not None, "the ps exchange needs a cluster"
        self.spec = tf.train.ClusterSpec(place.cluster)
        self.sync = config.mode == "sync" and place.workers > 1
        # The worker's device when the exchange is fused (fusion.py), None otherwise.
        self.fused_on = place.here if config.exchange == "fused" else None
        self.wire = fusion.WIRES[config.wire]
        self.weights: fusion.FusedWeights | None = None
        self.ready: Any = None

    # -- building --------------------------------------------------------------------------------

    def placing(self):
        setter = tf.compat.v1.train.replica_device_setter(cluster=self.spec, worker_device=self.place.here,
                                                          ps_strategy=ByteBalancer(self.spec.num_tasks("ps")))
        return tf.compat.v1.device(setter)

    def updating(self):
        # Fused, the rate (from the global step) and Adam's constants are made on ps 0, where the
        # step and the updates are: made on the worker, each would be one more transfer a step.
        return tf.compat.v1.device("/job:ps/task:0") if self.fused_on else contextlib.nullcontext()

    def launch_variables(self, global_step) -> None:
        self.global_step = global_step
        # Start barrier: each launch of the run adds one per worker; kept in checkpoints.
        self.joined = tf.compat.v1.get_variable("workers_joined", [], tf.int64, trainable=False,
                                                initializer=tf.compat.v1.zeros_initializer())
        self.join = self.joined.assign_add(1)
        # The chief's "every variable is initialised", for the other workers: one scalar to look
        # at.  Kept out of the global collection: the chief initialises it after all the others
        # (init_op would not wait), and checkpoints do not carry it.
        self.ready = tf.compat.v1.get_variable("chief_ready", [], tf.bool, trainable=False, collections=["picluster_ready"],
                                               initializer=tf.compat.v1.constant_initializer(True))
        self.ready_now = tf.compat.v1.is_variable_initialized(self.ready)
        self.ready_now.mark_used()  # the chief never asks: no "never used" warning from its graph
        # The epoch this launch starts after, as the chief's restored checkpoint says it (its step
        # alone does not once the workers changed): the others read it once ready, so every worker
        # runs the same epochs.  Not in checkpoints either.
        self.start_epoch_in = tf.compat.v1.placeholder(tf.int64, [], name="start_epoch_in")
        self.start_epoch = tf.compat.v1.get_variable("start_epoch", trainable=False, collections=["picluster_ready"],
                                                     initializer=self.start_epoch_in, validate_shape=True)

    def read(self, build, x):
        if not self.fused_on:
            return build(x), (lambda v: v)
        # Built once, reading a stand-in for each variable; once every variable is made, each
        # stand-in reads the local copy that one fused read per ps brings.
        stand_ins = fusion.StandIns()
        with tf.compat.v1.variable_scope(tf.compat.v1.get_variable_scope(), custom_getter=stand_ins.getter):
            out = build(x)
        self.made = stand_ins.variables
        self.weights = fusion.FusedWeights(self.made, self.fused_on, self.wire)
        stand_ins.read(self.weights.value)
        return out, self.weights.value

    def gradients(self, loss, opt, value):
        if not self.fused_on:
            return super().gradients(loss, opt, value)
        variables = tuple(tf.compat.v1.trainable_variables())  # with respect to the local copies
        return tuple(tf.gradients(loss, [value(v) for v in variables])), variables

    def update(self, grads, variables, optimiser, g):
        if self.sync:
            train, self.arrivals = sync_step(grads, variables, optimiser.global_step, self.place, optimiser.apply_mean(variables),
                                             Carried(self.fused_on, wire=self.wire))
            self.times_arrivals = self.arrivals is not None  # the chief's: ps 0's stamps
            return train
        clipped = optimiser.clipped(grads)  # where the gradients are
        if self.fused_on:
            clipped = fusion.send(clipped, variables, self.fused_on, self.wire)
        return optimiser.apply(clipped, variables)

    def after_update(self, applied):
        return self.weights.refresh(applied) if self.weights else applied  # then the 16-bit copies

    def local_steps(self, g, opt, per_epoch: int) -> None:
        """Post-local SGD's ops (localsgd.py), built on the fused layout, with --local-steps above 1."""
        if self.sync and self.fused_on and self.config.local_steps > 1:
            g.build_local_steps(self.made, opt, self.fused_on, per_epoch, self.updating)

    def building_done(self, graph) -> None:
        self._announce()
        check_shards(self.spec.num_tasks("ps"), tf.compat.v1.global_variables())

    def _announce(self) -> None:
        """The start of a launch, each side in one run (each run of a new kind costs a Pi-shaped
        host a tenth of a second or more to set up).  The chief's ``announce`` (fed start_epoch_in):
        the 16-bit copies from the weights it initialised or restored, the epoch this launch
        starts after, the barrier's count from 0 whatever a checkpoint restored (an earlier launch
        may have had more or fewer workers), its own join, and only then the one flag the other
        workers wait for; it returns the count after its join.  The others' ``arrive``: (the step,
        their join's count, the epoch to start after), once they have seen the flag."""
        first = [self.start_epoch.initializer, self.joined.assign(0, read_value=False)]
        if self.weights is not None and self.weights.start is not None:
            first.append(self.weights.start)
        if self.place.chief:
            with tf.control_dependencies(first):
                mine = self.joined.assign_add(1)
            with tf.control_dependencies([mine]):
                flag = self.ready.initializer
            with tf.control_dependencies([flag]):
                self.announce = tf.identity(mine)
        else:
            self.arrive = [self.global_step.read_value(), self.join, self.start_epoch.read_value()]

    # A session's reports of uninitialised variables are replaced on a cluster (open_session): the
    # chief's announce comes after every variable is initialised or restored, and the others open
    # their sessions only once its flag is up; each report asks the ps about every variable, twice
    # a session.
    reports_missing = False

    # -- running -----------------------------------------------------------------------------------

    def target(self):
        # A dead spare worker must not block us: only the ps and our own task must answer.
        return f"grpc://{self.place.address}", tf.compat.v1.ConfigProto(device_filters=["/job:ps", self.place.here])

    def await_chief(self, job, graph, cancelled) -> None:
        """A MonitoredSession re-checks the chief's initialisation only every 30 s: look first."""
        if self.place.chief:
            return
        target, config = self.target()
        with tf.compat.v1.Session(target, graph=graph, config=config) as probe:
            if job is not None:
                job.on_cancel(probe.close)
            while not probe.run(self.ready_now):
                cancelled()
                time.sleep(READY_POLL_S)

    def start(self, raw, g, step, epoch, cancelled):
        if self.place.chief:
            # The 16-bit copies, the start epoch, the barrier from 0 and the chief's join, then the
            # flag the others wait for (_announce): no worker has joined before it.
            joined = int(raw(self.announce, {self.start_epoch_in: epoch}))
        else:
            step, joined, epoch = (int(v) for v in raw(self.arrive))
        self._barrier(raw, joined, cancelled)
        return step, epoch

    def _barrier(self, raw, mine: int, cancelled) -> None:
        """Wait until every worker of this launch has its session (``mine``: the count after this
        worker's join): sync steps then take all of them."""
        workers = self.place.workers
        if workers == 1:
            return
        # The chief counts each launch from 0 (_announce); the round is told by our own increment.
        want = (mine - 1) // workers * workers + workers
        joined = mine
        while joined < want:
            cancelled()
            time.sleep(BARRIER_POLL_S)
            joined = int(raw(self.joined))
