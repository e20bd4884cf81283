"""The evaluator's duties: evaluate every epoch, select the model on validation, save, report.

They run on worker 0 between its epochs (``--evaluator chief``), or in a process beside the
coordinator (evaluator.py) that restores each epoch's checkpoint into a graph of its own, so that
no worker waits for them.  Either way they evaluate on the validation volunteers after each epoch,
append the row to metrics.csv, keep the best model *by validation accuracy* in best/, and at the end
score the test volunteers once, for the model in best/, and write result.json.  So nothing is ever
chosen on the test set, not even by looking at a test curve; --eval-test-every-epoch adds
per-epoch test columns for study.  On a resumed run they first drop the rows of epochs the
restored checkpoint does not contain: they are trained again (the checkpoint is the newest intact
one, checkpoints.prepare; a run without one is refused).
"""

import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import tensorflow as tf

from picluster.jobs.har import metrics
from picluster.jobs.har.checkpoints import Restore, name_newest, record_epoch
from picluster.jobs.har.config import TrainConfig
from picluster.jobs.har.graph import Graph
from picluster.jobs.har.rundir import RunDir
from picluster.util import atomic
from picluster.util.errors import StorageError, UsageError

# How TensorFlow's file errors name the storage's refusal (strerror texts).
STORAGE_CAUSES = ("No space left on device", "Disk quota exceeded", "Read-only file system", "Permission denied")


@dataclass(frozen=True)
class Begun:
    """Where a launch's training began: the epoch and global step it restored (0, 0: a new run),
    the checkpoint restored, when its first step began (None: now), and the parameters on each
    ps task as the chief's graph placed them (None: this graph's own)."""

    epoch: int = 0
    step: int = 0
    restore: Restore | None = None
    started: float | None = None
    per_ps: dict[str, int] | None = None


@dataclass(frozen=True)
class Scoring:
    """What the duties score: graph ``g`` on the ``data``, run through ``with_raw`` (replica.session_fn)."""

    g: Graph
    data: Any
    with_raw: Callable


class Chief:
    """Evaluation, selection on validation, checkpoints and summaries: worker 0's extra duties."""

    def __init__(self, run: RunDir, cfg: TrainConfig, scoring: Scoring, begun: Begun = Begun(),
                 say: Callable[[str], None] = print, beside: bool = False) -> None:
        """beside: these duties run beside the coordinator, on a local graph into which each
        epoch's checkpoint is restored (the chief saves the checkpoints)."""
        g, data, with_raw = scoring.g, scoring.data, scoring.with_raw
        start_epoch, start_step, restore, started = begun.epoch, begun.step, begun.restore, begun.started
        self.run, self.cfg, self.g, self.data, self.with_raw, self.say = run, cfg, g, data, with_raw, say
        self.beside, self.per_ps = beside, begun.per_ps
        self.raw = lambda fetches, feed=None: with_raw(lambda s: s.run(fetches, feed))
        self.csv = run.metrics
        self.columns = metrics.columns(cfg.eval_test_every_epoch)  # an existing file keeps its own (metrics._header)
        self.state_path = run.state
        self.state = _load_state(self.state_path)
        # Rows past the restored checkpoint are redone: drop them.
        rows = metrics.read_rows(self.csv)
        kept = [r for r in rows if int(r["epoch"]) <= start_epoch]
        if len(kept) < len(rows):
            metrics.write_rows(self.csv, kept, self.columns)  # replaced whole: a failure leaves the old rows
        if self.state.get("best", {}).get("epoch", 0) > start_epoch:
            del self.state["best"]
        self.state.setdefault("resumes", [])
        if start_step:
            self.state["resumes"].append({"epoch": start_epoch, "global_step": start_step, "time": time.time(),
                                          "checkpoint": restore.checkpoint if restore else None,
                                          "damaged": restore.damaged if restore else []})
        self.state.setdefault("started", started or time.time())
        self.writer = tf.compat.v1.summary.FileWriter(str(run.tensorboard), g.graph if not start_step else None)
        self.last_epoch = start_epoch
        self.stopped_early = False

    def evaluate(self, split: str, g: Graph | None = None, run=None) -> dict:
        """Scores on ``split`` of graph ``g`` run by ``run`` (default: the training graph, on the cluster)."""
        g, run = g or self.g, run or self.raw
        x, y = getattr(self.data, f"x_{split}"), getattr(self.data, f"y_{split}")
        preds, loss = [], 0.0
        for i in range(0, len(x), self.cfg.eval_batch):
            p, batch_loss = run([g.pred, g.xent_sum], {g.x: x[i:i + self.cfg.eval_batch], g.y: y[i:i + self.cfg.eval_batch]})
            preds.append(p)
            loss += float(batch_loss)
        pred = np.concatenate(preds) if preds else np.zeros(0, np.int64)
        m = metrics.confusion(y, pred, g.shape.classes)
        return {"loss": loss / max(len(x), 1), "acc": float((pred == y).mean()) if len(y) else 0.0,
                "f1": metrics.weighted_f1(m), "confusion": m.tolist(),
                "by_volunteer": metrics.accuracy_by(getattr(self.data, f"subject_{split}"), y, pred)}

    def end_epoch(self, epoch: int, stats: dict) -> bool:
        """Record the epoch; True when training should stop."""
        began = time.perf_counter()
        val = self.evaluate("val")
        step = int(self.raw(self.g.global_step))
        row = {"epoch": epoch, **stats, "global_step": step, "eval_s": time.perf_counter() - began,
               "val_loss": val["loss"], "val_acc": val["acc"], "val_f1": val["f1"],
               "wall_s": time.time() - self.state["started"], "time": time.time()}
        if self.cfg.eval_test_every_epoch:  # for study only: recorded, never used to choose
            test = self.evaluate("test")
            row |= {"test_loss": test["loss"], "test_acc": test["acc"], "test_f1": test["f1"]}
        metrics.append_row(self.csv, row, self.columns)
        self._summaries(row, step)
        best = self.state.get("best")
        better = best is None or val["acc"] > best["val_acc"] or (val["acc"] == best["val_acc"] and val["loss"] < best["val_loss"])
        if better or self.cfg.select == "last":
            self.state["best"] = {"epoch": epoch, "global_step": step, "val_acc": val["acc"], "val_loss": val["loss"],
                                  "val_f1": val["f1"]}
            save(self.with_raw, self.g.best_saver, self.run.best / "model", step)
        # Beside the coordinator, the chief saved this epoch's checkpoint (it saves every epoch's, for us).
        if not self.beside and (epoch % self.cfg.checkpoint_epochs == 0 or epoch == self.cfg.epochs):
            save(self.with_raw, self.g.saver, self.run.checkpoints / "model.ckpt", step, epoch)
        self.last_epoch = epoch
        atomic.write_json(self.state_path, self.state)
        atomic.write_json(self.run.progress, {k: v for k, v in row.items()} | {"best_epoch": self.state["best"]["epoch"]})
        if self.cfg.target_val_accuracy and val["acc"] >= self.cfg.target_val_accuracy:
            self.stopped_early = True
            return True
        return False

    def _summaries(self, row: dict, step: int) -> None:
        values = [tf.compat.v1.Summary.Value(tag=k, simple_value=float(row[k]))
                  for k in ("train_loss", "train_acc", "val_loss", "val_acc", "val_f1", "test_loss", "test_acc", "test_f1",
                            "epoch_s", "input_s", "compute_s", "exchange_s") if k in row]
        self.writer.add_summary(tf.compat.v1.Summary(value=values), step)
        self.writer.flush()

    def _per_ps(self) -> dict[str, int]:
        """Where the weights live: parameters per ps task (replica_device_setter spreads them)."""
        if self.per_ps is not None:
            return self.per_ps
        return per_ps(self.g)

    def score_test(self) -> dict | None:
        """The test volunteers' scores for the model in best/, once, at the end of the run.

        The saved weights are restored into a graph of the chief's own, in this process: the
        cluster's variables are left as they are, and what is scored is exactly what best/ holds
        (the epoch chosen on validation, or the last with --select last)."""
        best = self.state.get("best")
        if best is None:
            return None
        prefix = self.run.best / f"model-{best['global_step']}"
        if not Path(f"{prefix}.index").exists():
            raise UsageError(f"{prefix}: the checkpoint of epoch {best['epoch']} chosen on validation is missing; "
                             "the test set cannot be scored for it")
        if self.beside:  # our graph is a local one already: the weights of best/ go into it
            self.with_raw(lambda s: self.g.best_saver.restore(s, str(prefix)))
            test = self.evaluate("test")
        else:
            local = self.cfg.alone()
            g = Graph(local, self.data)
            threads = self.cfg.threads or 0
            config = tf.compat.v1.ConfigProto(intra_op_parallelism_threads=threads, inter_op_parallelism_threads=threads)
            with g.graph.as_default(), tf.compat.v1.Session(graph=g.graph, config=config) as session:
                g.best_saver.restore(session, str(prefix))
                test = self.evaluate("test", g, lambda fetches, feed=None: session.run(fetches, feed))
        scored = {"epoch": best["epoch"], "global_step": best["global_step"],
                  "checkpoint": f"{self.run.BEST}/{prefix.name}", "time": time.time()}
        self.state.setdefault("test_scored", []).append(scored)
        atomic.write_json(self.state_path, self.state)
        times = len(self.state["test_scored"])
        self.say(f"{'evaluator' if self.beside else 'chief'}: test: scored {'once' if times == 1 else f'{times} times in this run'}, "
                 f"checkpoint of epoch {best['epoch']} ({scored['checkpoint']})")
        return test | {"scored": scored, "times": times}

    def finish(self) -> None:
        best = self.state.get("best", {})
        test = self.score_test() or {}
        rows = metrics.read_rows(self.csv)
        result = {
            "selected_on": "validation" if self.cfg.select == "best" else "last epoch",
            # What the numbers depend on, at the top (config holds them all too).
            "model": self.cfg.model,
            "augment": self.cfg.augment,
            "deterministic": {"seed": self.cfg.seed, "op_determinism": self.cfg.deterministic,
                              "reproducible": self.cfg.standalone or self.cfg.mode == "sync" or self.cfg.workers == 1,
                              "threads": self.cfg.threads or None},
            "best_epoch": best.get("epoch"),
            # The test set, scored once at the end for the model selected above (best/).
            "test_scored": {"epoch": test["scored"]["epoch"], "global_step": test["scored"]["global_step"],
                            "checkpoint": test["scored"]["checkpoint"], "times": test["times"]} if test else None,
            "test_accuracy": test.get("acc"),
            "test_f1": test.get("f1"),
            "test_loss": test.get("loss"),
            "val_accuracy": best.get("val_acc"),
            "val_volunteers": sorted(int(v) for v in np.unique(self.data.subject_val)),
            "confusion": test.get("confusion"),
            "test_accuracy_by_volunteer": test.get("by_volunteer"),  # volunteers differ in posture more than models do
            "epochs_run": self.last_epoch,
            "stopped_at_target": self.stopped_early,
            "parameters": self.g.parameters,
            "parameters_per_ps": self._per_ps(),
            "resumes": self.state.get("resumes", []),
            "wall_s": time.time() - self.state["started"],
            "epoch_s_mean": float(np.mean([float(r["epoch_s"]) for r in rows])) if rows else None,
            "config": json.loads(self.cfg.to_json()),
        }
        self.writer.close()
        atomic.write_json(self.run.result, result)  # the last write: the coordinator ends the run on it


def per_ps(g: Graph) -> dict[str, int]:
    """Where the weights live: parameters per ps task of the distributed graph ``g``."""
    placed: dict[str, int] = {}
    for v in g.variables:
        spec = tf.DeviceSpec.from_string(v.device or "")
        if spec.job == "ps":
            key = f"ps:{spec.task}"
            placed[key] = placed.get(key, 0) + int(np.prod(v.shape))
    return dict(sorted(placed.items()))


def save(with_raw, saver, path: Path, step: int, epoch: int | None = None,
         recorded: Callable[[Path], None] | None = None) -> None:
    """``saver``'s checkpoint of step ``step`` at ``path``; a refusal of the storage in one line.
    ``epoch``: the epoch it ends, recorded beside it (checkpoints.record_epoch), since the steps of
    an epoch change with the workers when a run goes on with fewer or more of them.
    ``recorded``: called with the checkpoint's prefix once its files are written and before the
    state file names it, the checkpoint a resume restores (the record for the evaluator beside the
    coordinator): a chief killed between the two leaves an epoch trained again, never one restored
    that the evaluator was not told of and no launch ever scores."""
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        prefix = with_raw(lambda s: saver.save(s, str(path), global_step=step, write_meta_graph=False,
                                               write_state=recorded is None))
        if epoch is not None:
            record_epoch(path.parent, f"{path.name}-{step}", epoch)
        if recorded is not None:
            recorded(Path(prefix))
            name_newest(saver, prefix)
    except tf.errors.OpError as exc:  # a full disk is ResourceExhaustedError "...; No space left on device"
        cause = next((c for c in STORAGE_CAUSES if c in str(exc)), None)
        if cause is None:
            raise
        raise StorageError(f"{path}-{step}", cause) from None


def _load_state(path: Path) -> dict:
    """state.json of a resumed run (the chief wrote it; a damaged or edited one is refused in one line)."""
    if not path.exists():
        return {}
    try:
        state = json.loads(path.read_text())
    except (OSError, ValueError, RecursionError) as exc:
        raise UsageError(f"{path}: cannot read the run's state ({type(exc).__name__}); the run cannot be resumed") from None
    shapes: dict[str, type | tuple[type, ...]] = {"best": dict, "resumes": list, "started": (int, float), "test_scored": list}
    wrong = [k for k, kind in shapes.items() if isinstance(state, dict) and k in state and not isinstance(state[k], kind)]
    best = state.get("best", {}) if isinstance(state, dict) else None
    if not isinstance(state, dict) or wrong or not isinstance(best, dict) or not isinstance(best.get("epoch", 0), int):
        raise UsageError(f"{path}: not a run's state{f' (field {wrong[0]!r})' if wrong else ''}; the run cannot be resumed")
    return state
