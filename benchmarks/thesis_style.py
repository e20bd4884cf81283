"""The thesis's Monte-Carlo client, for comparison: each task draws its whole share as ONE [n, 2] tensor.

Its client.py drew ``tf.random_uniform([n, 2], -1, 1)`` per task, took the distance of each
point from the origin and counted those below 1; memory per task grows with the samples
(about 24 bytes per sample at peak: the points, their squares and the distances), which is why
a single 1 GB Pi ran out of memory above 6e7 samples.  Imported by the benchmarks beside it.
"""

import threading
import time
from collections.abc import Callable

from picluster.jobs.montecarlo.estimate import split_samples

BYTES_PER_SAMPLE = 2 * 4 * 3  # float32 pairs, their squares, the distances


class ThesisStyle:
    """One graph over the first ``nodes`` workers; ``run(samples)`` times one session.run."""

    def __init__(self, layout, nodes: int, timeout_s: float = 0) -> None:
        import tensorflow as tf

        self.tf = tf
        workers = layout.workers[:nodes]
        graph = tf.Graph()
        with graph.as_default():
            self.sizes, parts = [], []
            for task in workers:
                with tf.device(task.device):
                    size = tf.compat.v1.placeholder(tf.int32, [])
                    x = tf.random.uniform(tf.stack([size, 2]), -1.0, 1.0)
                    distance = tf.sqrt(tf.reduce_sum(tf.square(x), axis=1))
                    parts.append(tf.reduce_sum(tf.cast(distance < 1.0, tf.int64)))
                self.sizes.append(size)
            with tf.device(workers[0].device):
                self.total = tf.add_n(parts)
        config = tf.compat.v1.ConfigProto(device_filters=[t.device for t in workers],
                                          operation_timeout_in_ms=int(timeout_s * 1000))
        self.sess = tf.compat.v1.Session(f"grpc://{workers[0].address}", graph=graph, config=config)
        self.sess.run(self.total, dict.fromkeys(self.sizes, 1))
        self.nodes = nodes

    def run(self, samples: int, alive: Callable[[], bool] = lambda: True) -> float:
        """Seconds for one run; RuntimeError when ``alive()`` turns False meanwhile (a task's server
        was killed: TensorFlow's client would wait for it for ever)."""
        feed = dict(zip(self.sizes, split_samples(samples, self.nodes)))
        outcome: dict = {}

        def step() -> None:
            try:
                self.sess.run(self.total, feed)
            except BaseException as exc:
                outcome["error"] = exc

        t0 = time.perf_counter()
        worker = threading.Thread(target=step, daemon=True)
        worker.start()
        while worker.is_alive():
            worker.join(0.5)
            if worker.is_alive() and not alive():
                raise RuntimeError("a task's server died during the run")
        if "error" in outcome:
            raise outcome["error"]
        return time.perf_counter() - t0

    def close(self) -> None:
        """Closing waits for a step in flight; after a dead server there may be one for ever."""
        def close() -> None:
            try:
                self.sess.close()
            except Exception:  # noqa: S110  (its master may be the server that died: nothing left to close)
                pass

        closer = threading.Thread(target=close, daemon=True)
        closer.start()
        closer.join(5.0)
