"""The fused exchange: per ps task, one flat tensor of weights to the worker and one of gradients back.

Read as variables, a step fetches every variable with its own tensor transfer (one ``RecvTensor``
RPC each, about 36 a worker-step for the default model) and sends every gradient the same way; a
0.117-core ps spends its time on the messages, not the bytes.  Fused (Horovod's tensor fusion,
done in the graph), each ps concatenates its share of the weights into one tensor, the worker
splits it into local copies that the model reads, and the gradients with respect to those copies
go back concatenated, to be split on the ps next to the variables they update.  The arithmetic is
the same; only the number of messages changes.

On a 16-bit wire (``--wire bfloat16``) both directions carry half the bytes: the worker casts its
flat gradients to bfloat16 and the ps casts them back before averaging; the ps keeps one bfloat16
copy of its share of the weights, refreshed once per update, for every worker to read and cast back.
The weights, Adam and the averaging stay float32 on the ps (Micikevicius et al., 2018: fp16
storage with fp32 master weights); gRPC sends a bfloat16 tensor as its raw 2-byte content.
"""

import tensorflow as tf

WIRES = {"float32": tf.float32, "bfloat16": tf.bfloat16}
# The 16-bit copies are out of every collection a Saver or an init op reads: a checkpoint holds the
# float32 weights, and the chief fills the copies itself (FusedWeights.start) before the workers read.
WIRE_COLLECTION = "picluster_wire"


class FusedWeights:
    """Local copies of ``variables`` on the device ``here``, read as one tensor per ps task (in
    ``wire``'s type: a 16-bit one through a copy on the ps)."""

    def __init__(self, variables, here: str, wire=tf.float32) -> None:
        self._local: dict[str, tf.Tensor] = {}
        self.wire = wire
        self.flats = []  # one per ps task, on that ps: what a worker reads
        self._groups = by_ps(variables)
        self._variables = list(variables)
        self.copies = []  # the 16-bit copies, one per ps task (none on a float32 wire)
        for device, members in self._groups:
            with tf.compat.v1.device(device):
                flat = _concat([variables[i] for i in members])
                if wire != tf.float32:
                    copy = tf.Variable(tf.zeros(flat.shape, wire), trainable=False, collections=[WIRE_COLLECTION], name="wire_weights")
                    self.copies.append(copy)
                    flat = copy.read_value()
            self.flats.append(flat)
            with tf.compat.v1.device(here):
                for i, piece in zip(members, split(from_wire(flat), [variables[i].shape for i in members])):
                    self._local[variables[i].name] = piece
        self.start = self.refresh(tf.group(*[c.initializer for c in self.copies])) if self.copies else None

    def refresh(self, after) -> tf.Operation:
        """The 16-bit copies made again from the weights once ``after`` (the update) has run; ``after``
        itself on a float32 wire, where the workers read the weights directly."""
        if not self.copies:
            return after
        assigns = []
        with tf.control_dependencies([after]):
            for copy, (device, members) in zip(self.copies, self._groups):
                with tf.compat.v1.device(device):  # read after the update: a new concat under its dependency
                    assigns.append(copy.assign(tf.cast(_concat([self._variables[i] for i in members]), copy.dtype), read_value=False))
        return tf.group(*assigns)

    def value(self, variable) -> tf.Tensor:
        """The worker's copy of ``variable`` this step (the variable itself if it is not fused)."""
        return self._local.get(variable.name, variable)

    def getter(self, getter, name, *args, **kwargs):
        """A variable scope's custom getter: the model built with it reads the local copies."""
        return self.value(getter(name, *args, **kwargs))


def send(grads, variables, here: str, wire=tf.float32) -> list:
    """Gradients (one per variable, on ``here``) concatenated per ps (in ``wire``'s type) and split
    again on each ps: what ``apply_gradients`` there reads without another transfer per variable."""
    out = [None] * len(variables)
    for device, members in by_ps(variables):
        flat = to_wire(flatten([grads[i] for i in members], here), wire, here)
        with tf.compat.v1.device(device):
            for i, g in zip(members, split(from_wire(flat), [variables[i].shape for i in members])):
                out[i] = g
    return out


def to_wire(flat, wire, here: str | None) -> tf.Tensor:
    """``flat`` as ``wire``'s type, cast on ``here`` (the sender): the bytes a transfer carries."""
    if wire == flat.dtype:
        return flat
    with tf.compat.v1.device(here):
        return tf.cast(flat, wire)


def from_wire(flat) -> tf.Tensor:
    """``flat`` as float32 again, on whichever device the calling scope names (the receiver)."""
    return flat if flat.dtype == tf.float32 else tf.cast(flat, tf.float32)


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
        return _concat(tensors, "fused_gradients")


def _concat(tensors, name: str = "fused_weights") -> tf.Tensor:
    return tf.concat([tf.reshape(t, [-1]) for t in tensors], 0, name=name)


def split(flat, shapes) -> list:
    """``flat`` cut back into ``shapes``, on whichever device the calling scope names."""
    pieces = tf.split(flat, [int(tf.TensorShape(s).num_elements()) for s in shapes], 0)
    return [tf.reshape(p, s) for p, s in zip(pieces, shapes)]


class StandIns:
    """The model built once on the fused exchange: a custom getter that hands the model, for each
    variable it makes, an identity of it (a stand-in), and ``read`` then points each stand-in at the
    worker's local copy.  The fused read needs every variable made before it, and building the
    model a second time on the copies cost as much as the first build (a Pi-shaped host's start-up
    spent seconds on it); the stand-in's old input, the variable's own read, is then never run."""

    def __init__(self) -> None:
        self.variables: list = []
        self._stand_ins: list[tuple] = []  # (variable, its stand-in), each time the model asks

    def getter(self, getter, name, *args, **kwargs):
        variable = getter(name, *args, **kwargs)
        if all(variable is not v for v in self.variables):
            self.variables.append(variable)
        stand_in = tf.identity(variable, name="stand_in")
        self._stand_ins.append((variable, stand_in))
        return stand_in

    def read(self, value) -> None:
        """Each stand-in reads ``value(variable)`` from now on (Operation._update_input: TensorFlow's
        own graph rewriting, as its control flow uses it)."""
        for variable, stand_in in self._stand_ins:
            stand_in.op._update_input(0, value(variable))


class Rounded:
    """For the emulator: each variable's value as a ``wire`` of 16 bits brings it to a worker,
    one rounded tensor per variable shared by every tower (a custom getter and ``value``)."""

    def __init__(self, wire) -> None:
        self.wire = wire
        self._by_name: dict[str, tf.Tensor] = {}

    def getter(self, getter, name, *args, **kwargs):
        variable = getter(name, *args, **kwargs)
        if variable.name not in self._by_name:
            self._by_name[variable.name] = from_wire(tf.cast(variable, self.wire))
        return self._by_name[variable.name]

    def value(self, variable) -> tf.Tensor:
        return self._by_name.get(variable.name, variable)
