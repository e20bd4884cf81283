"""The network's shapes and parameter counts, the config's checks and the scores: no cluster needed."""

from dataclasses import replace

import numpy as np
import pytest

from picluster.jobs.har.config import TrainConfig
from picluster.jobs.har.metrics import confusion, weighted_f1
from picluster.jobs.har.model import Shape, channel_moments, logits
from picluster.jobs.har.noise import Noise
from picluster.util.errors import UsageError


def _build(shape: Shape, cell: str = "block"):
    import tensorflow as tf

    graph = tf.Graph()
    with graph.as_default():
        x = tf.compat.v1.placeholder(tf.float32, [None, 128, 9])
        out = logits(x, shape, Noise(1.0), cell)
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
        # window statistics: the output layer also reads 9 means and 9 deviations.
        (Shape(1, 1, 4, False, window_stats=True), (9 * 4 + 4) + (8 * 16 + 16) + ((4 + 18) * 6 + 6)),
    ],
)
def test_output_shape_and_parameter_count(shape, expected):
    assert shape.parameter_count() == expected
    assert _build(shape) == ((5, 6), expected)


def test_no_normalisation_has_no_scale_and_offset():
    shape = Shape(2, 2, 6, False, norm="none")
    expected = 2 * ((9 * 6 + 6) + (12 * 24 + 24)) + 2 * ((6 * 6 + 6) + (12 * 24 + 24)) + (6 * 6 + 6)
    assert shape.parameter_count() == expected
    assert _build(shape) == ((5, 6), expected)


def _predict(shape: Shape, x: np.ndarray) -> np.ndarray:
    import tensorflow as tf

    graph = tf.Graph()
    with graph.as_default():
        tf.compat.v1.set_random_seed(5)
        xs = tf.compat.v1.placeholder(tf.float32, [None, 128, 9])
        out = logits(xs, shape, Noise(1.0))
        with tf.compat.v1.Session() as session:
            session.run(tf.compat.v1.global_variables_initializer())
            return session.run(out, {xs: x})


@pytest.mark.parametrize("norm, independent", [("window", True), ("step", True), ("none", True), ("batch", False)])
def test_only_batch_norm_makes_a_window_depend_on_its_batch(norm, independent):
    x = np.random.default_rng(1).normal(size=(4, 128, 9)).astype(np.float32)
    shape = Shape(1, 2, 4, True, norm=norm)
    alone = _predict(shape, x[:1])
    together = _predict(shape, x)[:1]
    assert np.allclose(alone, together, atol=1e-5) == independent


def test_relu_logits_are_never_negative():
    x = np.random.default_rng(2).normal(size=(8, 128, 9)).astype(np.float32)
    linear = _predict(Shape(1, 1, 4, False), x)
    relu = _predict(Shape(1, 1, 4, False, relu_logits=True), x)  # same seed, same variables
    np.testing.assert_allclose(relu, np.maximum(linear, 0.0), rtol=1e-6)


def test_channel_moments_standardise_the_training_windows():
    rng = np.random.default_rng(3)
    x = (rng.normal(size=(50, 128, 9)) * np.arange(1, 10) + np.arange(9)).astype(np.float32)
    mean, std = channel_moments(x)
    assert mean.shape == std.shape == (9,) and mean.dtype == np.float32
    z = (x - mean) / std
    np.testing.assert_allclose(z.mean((0, 1)), 0, atol=1e-4)
    np.testing.assert_allclose(z.std((0, 1)), 1, atol=1e-4)
    assert channel_moments(np.zeros((2, 128, 9), np.float32))[1].min() > 0  # a flat channel does not divide by 0


def test_channel_moments_of_the_shared_read_only_set_are_computed_once():
    """A resident server's jobs share data.load_data's read-only arrays: each graph reads their
    moments again, which cost a Pi-shaped host about a second."""
    rng = np.random.default_rng(4)
    shared = rng.normal(size=(40, 128, 9)).astype(np.float32)
    shared.setflags(write=False)
    first = channel_moments(shared)
    assert channel_moments(shared) is first  # kept, not computed again
    writable = shared.copy()
    again = channel_moments(writable)
    np.testing.assert_array_equal(again[0], first[0])
    writable += 1.0  # an array that can change is never taken from the cache
    np.testing.assert_allclose(channel_moments(writable)[0], first[0] + 1.0, rtol=1e-5)
    other = (shared * 2.0).astype(np.float32)
    other.setflags(write=False)
    np.testing.assert_allclose(channel_moments(other)[1], first[1] * 2.0, rtol=1e-5)


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
            out = logits(x, Shape(1, 1, 4, False), Noise(1.0), cell)
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
        ({"norm": "group"}, "--norm"),
        ({"lr_schedule": "step"}, "--lr-schedule"),
    ],
)
def test_bad_config_is_a_usage_error(kwargs, words):
    with pytest.raises(UsageError, match=words):
        TrainConfig(**{"model": "resbidir"} | kwargs)


def test_odd_hidden_is_fine_without_bidir():
    assert TrainConfig(model="resbidir", hidden=3, bidir=False).hidden == 3


def test_accuracy_by_volunteer():
    from picluster.jobs.har.metrics import accuracy_by

    volunteers = np.array([2, 2, 4, 4, 4, 9])
    y = np.array([0, 1, 2, 3, 4, 5])
    pred = np.array([0, 0, 2, 3, 0, 1])
    assert accuracy_by(volunteers, y, pred) == {"2": 0.5, "4": pytest.approx(2 / 3), "9": 0.0}


def test_weighted_f1_and_confusion():
    y = np.array([0, 0, 1, 1, 1, 2])
    p = np.array([0, 1, 1, 1, 2, 2])
    m = confusion(y, p, 3)
    assert m.tolist() == [[1, 1, 0], [0, 2, 1], [0, 0, 1]]
    # per class F1: 2/3, 2/3, 2/3 -> weighted 2/3
    assert weighted_f1(m) == pytest.approx(2 / 3)
    assert weighted_f1(confusion(y, y, 3)) == 1.0


def test_graph_keeps_the_input_moments_as_untrained_variables():
    import types

    import tensorflow as tf

    from picluster.jobs.har.graph import Graph

    tf.compat.v1.disable_eager_execution()
    x = (np.random.default_rng(4).normal(size=(300, 128, 9)) * 3 + 1).astype(np.float32)
    data = types.SimpleNamespace(x_train=x)
    config = TrainConfig(model="resbidir", layers=1, hidden=4, batch=100, standalone=True, standardise=True, lr_schedule="cosine", epochs=2)
    g = Graph(config, data=data)
    assert g.parameters == g.shape.parameter_count()  # the moments are not trained
    with g.graph.as_default(), tf.compat.v1.Session() as session:
        session.run(tf.compat.v1.global_variables_initializer())
        names = {v.name: v for v in tf.compat.v1.global_variables()}
        mean, std = channel_moments(x)
        np.testing.assert_allclose(session.run(names["input/mean_noreg:0"]), mean)
        np.testing.assert_allclose(session.run(names["input/std_noreg:0"]), std)
        before = session.run(names["input/mean_noreg:0"])
        session.run(g.train, {g.x: x[:100], g.y: np.zeros(100, np.int64), g.keep: 0.85})
        np.testing.assert_array_equal(session.run(names["input/mean_noreg:0"]), before)


def test_ema_evaluates_the_moving_average_and_trains_the_raw_weights():
    import types

    import tensorflow as tf

    from picluster.jobs.har.graph import Graph

    tf.compat.v1.disable_eager_execution()
    rng = np.random.default_rng(5)
    x = rng.normal(size=(100, 128, 9)).astype(np.float32)
    y = rng.integers(0, 6, 100)
    config = TrainConfig(model="resbidir", layers=1, residual=2, hidden=4, batch=100, standalone=True, ema=0.9)
    g = Graph(config, data=types.SimpleNamespace(x_train=x))
    assert g.parameters == g.shape.parameter_count()  # the averages are not trained
    with g.graph.as_default(), tf.compat.v1.Session() as session:
        session.run(tf.compat.v1.global_variables_initializer())
        names = {v.op.name: v for v in tf.compat.v1.global_variables()}
        weight, shadow = names["output/fc/w"], names["output/fc/w/ExponentialMovingAverage"]
        start = session.run(shadow)
        for _ in range(3):
            session.run(g.train, {g.x: x, g.y: y, g.keep: 0.85})
        raw, average = session.run([weight, shadow])
        assert not np.allclose(average, start) and not np.allclose(average, raw)  # it moved, and lags
        # A class the raw weights do not answer for every window.
        target = next(c for c in range(6) if session.run(g.correct, {g.x: x, g.y: np.full(100, c)}) < 100)
        # Evaluation reads the averages: make them answer that class whatever the input.
        session.run(shadow.assign(tf.zeros_like(shadow)))
        session.run(names["output/fc/b_noreg/ExponentialMovingAverage"].assign(np.eye(6)[target] * 100))
        assert set(session.run(g.pred, {g.x: x})) == {target}
        # Training still reads the raw weights.
        assert session.run(g.correct, {g.x: x, g.y: np.full(100, target)}) < 100


def test_window_stats_feed_each_channels_mean_and_deviation_to_the_output_layer():
    import tensorflow as tf

    graph = tf.Graph()
    with graph.as_default():
        x = tf.compat.v1.placeholder(tf.float32, [None, 128, 9])
        out = logits(x, Shape(1, 1, 4, False, window_stats=True), Noise(1.0))
        weight = next(v for v in tf.compat.v1.trainable_variables() if v.op.name == "output/fc/w")
        grad = tf.gradients(tf.reduce_sum(out[:, 0]), [weight])[0]
        with tf.compat.v1.Session() as session:
            session.run(tf.compat.v1.global_variables_initializer())
            windows = np.zeros((2, 128, 9), np.float32)
            windows[1, :, 6] = 1.0  # a level (a posture's gravity) on channel 6 of the second window
            windows[1, ::2, 2] = 2.0  # and channel 2 alternating 0 / 2: mean 1, deviation 1
            g = session.run(grad, {x: windows})
    # Rows after the 4 hidden units: 9 means, then 9 deviations; d logit_0 / d w is their sum over windows.
    assert g.shape == (4 + 18, 6)
    np.testing.assert_allclose(g[4:4 + 9, 0], [0, 0, 1, 0, 0, 0, 1, 0, 0], atol=1e-5)
    np.testing.assert_allclose(g[4 + 9:, 0], [0, 0, 1, 0, 0, 0, 0, 0, 0], atol=1e-2)
    assert not g[4:, 1:].any()


def test_the_defaults_are_the_chosen_recipe_and_resbidir_keeps_its_former_ones():
    recipe = TrainConfig.for_model(model="convlstm", standardise=True, l2=0.0005, epochs=60,
                                   augment="rotate:45,scale:0.1,shift:8")  # no mirror: docs/har.md's cross-validation
    # What a user gets is for_model's: a sync run's exchange is the all-reduce (config.default_exchange).
    assert TrainConfig.for_model() == recipe == replace(TrainConfig(), exchange="allreduce")
    thesis = TrainConfig.for_model(model="resbidir")
    assert (thesis.standardise, thesis.l2, thesis.augment, thesis.epochs) == (False, 0.005, "", 40)
    assert TrainConfig.for_model(model="resbidir", augment="rotate:15", epochs=5).augment == "rotate:15"  # given wins


@pytest.mark.parametrize("kwargs, words", [
    ({"residual": 2}, "--residual applies to --model resbidir only, not convlstm"),  # given, even at its default
    ({"model": "resbidir", "conv_norm": False}, "--conv-norm applies to --model convlstm only"),
])
def test_an_option_of_the_other_model_is_refused_even_at_its_default(kwargs, words):
    with pytest.raises(UsageError, match=words):
        TrainConfig.for_model(**kwargs)


def test_layers_is_the_depth_of_whichever_model_runs():
    """`picluster train har --layers 3` (the card's command) trains the recipe: --layers is the
    convlstm's convolution blocks as much as resbidir's stacked blocks."""
    from picluster.jobs.har.graph import network

    assert TrainConfig.for_model(layers=3) == TrainConfig.for_model()
    conv, _ = network(TrainConfig.for_model(layers=2))
    thesis, _ = network(TrainConfig.for_model(model="resbidir", layers=5))
    assert (conv.layers, thesis.layers) == (2, 5)
    with pytest.raises(UsageError, match="at most 7 convolution blocks"):
        TrainConfig.for_model(layers=8)
    assert TrainConfig.for_model(model="resbidir", layers=16).layers == 16


def test_a_config_json_that_names_the_convolutions_conv_layers_resumes_with_them_as_layers(tmp_path):
    """Run directories written before --layers served both models keep their depth."""
    import json

    old = json.loads(TrainConfig().to_json())
    old["conv_layers"] = 2
    (tmp_path / "config.json").write_text(json.dumps(old))
    assert TrainConfig.load(tmp_path / "config.json").layers == 2
    thesis = json.loads(TrainConfig.for_model(model="resbidir", layers=4).to_json()) | {"conv_layers": 3}
    (tmp_path / "config.json").write_text(json.dumps(thesis))
    assert TrainConfig.load(tmp_path / "config.json").layers == 4


def test_the_initial_weights_come_from_the_seed_and_the_names_not_from_the_graph():
    """Set on the default graph (long ago), the seed seeded nothing; keyed by position among the
    graph's ops, the weights changed with the graph's layout.  Now: the seed and each name."""
    import types

    import tensorflow as tf

    from picluster.jobs.har.exchange import Exchange, Place
    from picluster.jobs.har.graph import Graph

    tf.compat.v1.disable_eager_execution()
    data = types.SimpleNamespace(x_train=np.random.default_rng(6).normal(size=(50, 128, 9)).astype(np.float32))
    weights = []
    for task, seed, ema in ((0, 1, 0.0), (1, 1, 0.0), (0, 1, 0.9), (0, 2, 0.0)):
        # --ema adds ops before the evaluated copy of the model: the weights must not move.
        config = TrainConfig(standalone=True, conv_filters=4, rnn_hidden=4, seed=seed, ema=ema)
        g = Graph(config, data, Exchange(config, Place(task=task)))
        with g.graph.as_default(), tf.compat.v1.Session() as session:
            session.run(tf.compat.v1.global_variables_initializer())
            weights.append(session.run(g.variables))
    for same in (1, 2):
        for a, b in zip(weights[0], weights[same]):
            np.testing.assert_array_equal(a, b)
    assert not np.array_equal(weights[0][0], weights[3][0])  # another seed, other weights
    assert not np.array_equal(weights[0][0], weights[0][-2])  # each variable its own draw


def test_dropout_masks_follow_the_fed_key_only():
    """The same key draws the same masks whatever ran before; another task's or step's key others."""
    import tensorflow as tf

    from picluster.jobs.har import noise

    tf.compat.v1.disable_eager_execution()
    with tf.Graph().as_default():
        drop = noise.Noise(tf.constant(0.5))
        out = drop.dropout(tf.ones([64, 32]), site=1)
        other_site = drop.dropout(tf.ones([64, 32]), site=2)
        with tf.compat.v1.Session() as session:
            first = session.run(out, {drop.key: noise.key(7, 0, 1, 0)})
            session.run(other_site, {drop.key: noise.key(7, 0, 1, 0)})
            again = session.run(out, {drop.key: noise.key(7, 0, 1, 0)})
            masks = [session.run(out, {drop.key: k}) for k in (noise.key(7, 1, 1, 0), noise.key(7, 0, 1, 1), noise.key(7, 0, 2, 0))]
            site = session.run(other_site, {drop.key: noise.key(7, 0, 1, 0)})
            unfed = session.run(drop.dropout(tf.ones([4]), site=1))  # no key fed: still a valid draw
    np.testing.assert_array_equal(first, again)
    assert set(np.unique(first)) == {0.0, 2.0}
    for other in [*masks, site]:
        assert not np.array_equal(first, other)
    assert unfed.shape == (4,)
