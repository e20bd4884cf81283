"""The convolutional-recurrent model (DeepConvLSTM-style, ``--model convlstm``): the default.

1-D convolutions over time, each followed by a ReLU and a max-pool, shorten the 128-step window
(to 16 steps with three pools of 2); after dropout, (bi)LSTMs (the fused BlockLSTM of model.py)
run over the short sequence; the readout (the forward LSTM's last and the backward LSTM's first
state, or the mean over time) goes through dropout to a linear output layer.  Variables come
from ``tf.compat.v1.get_variable``, so a ``replica_device_setter`` puts them on the ps tasks.

Chosen on the validation volunteers (docs/har.md): with the chosen augmentation it reaches
97.4 % validation accuracy against resbidir's 86.7 % (91.8 % without augmentation), at a
third to a sixth of its time per epoch.  Per-step layer norm after the convolutions
(``conv_norm``) and the mean readout were measured and not chosen.
"""

from dataclasses import dataclass

import tensorflow as tf

from picluster.data.har.spec import CHANNELS, CLASSES
from picluster.jobs.har.model import NOREG, STEPS, lstm_block
from picluster.jobs.har.noise import Noise


@dataclass(frozen=True)
class ConvShape:
    layers: int = 3
    filters: int = 64
    kernel: int = 5
    pool: int = 2
    rnn_layers: int = 1
    rnn_hidden: int = 64  # per LSTM layer output; half per direction when bidirectional
    bidir: bool = True
    readout: str = "last"  # "last": forward's last and backward's first state; "mean": over time; "both"
    conv_norm: bool = False  # per-step layer norm (over filters) after each convolution
    inputs: int = len(CHANNELS)
    classes: int = len(CLASSES)

    @property
    def units(self) -> int:
        return self.rnn_hidden // 2 if self.bidir else self.rnn_hidden

    @property
    def steps(self) -> int:
        """The sequence the LSTMs run over: ceil(128 / pool) per convolution."""
        t = STEPS
        for _ in range(self.layers):
            t = -(-t // self.pool)
        return t

    @property
    def head_inputs(self) -> int:
        return self.rnn_hidden * (2 if self.readout == "both" else 1)

    def parameter_count(self) -> int:
        """Hand count, for tests and the benchmark."""
        total, n_in = 0, self.inputs
        for _ in range(self.layers):
            total += self.kernel * n_in * self.filters + self.filters + (2 * self.filters if self.conv_norm else 0)
            n_in = self.filters
        directions = 2 if self.bidir else 1
        for _ in range(self.rnn_layers):
            u = self.units
            total += directions * ((n_in + u) * 4 * u + 4 * u)
            n_in = self.rnn_hidden
        return total + self.head_inputs * self.classes + self.classes


def conv_logits(x, shape: ConvShape, noise: Noise):
    """x [B, 128, 9] -> logits [B, classes]; ``noise``: the dropout (noise.py)."""
    h = x
    n_in = shape.inputs
    for i in range(shape.layers):
        with tf.compat.v1.variable_scope(f"conv_{i + 1}"):
            w = tf.compat.v1.get_variable(
                "w", [shape.kernel, n_in, shape.filters],
                initializer=tf.compat.v1.variance_scaling_initializer(2.0, "fan_in", "truncated_normal"))
            b = tf.compat.v1.get_variable(f"b_{NOREG}", [shape.filters], initializer=tf.compat.v1.zeros_initializer())
            h = tf.nn.conv1d(h, w, stride=1, padding="SAME") + b
            if shape.conv_norm:
                gain = tf.compat.v1.get_variable(f"gain_{NOREG}", [shape.filters], initializer=tf.compat.v1.ones_initializer())
                bias = tf.compat.v1.get_variable(f"bias_{NOREG}", [shape.filters], initializer=tf.compat.v1.zeros_initializer())
                mean, variance = tf.nn.moments(h, axes=[2], keepdims=True)
                h = (h - mean) * tf.math.rsqrt(variance + 1e-3) * gain + bias
            h = tf.nn.relu(h)
            if shape.pool > 1:
                h = tf.nn.max_pool1d(h, shape.pool, shape.pool, padding="SAME")
        n_in = shape.filters
    h = noise.dropout(h, site=1)
    h = tf.transpose(h, [1, 0, 2])  # [T', B, F], time-major for the fused kernel
    last = None
    for layer in range(shape.rnn_layers):
        with tf.compat.v1.variable_scope(f"rnn_{layer + 1}"):
            if shape.bidir:
                fwd = lstm_block(h, shape.units, "forward")
                bwd = tf.reverse(lstm_block(tf.reverse(h, [0]), shape.units, "backward"), [0])
                h = tf.concat([fwd, bwd], axis=2)
                last = tf.concat([fwd[-1], bwd[0]], axis=1)  # each direction's state after the whole window
            else:
                h = lstm_block(h, shape.units, "lstm")
                last = h[-1]
    if shape.readout == "last":
        summary = last
    elif shape.readout == "mean":
        summary = tf.reduce_mean(h, axis=0)
    else:
        summary = tf.concat([last, tf.reduce_mean(h, axis=0)], axis=1)
    summary = noise.dropout(summary, site=2)
    with tf.compat.v1.variable_scope("output"):
        w = tf.compat.v1.get_variable("w", [shape.head_inputs, shape.classes],
                                      initializer=tf.compat.v1.glorot_uniform_initializer())
        b = tf.compat.v1.get_variable(f"b_{NOREG}", [shape.classes], initializer=tf.compat.v1.zeros_initializer())
    return tf.matmul(summary, w) + b
