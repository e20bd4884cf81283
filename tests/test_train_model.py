"""The network's shapes and parameter counts, the config's checks and the scores: no cluster needed."""

import numpy as np
import pytest

from picluster.errors import UsageError
from picluster.train.config import TrainConfig
from picluster.train.metrics import confusion, weighted_f1
from picluster.train.model import Shape, logits


def _build(shape: Shape, cell: str = "block"):
    import tensorflow as tf

    graph = tf.Graph()
    with graph.as_default():
        x = tf.compat.v1.placeholder(tf.float32, [None, 128, 9])
        out = logits(tf, x, shape, tf.constant(1.0), cell)
        count = sum(int(np.prod(v.shape)) for v in tf.compat.v1.trainable_variables())
        with tf.compat.v1.Session() as session:
            session.run(tf.compat.v1.global_variables_initializer())
            value = session.run(out, {x: np.zeros((5, 128, 9), np.float32)})
    return value.shape, count


@pytest.mark.parametrize(
    "shape, expected",
    [
        # 1 block, 4 units: projection 9*4+4, LSTM (4+4)*16+16, output 4*6+6.
        (Shape(1, 1, 4, False), (9 * 4 + 4) + (8 * 16 + 16) + (4 * 6 + 6)),
        # bidirectional 8 = two directions of 4 units, same LSTMs twice, output from 8 units.
        (Shape(1, 1, 8, True), 2 * ((9 * 4 + 4) + (8 * 16 + 16)) + (8 * 6 + 6)),
        # 2 blocks x 2 residual LSTMs, 6 units: the second block reads 6 features; 2 norm scalars per block.
        (
            Shape(2, 2, 6, False),
            2 * ((9 * 6 + 6) + (12 * 24 + 24)) + 2 + 2 * ((6 * 6 + 6) + (12 * 24 + 24)) + 2 + (6 * 6 + 6),
        ),
    ],
)
def test_output_shape_and_parameter_count(shape, expected):
    assert shape.parameter_count() == expected
    assert _build(shape) == ((5, 6), expected)


def test_while_loop_cell_has_the_same_parameters():
    shape = Shape(1, 2, 4, True)
    assert _build(shape, "loop") == _build(shape, "block")


def test_fused_and_loop_cells_compute_the_same_function():
    import tensorflow as tf

    outs = []
    for cell in ("block", "loop"):
        graph = tf.Graph()
        with graph.as_default():
            tf.compat.v1.set_random_seed(3)
            x = tf.compat.v1.placeholder(tf.float32, [None, 128, 9])
            out = logits(tf, x, Shape(1, 1, 4, False), tf.constant(1.0), cell)
            with tf.compat.v1.Session() as session:
                session.run(tf.compat.v1.global_variables_initializer())
                outs.append(session.run(out, {x: np.random.default_rng(0).normal(size=(3, 128, 9)).astype(np.float32)}))
    np.testing.assert_allclose(outs[0], outs[1], rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize(
    "kwargs, words",
    [
        ({"layers": 0}, "--layers 0"),
        ({"hidden": 3}, "must be even"),
        ({"residual": -1}, "--residual -1"),
        ({"batch": 0}, "--batch 0"),
        ({"keep_prob": 0.0}, "--keep-prob"),
        ({"mode": "semi"}, "--mode"),
    ],
)
def test_bad_config_is_a_usage_error(kwargs, words):
    with pytest.raises(UsageError, match=words):
        TrainConfig(**kwargs)


def test_odd_hidden_is_fine_without_bidir():
    assert TrainConfig(hidden=3, bidir=False).hidden == 3


def test_weighted_f1_and_confusion():
    y = np.array([0, 0, 1, 1, 1, 2])
    p = np.array([0, 1, 1, 1, 2, 2])
    m = confusion(y, p, 3)
    assert m.tolist() == [[1, 1, 0], [0, 2, 1], [0, 0, 1]]
    # per class F1: 2/3, 2/3, 2/3 -> weighted 2/3
    assert weighted_f1(m) == pytest.approx(2 / 3)
    assert weighted_f1(confusion(y, y, 3)) == 1.0
