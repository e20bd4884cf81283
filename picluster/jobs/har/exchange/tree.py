"""A tree of aggregators (``--exchange tree``): the weights on the ps tasks as with the ps, but the
workers in groups of ``GROUP``, each group's first worker summing its group's gradients before the
ps, and handing the new weights back down.  The ps then pays a few worker-steps an update (one
per group), not one per worker, and its link carries a group's sum, not every worker's gradient.

Each worker keeps the weights it was last handed as local flat copies (one per ps task, the fused
exchange's layout: fusion.py), which its model reads, and sends its gradient with respect to them.
A member puts its flat gradients in a queue on its group's first worker and waits there for the
new weights; the first worker adds its own and its members' in rank order, puts the group's sum
in a queue on the ps, and waits there for the new weights; the chief (the first of group 0)
takes every group's sum in group order, applies their mean as a sync update does, and hands the
weights to each group's first worker, who hands them to its members.  A launch starts as the
ps's does (announce, barrier), then every worker reads the weights once.
"""

import tensorflow as tf

from picluster.jobs.har import fusion
from picluster.jobs.har.exchange.kind import Place
from picluster.jobs.har.exchange.ps import Ps

GROUP = 4  # workers per group: 16 workers send 4 sums to the ps an update


def groups(workers: int) -> list[list[int]]:
    """The ranks of each group, in order: consecutive ranks, the first of each its aggregator."""
    return [list(range(first, min(first + GROUP, workers))) for first in range(0, workers, GROUP)]


class Tree(Ps):
    name = "tree"

    def __init__(self, config, place: Place) -> None:
        super().__init__(config, place)
        self.fused_on = place.here  # the layout of the copies: one flat tensor per ps task
        self.mine = next(g for g in groups(place.workers) if place.rank in g)
        self.first = self.mine[0]
        self.sync = True

    def _device(self, rank: int) -> str:
        """The device of the worker task at ``rank`` in this launch (TF_CONFIG's members, in order)."""
        return f"/job:worker/task:{self.place.task_of(rank)}"

    def read(self, build, x):
        stand_ins = fusion.StandIns()
        with tf.compat.v1.variable_scope(tf.compat.v1.get_variable_scope(), custom_getter=stand_ins.getter):
            out = build(x)
        self.made = stand_ins.variables
        self.layout = fusion.by_ps(self.made)
        copies: dict[str, tf.Tensor] = {}
        self.held = []
        with tf.compat.v1.device(self.place.here):
            for s, (_, members) in enumerate(self.layout):
                size = sum(int(self.made[i].shape.num_elements()) for i in members)
                held = tf.compat.v1.get_variable(f"tree_weights_{s}", [size], tf.float32, trainable=False,
                                                 collections=[tf.compat.v1.GraphKeys.LOCAL_VARIABLES],
                                                 initializer=tf.compat.v1.zeros_initializer())
                self.held.append(held)
                for i, piece in zip(members, fusion.split(held.read_value(), [self.made[i].shape for i in members])):
                    copies[self.made[i].name] = piece
        value = lambda v: copies.get(v.name, v)
        stand_ins.read(value)
        return out, value

    def _flats(self):
        """The weights on each ps, read there as one flat tensor each (after whatever the caller waits for)."""
        flats = []
        for device, members in self.layout:
            with tf.compat.v1.device(device):
                flats.append(tf.concat([tf.reshape(self.made[i].read_value(), [-1]) for i in members], 0))
        return flats

    def update(self, grads, variables, optimiser, g):
        place, launch, n = self.place, self.place.launch, self.place.workers
        here = place.here
        trainable = {v.name for v in variables}
        by_made = {v.name: gr for v, gr in zip(variables, grads)}
        sent = [fusion.flatten([by_made[self.made[i].name] if self.made[i].name in trainable else tf.zeros_like(self.made[i])
                                for i in members], here) for _, members in self.layout]
        shapes = [s.shape for s in sent]
        types = [tf.int64] + [tf.float32] * len(sent)
        down_shapes = [[]] + shapes

        def up(rank):  # a member's gradients, on its group's first worker
            with tf.compat.v1.device(self._device(self.first)):
                return tf.queue.FIFOQueue(1, [tf.float32] * len(sent), shapes=shapes, shared_name=f"tree_up_{rank}_{launch}",
                                          name=f"tree_up_{rank}")

        def down(rank):  # the step and weights a member is handed
            with tf.compat.v1.device(self._device(self.first)):
                return tf.queue.FIFOQueue(1, types, shapes=down_shapes, shared_name=f"tree_down_{rank}_{launch}",
                                          name=f"tree_down_{rank}")

        with tf.compat.v1.device("/job:ps/task:0"):
            sums = {first: tf.queue.FIFOQueue(1, [tf.float32] * len(sent), shapes=shapes, shared_name=f"tree_sum_{first}_{launch}",
                                              name=f"tree_sum_{first}") for first in (gr[0] for gr in groups(n))}
            tokens = {first: tf.queue.FIFOQueue(1, types, shapes=down_shapes, shared_name=f"tree_token_{first}_{launch}",
                                                name=f"tree_token_{first}") for first in sums}
        if place.rank != self.first:
            pushed = up(place.rank).enqueue(sent)
            with tf.control_dependencies([pushed]):
                got = down(place.rank).dequeue()
            return self._hold(got)
        with tf.compat.v1.device(here):
            taken = [up(r).dequeue() for r in self.mine[1:]]
            taken = [t if isinstance(t, list | tuple) else [t] for t in taken]
            total = [tf.add_n([mine, *(t[s] for t in taken)]) if taken else mine for s, mine in enumerate(sent)]
        pushed = sums[self.first].enqueue(total)
        if place.rank == 0:
            got = self._root(sums, tokens, pushed, variables, optimiser)
        else:
            with tf.control_dependencies([pushed]):
                got = tokens[self.first].dequeue()
        with tf.compat.v1.device(here):
            passed = [down(r).enqueue(got) for r in self.mine[1:]]
        with tf.control_dependencies(passed):
            return self._hold(got)

    def _root(self, sums, tokens, pushed, variables, optimiser):
        """The chief's part, on ps 0: every group's sum taken, averaged per ps, applied, and the
        step and weights handed to each other group's first worker; what its own group is handed."""
        n = self.place.workers
        with tf.control_dependencies([pushed]), tf.compat.v1.device("/job:ps/task:0"):
            every = [sums[first].dequeue() for first in sums]
            every = [e if isinstance(e, list | tuple) else [e] for e in every]
        means, squares = [None] * len(self.made), []
        for s, (device, members) in enumerate(self.layout):
            with tf.compat.v1.device(device):
                mean = tf.add_n([e[s] for e in every]) / float(n)
                squares.append(tf.reduce_sum(tf.square(mean)))
                for i, piece in zip(members, fusion.split(mean, [self.made[i].shape for i in members])):
                    means[i] = piece
        index = {v.name: i for i, v in enumerate(self.made)}
        applied = optimiser.apply_mean(variables)([means[index[v.name]] for v in variables], squares)
        with tf.control_dependencies([applied]):
            step = optimiser.global_step.read_value()
            flats = self._flats()
        with tf.control_dependencies(flats):
            handed = [tokens[first].enqueue([step, *flats]) for first in tokens if first != 0]
        got = [step, *flats]
        with tf.control_dependencies(handed):
            got = [tf.identity(t) for t in got]
        return got

    def _hold(self, got):
        """The weights handed down, kept for the next step's reads; the op a step ends with."""
        with tf.compat.v1.device(self.place.here):
            return tf.group(*[held.assign(flat, read_value=False) for held, flat in zip(self.held, got[1:])])

    def building_done(self, graph) -> None:
        super().building_done(graph)
        with tf.compat.v1.device(self.place.here):
            self.pull = tf.group(*[held.assign(flat, read_value=False) for held, flat in zip(self.held, self._flats())])

    def start(self, raw, g, step, epoch, cancelled):
        step, epoch = super().start(raw, g, step, epoch, cancelled)
        raw(self.pull)  # the weights the chief initialised or restored, once; then handed down each step
        return step, epoch

    def target(self):
        target, config = super().target()
        config.device_filters.append(self._device(self.first))  # a member's queues are on its group's first worker
        return target, config
