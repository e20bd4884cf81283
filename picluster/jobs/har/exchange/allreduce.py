"""The all-reduce exchange (``--exchange allreduce``): no parameter server in a step; every worker
holds the whole model, and the mean gradient is summed between the workers themselves.

Each step runs in two parts in the replica's own process, with no TensorFlow message at all: the
forward and backward pass fetch the gradient as one flat vector; the workers' group (group.py:
recursive halving and doubling over TCP) returns the same mean vector to every worker; the second
part clips it by its global norm and applies Adam to the worker's own copy of the variables.
Every worker applies the same bytes to the same weights, so the copies stay equal.  The graph has
no devices: it runs in a session of this process alone, which costs a Pi-shaped host less per
step than a session through its server.

A launch starts with a rendezvous through ps 0 (each worker's listening address, one table back
to each), then the chief's variables (weights, Adam's moments, the step, the epoch to start
after) broadcast to every worker: a resumed run restores them on the chief alone.  The chief's
Saver writes its copy under the usual names, so checkpoints, the evaluator and a resume read
them as they read a ps run's.
"""

import time

import numpy as np
import tensorflow as tf

from picluster.cluster.containers import container
from picluster.jobs.har.exchange.group import Group
from picluster.jobs.har.exchange.kind import Exchange, Place, Step


class AllReduce(Exchange):
    name = "allreduce"
    initialises_own = True
    times_exchange = True
    reusable = True  # no devices, no queues: only the rendezvous names the launch, in a graph of its own

    def __init__(self, config, place: Place) -> None:
        super().__init__(config, place)
        assert place.cluster is not None, "the all-reduce joins a cluster's workers"
        self.sync = place.workers > 1
        self.times_arrivals = place.chief and self.sync
        self.group: Group | None = None
        self._rendezvous_session = None

    # -- building --------------------------------------------------------------------------------

    def update(self, grads, variables, optimiser, g):
        # The one vector a worker sends, and the mean every worker gets back, fed to the update.
        self.flat = tf.concat([tf.reshape(gr, [-1]) for gr in grads], 0, name="flat_gradients")
        self.mean_in = tf.compat.v1.placeholder(tf.float32, self.flat.shape, name="mean_gradients")
        self.offset_in = g.schedule_offset  # the update's rate reads it: fed to the second run too
        sizes = [int(v.shape.num_elements()) for v in variables]
        means = [tf.reshape(m, v.shape) for m, v in zip(tf.split(self.mean_in, sizes), variables)]
        # One group of every variable: the squares as the emulator of this exchange adds them.
        return optimiser.apply_mean(variables)(means, [tf.add_n([tf.reduce_sum(tf.square(m)) for m in means])])

    def graph_done(self, g) -> None:
        """The assigns that load the chief's broadcast into this worker's variables."""
        self.saved = list(g.saved)
        self.load_in = [tf.compat.v1.placeholder(v.dtype.base_dtype, v.shape) for v in self.saved]
        self.load = tf.group(*[v.assign(p, read_value=False) for v, p in zip(self.saved, self.load_in)])
        self.sizes = [int(v.shape.num_elements()) for v in self.saved]

    # -- running -----------------------------------------------------------------------------------

    def relaunch(self, place: Place) -> None:
        self.place, self.group, self._rendezvous_session = place, None, None
        self.times_arrivals = place.chief and self.sync

    def start(self, raw, g, step, epoch, cancelled):
        place = self.place
        self.group = Group(place.rank, place.workers, place.launch)
        mine = self.group.listen(place.address.rpartition(":")[0])
        table = self._rendezvous(mine)
        cancelled()
        self.group.join(table)
        length = sum(self.sizes) + 2
        payload = None
        if place.chief:
            values = raw(self.saved)
            payload = np.concatenate([np.asarray(v, np.float64).ravel() for v in values] + [np.array([step, epoch], np.float64)])
        got = self.group.broadcast(payload, length)
        if not place.chief:
            pieces = np.split(got[:-2], np.cumsum(self.sizes)[:-1])
            raw(self.load, {p: piece.reshape(v.shape).astype(v.dtype.base_dtype.as_numpy_dtype)
                            for p, piece, v in zip(self.load_in, pieces, self.saved)})
            step, epoch = int(got[-2]), int(got[-1])
        return step, epoch

    def _rendezvous(self, mine: str) -> list[str]:
        """Every worker's "host:port" in rank order, met on ps 0: each says its own, the chief
        gathers them and hands the table to each of the others (queues of this launch's container)."""
        place, n = self.place, self.place.workers
        graph = tf.Graph()
        with graph.as_default(), tf.compat.v1.container(container(place.launch)), tf.compat.v1.device("/job:ps/task:0"):
            hello = tf.queue.FIFOQueue(n, [tf.int32, tf.string], shapes=[[], []], shared_name=f"allreduce_hello_{place.launch}",
                                       name="allreduce_hello")
            rank_in = tf.compat.v1.placeholder(tf.int32, [])
            address_in = tf.compat.v1.placeholder(tf.string, [])
            say = hello.enqueue([rank_in, address_in])
            tables = {w: tf.queue.FIFOQueue(1, [tf.string], shapes=[[n]], shared_name=f"allreduce_table_{w}_{place.launch}",
                                            name=f"allreduce_table_{w}") for w in range(1, n)}
            if place.chief:
                ranks, addresses = hello.dequeue_many(n)
                table = tf.gather(addresses, tf.argsort(ranks))
                with tf.control_dependencies([table]):
                    handed = tf.group(*[q.enqueue([table]) for q in tables.values()])
                fetch = [table, handed]
            else:
                fetch = [tables[place.rank].dequeue()]
        config = tf.compat.v1.ConfigProto(device_filters=["/job:ps/task:0", place.here])
        with tf.compat.v1.Session(f"grpc://{place.address}", graph=graph, config=config) as session:
            self._rendezvous_session = session  # close() ends a wait for the others
            session.run(say, {rank_in: place.rank, address_in: mine})
            got = session.run(fetch)[0]
        self._rendezvous_session = None
        return [a.decode() for a in got]

    def step(self, session, feed, before, after, **trace):
        began = time.perf_counter()
        values = session.run([self.flat, *before], feed, **trace)
        assert self.group is not None
        ready = time.perf_counter()
        # The seconds each worker's gradient took, summed with the gradients (one slot each, the
        # others' zeros): the chief learns whom a step waited for without a message of its own.
        n, rank = self.place.workers, self.place.rank
        times = np.zeros(n, np.float32)
        times[rank] = ready - began
        total = self.group.total(np.concatenate([np.asarray(values[0], np.float32), times]))
        mean = total[:-n]
        mean /= np.float32(n)
        exchange = time.perf_counter() - ready
        arrivals = (np.arange(n), total[-n:]) if rank == 0 and n > 1 else None
        applied = {self.mean_in: mean} | ({self.offset_in: feed[self.offset_in]} if self.offset_in in feed else {})
        return Step(values[1:], session.run(after, applied), exchange, arrivals)

    def close(self) -> None:
        if self._rendezvous_session is not None:
            self._rendezvous_session.close()
        if self.group is not None:
            self.group.close()
