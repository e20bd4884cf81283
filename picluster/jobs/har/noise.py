"""The training's randomness inside the graph, keyed by where the training is, not by the graph.

Two draws happen in TensorFlow: the initial weights (once, on the chief) and the dropout masks
(every step, on each worker).  A stateful random op is seeded by the graph's seed and its own
position among the graph's ops, and its stream moves on with every run that touches it: the masks
a worker drew then depended on how its graph was built (a fused exchange builds the model twice)
and on what else its session ran.  Here both are keyed instead:

- each variable's initializer by the run's seed and the variable's name (``seeded_initializers``);
- each dropout site's mask by a key the training loop feeds every step, (seed + stride x task,
  epoch x 2^20 + step) (``key``), folded with the site's number (``Noise.dropout``).

So a worker's masks are a function of (seed, task, epoch, step, site) and nothing else: the
statistics emulator (exchange/emulated.py), which builds every worker's tower in one graph, draws exactly
the masks the cluster's workers draw, and a resumed epoch draws its masks again.  Evaluation feeds
no key and keeps every unit (keep probability 1).
"""

import zlib

import numpy as np
import tensorflow as tf

# Each worker's stream: the chief's (task 0) is the seed's own, as in a standalone run.
TASK_SEED_STRIDE = 1_000_003
STEP_BITS = 20  # an epoch holds fewer steps than this (the training set is ~6,000 windows)


def key(seed: int, task: int, epoch: int, step: int) -> np.ndarray:
    """The dropout key of ``task``'s ``step`` (from 0) in ``epoch`` (from 1)."""
    return np.array([seed + TASK_SEED_STRIDE * task, (epoch << STEP_BITS) + step], np.int64)


class Noise:
    """Dropout with the keep probability ``keep`` (a tensor, or 1.0: none) drawn from ``self.key``."""

    def __init__(self, keep) -> None:
        self.keep = keep
        self.key = tf.compat.v1.placeholder_with_default(tf.zeros([2], tf.int64), [2], name="noise_key")

    def dropout(self, h, site: int):
        """``h`` with units dropped at ``site`` (a number of its own in the model: the masks of two
        sites never coincide)."""
        if isinstance(self.keep, float) and self.keep == 1.0:
            return h
        seed = tf.random.experimental.stateless_fold_in(self.key, site)
        return tf.nn.experimental.stateless_dropout(h, rate=1.0 - self.keep, seed=seed)


def seeded_initializers(seed: int):
    """A variable scope's custom getter that gives each new variable's random initializer the op
    seed of its name (with the graph's seed, ``seed``): the initial weights then depend on the
    run's seed and the model, not on which ops the graph made before them."""

    def seeded(getter, name, *args, **kwargs):  # TensorFlow passes ``getter`` by name
        init = kwargs.get("initializer")
        config = init.get_config() if init is not None and hasattr(init, "get_config") else {}
        if init is not None and "seed" in config and config["seed"] is None:
            kwargs["initializer"] = type(init).from_config(config | {"seed": zlib.crc32(f"{seed}/{name}".encode()) & 0x7FFFFFFF})
        return getter(name, *args, **kwargs)

    return seeded
