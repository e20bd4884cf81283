"""Post-local SGD (``--local-steps K``): after the first epochs, each worker takes K steps of its
own between syncs, and a sync averages the workers' models instead of their gradients.

Lin et al., "Don't Use Large Mini-Batches, Use Local SGD" (ICLR 2020): a synchronous update of N
workers is one step of N times the batch, and past the critical batch a larger update learns less
per window; K local steps of the worker's own batch, then an average, keep the small updates and
exchange K times less often.  The first epochs (``--local-after``) stay fully synchronous, where
the weights move most.

Each worker holds its model as one flat local variable per ps task (the fused exchange's layout,
fusion.py), an anchor (the weights of the last sync) and Adam's moments, all of them local
variables: never on the ps, never in a checkpoint.  A local step reads and writes only these.
A sync sends each worker's change since the anchor through the same kind of per-ps queues as a
synchronous step; the chief adds the mean change to the variables on the ps and counts the steps
it covers on the global step (so epochs, the learning rate and a resume count steps as before),
and every worker reads the averaged weights back into its model and anchor.  The moments stay
each worker's own; when a launch starts its local steps they are taken from the ps's Adam.
"""

import tensorflow as tf

from picluster.jobs.har import fusion


class LocalSteps:
    """The ops of the local phase for the worker on device ``here``.

    made: every variable of the model (weights and input moments) in creation order; opt: the
    synchronous phase's Adam, whose moments a launch's first local step starts from; lr: the
    rate of a local step; loss_of(custom_getter, value): the model's (loss, cross-entropy,
    correct) built on the variables the getter gives."""

    def __init__(self, made, opt, here: str, config, lr, loss_of) -> None:
        self.groups = fusion.by_ps(made)
        self.made = list(made)
        shapes = [[made[i].shape for i in members] for _, members in self.groups]
        sizes = [sum(int(s.num_elements()) for s in group) for group in shapes]
        train_names = {v.name for v in tf.compat.v1.trainable_variables()}  # the model's weights
        with tf.compat.v1.device(here):
            def local(name, size):
                return tf.compat.v1.get_variable(name, [size], tf.float32, trainable=False,
                                                 collections=[tf.compat.v1.GraphKeys.LOCAL_VARIABLES],
                                                 initializer=tf.compat.v1.zeros_initializer())

            self.model = [local(f"local_model_{s}", n) for s, n in enumerate(sizes)]
            self.anchor = [local(f"local_anchor_{s}", n) for s, n in enumerate(sizes)]
            self.m = [local(f"local_adam_m_{s}", n) for s, n in enumerate(sizes)]
            self.v = [local(f"local_adam_v_{s}", n) for s, n in enumerate(sizes)]
            powers = [tf.compat.v1.get_variable(f"local_adam_{name}_power", [], tf.float32, trainable=False,
                                                collections=[tf.compat.v1.GraphKeys.LOCAL_VARIABLES],
                                                initializer=tf.compat.v1.ones_initializer()) for name in ("beta1", "beta2")]
            copies: dict[str, tf.Tensor] = {}
            for (_, members), flat, group in zip(self.groups, self.model, shapes):
                for i, copy in zip(members, fusion.split(flat.read_value(), group)):
                    copies[made[i].name] = copy

        def local_copy(getter, name, *args, **kwargs):  # a variable scope's custom getter
            var = getter(name, *args, **kwargs)
            return copies.get(var.name, var)

        # The model once more, on the local copies: its loss, and the figures a step reports.
        with tf.compat.v1.name_scope("local"), tf.compat.v1.device(here):
            self.loss, self.xent, self.correct = loss_of(local_copy, lambda v: copies.get(v.name, v))
            wanted = [copies[v.name] for v in made]
            grads = tf.gradients(self.loss, wanted)
            # Only the weights learn; the input moments' gradients are not theirs to follow.
            grads = [g if g is not None and v.name in train_names else tf.zeros_like(w) for g, v, w in zip(grads, made, wanted)]
            grads, _ = tf.clip_by_global_norm(grads, config.clip_norm)
            beta1, beta2, eps = config.adam_beta1, config.adam_beta2, 1e-8  # AdamOptimizer's constants and epsilon
            b1p, b2p = powers
            rate = lr * tf.sqrt(1.0 - b2p) / (1.0 - b1p)
            steps = []
            for (_, members), flat, m, v in zip(self.groups, self.model, self.m, self.v):
                g = fusion.flatten([grads[i] for i in members], here)
                m_new = m.assign(beta1 * m + (1.0 - beta1) * g)
                v_new = v.assign(beta2 * v + (1.0 - beta2) * tf.square(g))
                steps.append(flat.assign_sub(rate * m_new / (tf.sqrt(v_new) + eps)))
            with tf.control_dependencies(steps):
                self.step = tf.group(b1p.assign(b1p * beta1), b2p.assign(b2p * beta2))
            # The change since the last sync, per variable: what a sync averages.
            changes: list[tuple[int, tf.Tensor]] = []
            for (_, members), flat, anchor, group in zip(self.groups, self.model, self.anchor, shapes):
                changes.extend(zip(members, fusion.split(flat.read_value() - anchor.read_value(), group)))
        self.changes = [c for _, c in sorted(changes, key=lambda pair: pair[0])]

        self._opt, self._here, self._train_names, self._powers = opt, here, train_names, powers

    def pull(self):
        """Ops that read the weights on the ps into the model and its anchor (one fused read per
        ps).  The reads are made here, in the caller's control-dependency scope, so that they read
        after what it waits for (the fused reads of the step were made before it)."""
        ops = []
        for (device, members), model, anchor in zip(self.groups, self.model, self.anchor):
            with tf.compat.v1.device(device):
                flat = tf.concat([tf.reshape(self.made[i].read_value(), [-1]) for i in members], 0, name="fused_weights")
            with tf.compat.v1.device(self._here):
                ops += [model.assign(flat), anchor.assign(flat)]
        return tf.group(*ops)

    def start(self):
        """A launch's first local step: the weights, and Adam's moments and powers from the ps,
        where the synchronous phase left them (the input moments, which have none, start at zero)."""
        starts = [self.pull()]
        for (device, members), m, v in zip(self.groups, self.m, self.v):
            for slot, local_slot in (("m", m), ("v", v)):
                parts = []
                for i in members:
                    var = self.made[i]
                    held = self._opt.get_slot(var, slot) if var.name in self._train_names else None
                    parts.append(tf.reshape(held if held is not None else tf.zeros_like(var), [-1]))
                with tf.compat.v1.device(device):
                    flat_slot = tf.concat(parts, 0)
                with tf.compat.v1.device(self._here):
                    starts.append(local_slot.assign(flat_slot))
        b1, b2 = self._opt._get_beta_accumulators()  # Adam's step count, as TF keeps it
        with tf.compat.v1.device(self._here):
            starts += [self._powers[0].assign(b1), self._powers[1].assign(b2)]
        return tf.group(*starts)

    def trainable_changes(self, trainable) -> list:
        """The changes of ``trainable`` (in its order): the ps's variables a sync adds them to."""
        by_name = {v.name: c for v, c in zip(self.made, self.changes)}
        return [by_name[v.name] for v in trainable]
