"""The fused exchange: per ps task, one flat tensor of weights to the worker and one of gradients back.

Read as variables, a step fetches every variable with its own tensor transfer (one ``RecvTensor``
RPC each, about 36 a worker-step for the default model) and sends every gradient the same way; a
0.117-core ps spends its time on the messages, not the bytes.  Fused (Horovod's tensor fusion,
done in the graph), each ps concatenates its share of the weights into one tensor, the worker
splits it into local copies that the model reads, and the gradients with respect to those copies
go back concatenated, to be split on the ps next to the variables they update.  The arithmetic is
the same; only the number of messages changes.
"""

import tensorflow as tf


class FusedWeights:
    """Local copies of ``variables`` on the device ``here``, read as one tensor per ps task."""

    def __init__(self, variables, here: str) -> None:
        self._local: dict[str, tf.Tensor] = {}
        self.flats = []  # one per ps task, on that ps
        for device, members in by_ps(variables):
            with tf.compat.v1.device(device):
                flat = tf.concat([tf.reshape(variables[i], [-1]) for i in members], 0, name="fused_weights")
            self.flats.append(flat)
            with tf.compat.v1.device(here):
                for i, copy in zip(members, split(flat, [variables[i].shape for i in members])):
                    self._local[variables[i].name] = copy

    def value(self, variable) -> tf.Tensor:
        """The worker's copy of ``variable`` this step (the variable itself if it is not fused)."""
        return self._local.get(variable.name, variable)

    def getter(self, getter, name, *args, **kwargs):
        """A variable scope's custom getter: the model built with it reads the local copies."""
        return self.value(getter(name, *args, **kwargs))


def send(grads, variables, here: str) -> list:
    """Gradients (one per variable, on ``here``) concatenated per ps and split again on each ps:
    what ``apply_gradients`` there reads without another transfer per variable."""
    out = [None] * len(variables)
    for device, members in by_ps(variables):
        flat = flatten([grads[i] for i in members], here)
        with tf.compat.v1.device(device):
            for i, g in zip(members, split(flat, [variables[i].shape for i in members])):
                out[i] = g
    return out


def by_ps(variables) -> list[tuple[str, list[int]]]:
    """The indexes of ``variables`` grouped by the ps device each lives on, in device order: every
    worker builds the same groups, so a flat tensor means the same on both ends."""
    groups: dict[str, list[int]] = {}
    for i, v in enumerate(variables):
        groups.setdefault(v.device, []).append(i)
    return sorted(groups.items())


def flatten(tensors, here: str | None) -> tf.Tensor:
    """One flat tensor of ``tensors``, made on ``here`` (None: where the caller's scope says): one
    transfer where there were as many."""
    with tf.compat.v1.device(here):
        return tf.concat([tf.reshape(t, [-1]) for t in tensors], 0, name="fused_gradients")


def split(flat, shapes) -> list:
    """``flat`` cut back into ``shapes``, on whichever device the calling scope names."""
    pieces = tf.split(flat, [int(tf.TensorShape(s).num_elements()) for s in shapes], 0)
    return [tf.reshape(p, s) for p, s in zip(pieces, shapes)]
