"""TensorFlow's collective all-reduce (``--exchange collective``, ``collective-tree``): what
``MultiWorkerMirroredStrategy`` does, in the replica's graph.  Every worker holds the whole model
on its own task; one ``CollectiveReduce`` op per step sums the flat gradient between the workers'
servers over gRPC, and each worker applies the mean to its own copy.

``collective`` is TensorFlow's ring: 2(N - 1) messages a step, each a slice of the vector.
``collective-tree`` is hierarchical (two dimensions): the workers in groups of ``GROUP`` (or the
largest divisor of their number below it) sum their group's vector in a ring, then the workers at the same place in each group sum the groups' sums
in a ring of their own: 2(g - 1) + 2(N/g - 1) messages a step instead of 2(N - 1), each
carrying more of the vector (about twice the ring's bytes in all).

The servers resolve a group through one leader, worker 0's server (server.py starts every task
with it): a launch that has lost worker 0's server cannot form its groups.  A launch starts with
the chief's variables summed with the others' zeros (an exact broadcast), on the same ring.
"""

import zlib

import tensorflow as tf

from picluster.jobs.har.exchange.kind import Exchange, Place

GROUP = 4  # workers per group of collective-tree: 16 workers make 4 rings of 4 and a ring of 4 leaders


class Collective(Exchange):
    name = "collective"
    initialises_own = True

    def __init__(self, config, place: Place) -> None:
        super().__init__(config, place)
        assert place.cluster is not None, "the collective all-reduce joins a cluster's workers"
        self.sync = place.workers > 1
        self.tree = config.exchange == "collective-tree"
        # Group keys of this launch (a launch of other workers is another group); instance keys
        # name the op within it, the same on every worker.
        self.key = zlib.crc32(place.launch.encode()) & 0x3FFFFFFF
        self.ranks = list(range(place.workers))

    def placing(self):
        return tf.compat.v1.device(self.place.here)

    def _sum(self, t, instance: int, final: str):
        """``t`` summed over every worker (final "Div": their mean), in TensorFlow's ring or in two
        levels of rings.  Every worker's graph holds the same collective ops (the same instance
        keys): the servers give the workers of one graph the same sequence of step ids, and a
        worker whose graph held other ops would wait in another."""
        n, rank = self.place.workers, self.place.rank
        reduce = lambda x, size, key, k, last: tf.raw_ops.CollectiveReduce(
            input=x, group_size=size, group_key=key, instance_key=10 * instance + k, merge_op="Add", final_op=last,
            subdiv_offsets=[0], communication_hint="ring")
        # Groups of equal size (the largest divisor of n up to GROUP): every place in a group then
        # has a worker in every group (a launch of a prime number of workers: one ring).
        size = max(d for d in range(1, GROUP + 1) if n % d == 0)
        if not self.tree or size in (1, n):
            return reduce(t, n, self.key, 0, final)
        # Each group of ``size`` consecutive ranks sums its vectors; then the workers at the same
        # place in their groups sum the groups' sums, one ring per place.
        first, place = rank // size * size, rank % size
        group = reduce(t, size, self.key + 1 + first, 1, "Id")
        total = reduce(group, n // size, self.key + 1 + n + place, 2, "Id")
        return total / float(n) if final == "Div" else total

    def update(self, grads, variables, optimiser, g):
        flat = tf.concat([tf.reshape(gr, [-1]) for gr in grads], 0, name="flat_gradients")
        mean = self._sum(flat, 1, "Div") if self.sync else flat
        sizes = [int(v.shape.num_elements()) for v in variables]
        means = [tf.reshape(m, v.shape) for m, v in zip(tf.split(mean, sizes), variables)]
        return optimiser.apply_mean(variables)(means, [tf.add_n([tf.reduce_sum(tf.square(m)) for m in means])])

    def graph_done(self, g) -> None:
        """A launch's start: the chief's variables (and its step and epoch) on every worker."""
        saved = list(g.saved)
        self.start_in = tf.compat.v1.placeholder(tf.float64, [2], name="start_in")
        with tf.compat.v1.device(self.place.here):
            mine = tf.concat([tf.reshape(tf.cast(v.read_value(), tf.float64), [-1]) for v in saved] + [self.start_in], 0)
            if not self.place.chief:
                mine = tf.zeros_like(mine)
            total = self._sum(mine, 2, "Id") if self.place.workers > 1 else mine
            sizes = [int(v.shape.num_elements()) for v in saved]
            pieces = tf.split(total, [*sizes, 2])
            with tf.control_dependencies([total]):
                loads = [v.assign(tf.cast(tf.reshape(p, v.shape), v.dtype.base_dtype), read_value=False)
                         for v, p in zip(saved, pieces) if not self.place.chief]
            with tf.control_dependencies(loads):
                self.begin = tf.identity(pieces[-1])

    def target(self):
        return f"grpc://{self.place.address}", tf.compat.v1.ConfigProto(device_filters=[self.place.here])

    def start(self, raw, g, step, epoch, cancelled):
        got = raw(self.begin, {self.start_in: [step, epoch]})
        return int(got[0]), int(got[1])
