"""Training-window augmentation (picluster.jobs.har.augment) and the convlstm candidate's shape: no cluster."""

import numpy as np
import pytest

from picluster.jobs.har.augment import augment, parse, rotations
from picluster.jobs.har.convlstm import ConvShape, conv_logits
from picluster.jobs.har.noise import Noise


def _windows(n=6, seed=1):
    return np.random.default_rng(seed).normal(size=(n, 128, 9)).astype(np.float32)


def test_rotations_are_proper_and_bounded():
    r = rotations(np.random.default_rng(0), 200, 20.0)
    np.testing.assert_allclose(r @ r.transpose(0, 2, 1), np.broadcast_to(np.eye(3), r.shape), atol=1e-12)
    np.testing.assert_allclose(np.linalg.det(r), 1.0, atol=1e-12)
    angle = np.degrees(np.arccos(np.clip((np.trace(r, axis1=1, axis2=2) - 1) / 2, -1, 1)))
    assert angle.max() <= 20.0 + 1e-6


def test_rotation_turns_the_three_triads_together_and_keeps_their_lengths():
    x = _windows()
    y = augment(x, np.random.default_rng(2), parse("rotate:40"))
    for triad in ((0, 1, 2), (3, 4, 5), (6, 7, 8)):
        np.testing.assert_allclose(np.linalg.norm(y[:, :, triad], axis=2), np.linalg.norm(x[:, :, triad], axis=2), rtol=1e-5)
    # The same rotation for body and total acceleration: their difference (gravity) turns with them.
    gravity_x, gravity_y = x[:, :, 6:9] - x[:, :, 0:3], y[:, :, 6:9] - y[:, :, 0:3]
    np.testing.assert_allclose(np.linalg.norm(gravity_y, axis=2), np.linalg.norm(gravity_x, axis=2), rtol=1e-5)


def test_mirror_flips_y_of_accelerations_and_x_z_of_rates():
    x = _windows()
    y = augment(x, np.random.default_rng(3), parse("mirror:1"))
    np.testing.assert_array_equal(y[:, :, [0, 2, 4, 6, 8]], x[:, :, [0, 2, 4, 6, 8]])
    np.testing.assert_array_equal(y[:, :, [1, 3, 5, 7]], -x[:, :, [1, 3, 5, 7]])


def test_scale_and_shift_keep_the_shape_and_the_same_generator_gives_the_same_windows():
    x = _windows()
    spec = parse("rotate:15,mirror:0.5,scale:0.1,shift:8")
    a = augment(x, np.random.default_rng([1, 2, 0, 1]), spec)
    b = augment(x, np.random.default_rng([1, 2, 0, 1]), spec)
    assert a.shape == x.shape and a.dtype == np.float32
    np.testing.assert_array_equal(a, b)
    assert not np.array_equal(a, x)
    assert augment(x, np.random.default_rng(0), parse("")) is x


@pytest.mark.parametrize("spec, words", [
    ("spin:3", "unknown part 'spin'"), ("rotate", "needs a value"), ("scale", "needs a value"),
    ("rotate:abc", "not a number"), ("rotate:nan", "from 0 to 180"), ("rotate:270", "from 0 to 180"),
    ("mirror:1.5", "from 0 to 1"), ("scale:-0.1", "from 0 to 0.99"), ("shift:2.5", "whole number"),
    ("shift:8,shift:4", "given twice"),
])
def test_bad_specs_are_refused(spec, words):
    with pytest.raises(ValueError, match=words):
        parse(spec)


def test_a_spec_parses_to_its_parts():
    assert parse("rotate:45, mirror ,scale:0.1,shift:8") == {"rotate": 45.0, "mirror": 0.5, "scale": 0.1, "shift": 8.0}
    assert parse("") == {}


@pytest.mark.parametrize("shape", [ConvShape(), ConvShape(layers=2, filters=8, rnn_layers=2, rnn_hidden=6, readout="both"),
                                   ConvShape(filters=4, bidir=False, readout="mean", conv_norm=True)])
def test_convlstm_output_and_parameter_count(shape):
    import tensorflow as tf

    graph = tf.Graph()
    with graph.as_default():
        x = tf.compat.v1.placeholder(tf.float32, [None, 128, 9])
        out = conv_logits(x, shape, Noise(1.0))
        count = sum(int(np.prod(v.shape)) for v in tf.compat.v1.trainable_variables())
        with tf.compat.v1.Session() as session:
            session.run(tf.compat.v1.global_variables_initializer())
            value = session.run(out, {x: _windows(5)})
    assert value.shape == (5, 6) and count == shape.parameter_count()


def test_the_chosen_convlstm_has_the_measured_parameter_count():
    assert ConvShape().parameter_count() == 69_254  # docs/har.md
    assert ConvShape().steps == 16  # 128 steps after three pools of 2
