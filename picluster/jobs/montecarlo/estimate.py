"""Distributed Monte-Carlo estimate of pi over the worker tasks.

As in the thesis, task 0 takes n + r samples and the others n (n, r = divmod(samples, nodes)).
Unlike it, each task draws its points in fixed-size chunks inside a ``tf.while_loop``
with a stateless RNG keyed by (seed, task, chunk), so memory does not grow with the
sample count and the same seed and node count give the same hit count.
"""

import math
import os
import threading
import time
from dataclasses import dataclass

from picluster.cluster.probe import unanswered
from picluster.model import nodeset
from picluster.model.clusterspec import Layout
from picluster.util.errors import ClusterError, UsageError
from picluster.util.tflog import import_tensorflow

CHUNK = 1 << 18  # points per draw: ~2 MiB of float32 pairs, small enough for a Pi's 1 GB
INT64_MAX = 2**63 - 1
LIVENESS_PERIOD_S = 1.0
CHUNKS_PER_ROUND = 256  # ~67 M points per task per session.run: a fraction of a second on a PC


@dataclass(frozen=True)
class Estimate:
    samples: int
    nodes: int
    hits: int
    seed: int
    compute_s: float

    @property
    def pi(self) -> float:
        return 4.0 * self.hits / self.samples

    @property
    def abs_error(self) -> float:
        return abs(self.pi - math.pi)

    @property
    def std_error(self) -> float:
        p = self.hits / self.samples
        return 4.0 * math.sqrt(max(p * (1.0 - p), 0.0) / self.samples)

    @property
    def samples_per_s(self) -> float:
        return self.samples / self.compute_s if self.compute_s > 0 else float("inf")


def split_samples(samples: int, nodes: int) -> list[int]:
    if nodes < 1:
        raise UsageError("--nodes must be at least 1")
    n, r = divmod(samples, nodes)
    return [n + r] + [n] * (nodes - 1)


def rounds(counts: list[int], chunk: int, chunks_per_round: int) -> list[tuple[list[int], list[int]]]:
    """Split every task's count into rounds of whole chunks: [(first chunk per task, samples per task)].

    A round's chunks keep the indices they have in a single run, so the hit count does not
    depend on how a run is cut into rounds; rounds only give progress and prompt cancelling.
    """
    span = chunk * chunks_per_round
    total_rounds = max(1, max(-(-c // span) for c in counts))
    return [
        ([r * chunks_per_round] * len(counts), [max(0, min(span, c - r * span)) for c in counts])
        for r in range(total_rounds)
    ]


def _count_hits(tf, count, first_chunk, seed, task_id: int, chunk: int):
    """Points of ``count`` uniform draws in [0,1)^2 that fall inside the unit quarter circle."""
    chunk64 = tf.constant(chunk, tf.int64)
    iterations = (count + chunk64 - 1) // chunk64
    stream = tf.constant(task_id << 40, tf.int64) + first_chunk

    def body(j, hits):
        size = tf.minimum(chunk64, count - j * chunk64)
        points = tf.random.stateless_uniform(
            tf.stack([tf.constant(2, tf.int64), size]), seed=tf.stack([seed, stream + j]), alg="philox"
        )
        x, y = points[0], points[1]
        return j + 1, hits + tf.math.count_nonzero(x * x + y * y < 1.0, dtype=tf.int64)

    _, hits = tf.while_loop(
        lambda j, _: j < iterations,
        body,
        [tf.constant(0, tf.int64), tf.constant(0, tf.int64)],
        parallel_iterations=2,  # overlap two chunks at most: bounded memory
    )
    return hits


def coordinator_tensorflow():
    """TensorFlow in the coordinator, whose stderr is the user's terminal: without its start-up lines."""
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    return import_tensorflow()


class MonteCarlo:
    """One graph over the first ``nodes`` nodes of ``layout``, one server on each (its worker, or
    its ps where it runs no worker: Layout.one_per_node); run it for any sample count."""

    def __init__(self, layout: Layout, nodes: int, chunk: int = CHUNK, timeout_s: float = 0) -> None:
        workers = layout.one_per_node()
        if nodes < 1:
            raise UsageError("--nodes must be at least 1")
        if nodes > len(workers):
            raise UsageError(f"--nodes {nodes} is more than the {len(workers)} nodes with a TensorFlow server available")
        tf = coordinator_tensorflow()

        self.nodes = nodes
        self.workers = workers[:nodes]
        graph = tf.Graph()
        with graph.as_default():
            # Feeds live on the task that uses them: the master hands each task its own
            # values, so no task waits for another's executor to forward them.
            self._counts, self._firsts, self._seeds, partial = [], [], [], []
            for i, task in enumerate(self.workers):
                with tf.device(task.device):
                    count = tf.compat.v1.placeholder(tf.int64, [], name=f"count_{i}")
                    first = tf.compat.v1.placeholder(tf.int64, [], name=f"first_chunk_{i}")
                    seed = tf.compat.v1.placeholder(tf.int64, [], name=f"seed_{i}")
                    partial.append(_count_hits(tf, count, first, seed, i, chunk))
                self._counts.append(count)
                self._firsts.append(first)
                self._seeds.append(seed)
            with tf.device(self.workers[0].device):
                self._total = tf.add_n(partial)
        config = tf.compat.v1.ConfigProto(
            # Only the tasks we use must answer; a dead ps or spare worker does not block us.
            device_filters=[t.device for t in self.workers],
            operation_timeout_in_ms=int(timeout_s * 1000),
        )
        self._tf = tf
        self._session = tf.compat.v1.Session(f"grpc://{self.workers[0].address}", graph=graph, config=config)
        self.chunk = chunk
        self._run([0] * nodes, [0] * nodes, 0)  # registers the graph partitions on every task

    def _run(self, firsts: list[int], counts: list[int], seed: int) -> int:
        feed = dict(zip(self._counts, counts)) | dict(zip(self._firsts, firsts)) | dict.fromkeys(self._seeds, seed)
        outcome: dict = {}

        def step() -> None:
            try:
                outcome["hits"] = int(self._session.run(self._total, feed))
            except BaseException as exc:  # handed to the main thread below
                outcome["error"] = exc

        # Session.run blocks in C++ where Ctrl-C and SIGTERM cannot reach it; the main
        # thread waits here instead, and on a signal closes the session, which cancels the step.
        worker = threading.Thread(target=step, name="montecarlo-step", daemon=True)
        worker.start()
        checked = time.monotonic()
        try:
            while worker.is_alive():
                worker.join(0.1)
                if worker.is_alive() and time.monotonic() - checked >= LIVENESS_PERIOD_S:
                    # TensorFlow waits forever for a task that died; we look for ourselves.
                    self._check_alive()
                    checked = time.monotonic()
        except BaseException:
            self._cancel()
            raise
        error = outcome.get("error")
        if isinstance(error, self._tf.errors.OpError):
            self._check_alive()  # a lost task is the likeliest cause: name its node
            raise ClusterError(f"Monte-Carlo run failed{self._culprit(error.message)}: {_first_line(error.message)}") from None
        if error is not None:
            raise error
        return outcome["hits"]

    def _cancel(self) -> None:
        closer = threading.Thread(target=self._session.close, daemon=True)
        closer.start()
        closer.join(5.0)

    def _check_alive(self) -> None:
        silent = unanswered(self.workers, tries=2)
        if silent:
            raise ClusterError(
                f"{nodeset.fold(t.node for t in silent)}: TensorFlow server stopped answering during the run "
                f"({', '.join(t.label for t in silent)}); the run is abandoned"
            )

    def _culprit(self, message: str) -> str:
        """' on node03 (worker:1)' when TensorFlow's message names one of our tasks."""
        for task in self.workers:
            if f"/job:{task.job}/replica:0/task:{task.index}" in (message or "") or task.address in (message or ""):
                return f" on {task.node} ({task.label})"
        return ""

    def estimate(self, samples: int, seed: int, progress=None) -> Estimate:
        """Run ``samples`` draws; ``progress(done, total)`` is called after every round."""
        if not 1 <= samples <= INT64_MAX:
            raise UsageError(f"--samples must be between 1 and {INT64_MAX}")
        start = time.perf_counter()
        hits = done = 0
        for firsts, counts in rounds(split_samples(samples, self.nodes), self.chunk, CHUNKS_PER_ROUND):
            hits += self._run(firsts, counts, seed)
            done += sum(counts)
            if progress is not None:
                progress(done, samples)
        return Estimate(samples, self.nodes, hits, seed, time.perf_counter() - start)

    def close(self) -> None:
        # After a lost task, Session.close can wait for a step that never ends: bounded here.
        self._cancel()

    def __enter__(self) -> "MonteCarlo":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _first_line(text: str) -> str:
    """TensorFlow's first informative line (its messages open with a generic header)."""
    lines = [ln.strip() for ln in (text or "").splitlines() if ln.strip()]
    useful = [ln for ln in lines if not ln.endswith("execution error:")]
    return (useful or lines or ["unknown error"])[0][:300]
