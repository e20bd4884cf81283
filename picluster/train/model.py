"""The deep residual (bidirectional) LSTM of the thesis (ch. 4.3.5), built from TensorFlow ops in a v1 graph.

Keras 3 cells cannot live in a v1 graph, so each LSTM is one fused ``BlockLSTM`` kernel
(a whole 128-step sequence per op, forward and backward); ``benchmarks/har.py --cells``
compares it with a ``tf.while_loop`` cell.  Variables are created with
``tf.compat.v1.get_variable`` so a ``replica_device_setter`` can put them on the ps tasks.

Layout, as in the thesis' appendix code: input dropout; for each stacked block, ``residual``
LSTMs read the block's input, each behind its own ReLU projection, and are summed; in
bidirectional mode each is two LSTMs of hidden/2 units (one on the reversed sequence),
concatenated; block outputs are normalised when residual; the last time step goes through
dropout to a linear output layer.
"""

from dataclasses import dataclass

from picluster.har.spec import CHANNELS, CLASSES

STEPS = 128
FORGET_BIAS = 1.0
FC_STDDEV = 0.2  # thesis: weights N(0, 0.2) for the ReLU projections
FC_BIAS_MEAN = 0.3  # thesis: projection biases N(0.3, 0.2)
NOREG = "noreg"  # variables whose name holds this are left out of the L2 term


@dataclass(frozen=True)
class Shape:
    layers: int
    residual: int
    hidden: int
    bidir: bool
    inputs: int = len(CHANNELS)
    classes: int = len(CLASSES)

    @property
    def units(self) -> int:
        """Units of one LSTM: half the hidden size per direction when bidirectional."""
        return self.hidden // 2 if self.bidir else self.hidden

    def parameter_count(self) -> int:
        """Hand count, for tests and the run summary."""
        u = self.units
        directions = 2 if self.bidir else 1
        total = 0
        for block in range(self.layers):
            n_in = self.inputs if block == 0 else self.hidden
            one_lstm = (n_in * u + u) + ((u + u) * 4 * u + 4 * u)  # ReLU projection + LSTM
            total += self.residual * directions * one_lstm
            if self.residual > 1:
                total += 2  # normalisation scale and offset
        return total + self.hidden * self.classes + self.classes


def _fc(tf, x, n_in, n_out, name):
    with tf.compat.v1.variable_scope(name):
        w = tf.compat.v1.get_variable("w", initializer=tf.random.normal([n_in, n_out], stddev=FC_STDDEV))
        b = tf.compat.v1.get_variable(
            f"b_{NOREG}", initializer=tf.random.normal([n_out], mean=FC_BIAS_MEAN, stddev=FC_STDDEV)
        )
    return w, b


def _lstm_variables(tf, n_in, units, name):
    """Kernel [n_in + units, 4 units] in BlockLSTM's gate order (i, c, f, o) and bias: both cells share them."""
    with tf.compat.v1.variable_scope(name):
        w = tf.compat.v1.get_variable(
            "w", [n_in + units, 4 * units], initializer=tf.compat.v1.glorot_uniform_initializer()
        )
        b = tf.compat.v1.get_variable(f"b_{NOREG}", [4 * units], initializer=tf.compat.v1.zeros_initializer())
    return w, b


def _lstm_block(tf, x, units, name):
    """x [T, B, n] -> h [T, B, units] with one fused kernel."""
    w, b = _lstm_variables(tf, int(x.shape[-1]), units, name)
    batch = tf.shape(x)[1]
    zeros = tf.zeros(tf.stack([batch, units]))
    no_peep = tf.zeros([units])
    out = tf.raw_ops.BlockLSTM(
        seq_len_max=tf.constant(STEPS, tf.int64), x=x, cs_prev=zeros, h_prev=zeros, w=w,
        wci=no_peep, wcf=no_peep, wco=no_peep, b=b,
        forget_bias=FORGET_BIAS, cell_clip=-1.0, use_peephole=False,
    )
    return out.h


def _lstm_loop(tf, x, units, name):
    """The same cell as a tf.while_loop over time steps (kept to compare speed)."""
    w, b = _lstm_variables(tf, int(x.shape[-1]), units, name)
    batch = tf.shape(x)[1]
    zeros = tf.zeros(tf.stack([batch, units]))
    xs = tf.TensorArray(tf.float32, size=STEPS).unstack(x)
    hs = tf.TensorArray(tf.float32, size=STEPS)

    def body(t, c, h, hs):
        z = tf.matmul(tf.concat([xs.read(t), h], 1), w) + b
        i, ci, f, o = tf.split(z, 4, axis=1)  # BlockLSTM's gate order
        c = tf.sigmoid(f + FORGET_BIAS) * c + tf.sigmoid(i) * tf.tanh(ci)
        h = tf.sigmoid(o) * tf.tanh(c)
        return t + 1, c, h, hs.write(t, h)

    _, _, _, hs = tf.while_loop(lambda t, *_: t < STEPS, body, [tf.constant(0), zeros, zeros, hs])
    return hs.stack()


def _projected_lstm(tf, x, units, name, cell):
    """ReLU projection of every time step, then an LSTM."""
    n_in = int(x.shape[-1])
    w, b = _fc(tf, x, n_in, units, f"{name}/relu_fc")
    flat = tf.reshape(x, [-1, n_in])
    projected = tf.reshape(tf.nn.relu(tf.matmul(flat, w) + b), tf.stack([STEPS, -1, units]))
    return cell(tf, projected, units, f"{name}/lstm")


def _normalise(tf, h, name):
    # Thesis: moments over the batch and units of each step, one learnt scalar scale
    # (init 0.5) and offset.  We take them over each window's units and steps instead, so a
    # window's prediction does not depend on its batch and no running averages must live on ps.
    with tf.compat.v1.variable_scope(name):
        scale = tf.compat.v1.get_variable(f"scale_{NOREG}", initializer=tf.constant([0.5]))
        offset = tf.compat.v1.get_variable(f"offset_{NOREG}", initializer=tf.constant([0.0]))
    mean, variance = tf.nn.moments(h, axes=[0, 2], keepdims=True)
    return (h - mean) / tf.sqrt(variance + 1e-3) * scale + offset


def logits(tf, x, shape: Shape, keep_prob, cell: str = "block"):
    """x [B, 128, 9] -> logits [B, classes]."""
    lstm = {"block": _lstm_block, "loop": _lstm_loop}[cell]
    h = tf.nn.dropout(x, rate=1.0 - keep_prob)
    h = tf.transpose(h, [1, 0, 2])  # time-major for the fused kernel
    for block in range(shape.layers):
        with tf.compat.v1.variable_scope(f"block_{block + 1}"):
            total = None
            for r in range(shape.residual):
                name = f"lstm_{r + 1}"
                if shape.bidir:
                    fwd = _projected_lstm(tf, h, shape.units, f"{name}/forward", lstm)
                    bwd = tf.reverse(_projected_lstm(tf, tf.reverse(h, [0]), shape.units, f"{name}/backward", lstm), [0])
                    out = tf.concat([fwd, bwd], axis=2)
                else:
                    out = _projected_lstm(tf, h, shape.units, name, lstm)
                total = out if total is None else total + out
            h = _normalise(tf, total, "norm") if shape.residual > 1 else total
    last = tf.nn.dropout(h[-1], rate=1.0 - keep_prob)
    with tf.compat.v1.variable_scope("output"):
        # Thesis: ReLU on the logits too; a linear output layer lets a class score go negative.
        w, b = _fc(tf, last, shape.hidden, shape.classes, "fc")
    return tf.matmul(last, w) + b


def l2_penalty(tf, variables):
    return tf.add_n([tf.nn.l2_loss(v) for v in variables if NOREG not in v.name])
