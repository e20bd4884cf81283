"""The statistics emulator's exchange (``--emulate``): a sync cluster's update made in one process.

Every worker's tower is built in this one graph (graph.Graph.tower: its own windows and dropout
key, the same variables), and their gradients are averaged exactly as the emulated cluster's
exchange averages them: per ps task in worker order, each share one flat tensor through the
wire's type when fused (sync.emulated_step), or in the all-reduce's order over every variable
(group.tree_sum).  The numbers are then the cluster's, op for op, at this machine's speed.
"""

import tensorflow as tf

from picluster.jobs.har import fusion
from picluster.jobs.har.exchange import group
from picluster.jobs.har.exchange.kind import Exchange, Place
from picluster.jobs.har.placement import ps_groups
from picluster.jobs.har.sync import emulated_step


class Emulated(Exchange):
    name = "emulated"
    sync = True

    def __init__(self, config, place: Place) -> None:
        super().__init__(config, place)
        self.wire = fusion.WIRES[config.wire]
        # The workers' model reads the weights as the wire brings them: rounded, once a step.
        self.rounded = fusion.Rounded(self.wire) if config.exchange == "fused" and self.wire != tf.float32 else None

    def read(self, build, x):
        if self.rounded is None:
            return build(x), (lambda v: v)
        with tf.compat.v1.variable_scope(tf.compat.v1.get_variable_scope(), custom_getter=self.rounded.getter):
            return build(x), self.rounded.value

    def gradients(self, loss, opt, value):
        variables = tuple(tf.compat.v1.trainable_variables())  # with respect to the values the model read
        return tuple(tf.gradients(loss, [value(v) for v in variables])), variables

    def update(self, grads, variables, optimiser, g):
        getter = self.rounded.getter if self.rounded else None
        others = [g.tower(w, getter) for w in range(1, self.place.workers)]
        every = [grads] + [tuple(tf.gradients(loss, [g.value(v) for v in variables])) for _, loss in others]
        apply = optimiser.apply_mean(variables)
        if self.config.exchange == "allreduce":
            # One group of every variable, each summed over the workers in the group's order.
            means = [group.tree_sum(list(gs), tf.add) / float(len(every)) for gs in zip(*every)]
            return apply(means, [tf.add_n([tf.reduce_sum(tf.square(m)) for m in means])])
        return emulated_step(every, variables, ps_groups(self.config.ps), self.config.exchange == "fused", apply, self.wire)

    def evaluated(self, build, x):
        if self.rounded is None:
            return None
        with tf.compat.v1.variable_scope(tf.compat.v1.get_variable_scope(), reuse=True):
            return build(x)
