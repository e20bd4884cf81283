"""The evaluator beside the coordinator (``python -m picluster.jobs.har.evaluator --run-dir D
--launch ID``): the chief's evaluation duties (chief.py), off the workers' critical path.

ParameterServerStrategy's sidecar evaluator, in TF 1's terms: the chief saves a checkpoint after
each epoch and records it in trained.jsonl with the epoch's training figures, and goes straight on
to the next epoch.  This process restores each of those checkpoints into a local graph of its
own, in order, and does what the chief did between its epochs: validation, the metrics.csv row,
the best model by validation accuracy, the stop at --target-val-accuracy (which names the epoch
and step whose weights reached it), and at the end the test set, scored once for the model chosen.
It exits 0 once result.json is written: the coordinator then stops the clients (a target reached)
or they have finished their epochs.

The weights it reads are those of a known step: in sync mode the chief's checkpoint is taken
between two of its steps, and no update is applied until its next one.  In async mode the other
workers go on updating while the chief saves, as they did while it evaluated.
"""

import argparse
import os
import signal
import sys
import time
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import tensorflow as tf

from picluster.jobs.har import trained
from picluster.jobs.har.checkpoints import Restore, unreadable
from picluster.jobs.har.chief import Begun, Chief, Scoring
from picluster.jobs.har.config import TrainConfig
from picluster.jobs.har.data import load_data
from picluster.jobs.har.graph import Graph
from picluster.jobs.har.replica import CANCELLED, _error, _exit_code
from picluster.jobs.har.replica import say_line as say
from picluster.jobs.har.rundir import RunDir
from picluster.util.errors import UsageError

POLL_S = 0.1  # a look at trained.jsonl: a local file (the coordinator mirrors a node's chief's)


def follow(run: RunDir, launch: str, data_dir: str | None = None) -> None:
    tf.get_logger().setLevel("ERROR")  # TensorFlow's notes on its own deprecations are not the user's
    cfg = TrainConfig.load(run.config)
    local = cfg.alone(data_dir=data_dir or cfg.data_dir)
    data = load_data(local)
    tf.compat.v1.disable_eager_execution()
    g = Graph(local, data)
    with g.graph.as_default(), tf.compat.v1.Session(graph=g.graph) as session:
        session.run(tf.compat.v1.global_variables_initializer())

        def with_raw(fn):
            return fn(session)

        duties: Chief | None = None
        say(f"evaluator: ready for launch {launch}")
        for record in _records(run, launch):
            if record.get("begin"):
                if record.get("data") != data.checksum:
                    raise UsageError(f"the data set here ({local.data_dir}) is not the one the workers train on "
                                     f"(checksum {str(data.checksum)[:12]} here, {str(record.get('data'))[:12]} there): prepare the "
                                     "same one here, or evaluate on the chief with --evaluator chief")
                restored = record.get("restore")
                restore = Restore(restored.get("checkpoint"), [tuple(d) for d in restored.get("damaged") or []]) if restored else None
                duties = Chief(run, cfg, Scoring(g, data, with_raw),
                               Begun(int(record["start_epoch"]), int(record["start_step"]), restore, float(record["began"]), record.get("per_ps")),
                               say, beside=True)
                continue
            if duties is None:
                raise RuntimeError(f"{run.trained}: launch {launch} recorded an epoch before its beginning")
            if record.get("end"):
                duties.finish()
                return
            epoch = int(record["epoch"])
            try:
                g.saver.restore(session, str(run.to_evaluate / record["checkpoint"]))
            except (tf.errors.NotFoundError, tf.errors.DataLossError, ValueError) as exc:
                # Handed over for us alone (trained.hand_over): only a damaged disk gets here.
                say(f"evaluator: epoch {epoch} not evaluated: checkpoint {record['checkpoint']} cannot be read "
                    f"({unreadable(exc)})")
                continue
            finally:
                trained.release(run.to_evaluate, record["checkpoint"])
            stats = {k: v for k, v in record.items() if k not in ("launch", "time", "epoch", "checkpoint")}
            if duties.end_epoch(epoch, stats):
                say(f"evaluator: validation accuracy reached {cfg.target_val_accuracy:g} with the weights of epoch {epoch} "
                    f"(step {int(session.run(g.global_step))})")
                duties.finish()
                return


def _records(run: RunDir, launch: str):
    """Each record of ``launch`` in trained.jsonl, as the chief appends it (a look every POLL_S)."""
    done = 0
    size = -1
    while True:
        try:
            now = run.trained.stat().st_size
        except FileNotFoundError:
            now = -1
        if now == size:  # the chief appends: an unchanged size is nothing new to read
            time.sleep(POLL_S)
            continue
        size = now
        found = trained.read(run.trained, launch)
        yield from found[done:]
        done = len(found)
        time.sleep(POLL_S)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m picluster.jobs.har.evaluator")
    parser.add_argument("--run-dir", required=True, type=Path)
    parser.add_argument("--launch", required=True, help="the launch whose epochs to evaluate")
    parser.add_argument("--data-dir", default=None, help="the prepared HAR folder here, when the nodes' differs")
    args = parser.parse_args(argv)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(CANCELLED))
    run = RunDir(args.run_dir.resolve())
    return _exit_code(lambda: follow(run, args.launch, args.data_dir), run.path, _error)


if __name__ == "__main__":
    sys.exit(main())
