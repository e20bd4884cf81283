"""The chief's checkpoint of each epoch, written beside the training rather than in its way.

In sync mode every worker waits for the chief's next step, so whatever the chief does between two
epochs holds the whole cluster up: a Saver's save (every variable fetched from the ps, written
and synced to the node's card), the hand-over to the evaluator and the record.  Here the chief's
last step of an epoch also brings back every saved variable's value as that step's update left
it (``Graph.snapshot``: read after the update, so nothing moves them in between), and a thread
of the chief's writes them into a checkpoint of the same names, hands it over and records the
epoch while the steps of the next epoch go on.  The checkpoints are the Saver's own (its names,
its state file, its two kept): a resume and the evaluator read them as before.
"""

import threading
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

import numpy as np
import tensorflow as tf

from picluster.jobs.har.checkpoints import KEPT
from picluster.jobs.har.chief import save
from picluster.jobs.har.trained import Trained


class Snapshots:
    """Checkpoints of ``variables``' values (as fetched with a step), written in order by one thread."""

    def __init__(self, variables, directory: Path, to_evaluate: Path, trained: Trained) -> None:
        self.directory, self.to_evaluate, self.trained = directory, to_evaluate, trained
        self.graph = tf.Graph()
        with self.graph.as_default():
            self.feeds, assigns, named = [], [], {}
            for v in variables:
                dtype = v.dtype.base_dtype
                local = tf.compat.v1.Variable(tf.zeros(v.shape, dtype), name=v.op.name, trainable=False)
                feed = tf.compat.v1.placeholder(dtype, v.shape)
                self.feeds.append(feed)
                assigns.append(local.assign(feed, read_value=False))
                named[v.op.name] = local  # the names the training graph's Saver writes
            self.assign = tf.group(*assigns)
            self.saver = tf.compat.v1.train.Saver(named, max_to_keep=KEPT)
            self.session = tf.compat.v1.Session(graph=self.graph, config=tf.compat.v1.ConfigProto(
                intra_op_parallelism_threads=1, inter_op_parallelism_threads=1))
        self.pool = ThreadPoolExecutor(1, thread_name_prefix="checkpoint")
        self.pending: list[Future] = []
        self.lock = threading.Lock()

    def take(self, values: list[np.ndarray], step: int, epoch: int, stats: dict) -> None:
        """Write epoch ``epoch``'s checkpoint (of global step ``step``) from ``values`` beside the
        training; a write that failed earlier is raised here, at the next epoch's end."""
        self.check()
        self.pending.append(self.pool.submit(self._write, values, step, epoch, dict(stats)))

    def _write(self, values, step: int, epoch: int, stats: dict) -> None:
        with self.lock:
            self.session.run(self.assign, dict(zip(self.feeds, values)))
            save(lambda fn: fn(self.session), self.saver, self.directory / "model.ckpt", step, epoch,
                 recorded=lambda prefix: self.trained.handed_over(prefix, self.to_evaluate, epoch=epoch, **stats))

    def check(self) -> None:
        """Raise what a finished write raised (a full disk: a StorageError)."""
        done = [f for f in self.pending if f.done()]
        self.pending = [f for f in self.pending if not f.done()]
        for f in done:
            f.result()

    def __enter__(self) -> "Snapshots":
        return self

    def __exit__(self, kind, error, trace) -> None:
        """The epochs' loop left: every write begun is finished before this process goes on (a
        resident server's next chief shares its process and folder), also when a cancel or a lost
        partner ends the loop; then a failed write is raised, unless the loop's own error is on
        its way (that one is what the coordinator must hear)."""
        if error is None:
            self.close()
            return
        try:
            self.close()
        except Exception:  # noqa: S110  (the write's failure is second to the loop's own error)
            pass

    def close(self) -> None:
        """Every checkpoint written (or its failure raised); the thread and session gone."""
        try:
            for f in self.pending:
                f.result()
            self.pending = []
        finally:
            self.pool.shutdown(wait=True)
            self.session.close()
