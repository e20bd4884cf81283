"""Validation beside the coordinator: the evaluator reads each epoch's checkpoint from the chief,
scores exactly what the chief would have scored between its epochs, and no worker waits for it."""

import json
import time

import psutil
import pytest

from picluster.jobs.har import coordinator, trained
from picluster.jobs.har.config import TrainConfig
from picluster.jobs.har.metrics import read_rows
from picluster.util.errors import UsageError

from conftest import picluster, picluster_popen
from train_fixtures import TINY_MODEL
from train_fixtures import error_line as _error_line


def _rows(run_dir):
    return read_rows(run_dir / "metrics.csv")


def _evaluators(run_dir) -> list[psutil.Process]:
    found = []
    for proc in psutil.process_iter(["cmdline"]):
        cmd = proc.info["cmdline"] or []
        if "picluster.jobs.har.evaluator" in cmd and "picluster.cluster.tether" not in cmd and str(run_dir) in cmd:
            found.append(proc)
    return found


# ---------------------------------------------------------------- unit


def test_the_evaluator_reads_whole_lines_of_its_own_launch(tmp_path):
    path = tmp_path / "trained.jsonl"
    assert trained.read(path, "a1") == []
    trained.Trained(path, "old").add(epoch=1, checkpoint="model.ckpt-5")
    mine = trained.Trained(path, "a1")
    mine.add(begin=True, start_epoch=1, start_step=5)
    mine.add(epoch=2, checkpoint="model.ckpt-10")
    with open(path, "a") as f:
        f.write('{"launch": "a1", "epoch": 3, "checkpo')  # still being written
    got = trained.read(path, "a1")
    assert [r.get("epoch") for r in got] == [None, 2] and got[0]["begin"] is True


class _KilledAt(trained.Trained):
    """The chief's record of each epoch, its process gone while recording epoch ``epoch``."""

    def __init__(self, path, launch, epoch):
        super().__init__(path, launch)
        self.epoch = epoch

    def add(self, **record):
        if record.get("epoch") == self.epoch:
            raise OSError("the chief was killed here")
        super().add(**record)


def test_a_checkpoint_the_evaluator_was_not_told_of_is_never_the_one_a_resume_restores(tmp_path):
    """The chief's thread writes each epoch's checkpoint, hands it over and records it: killed before
    the record, the next launch must train that epoch again, not restore it (nothing would score it)."""
    import numpy as np
    import tensorflow as tf

    from picluster.jobs.har import checkpoints
    from picluster.jobs.har.saving import Snapshots

    tf.compat.v1.disable_eager_execution()  # the chief's graph mode
    with tf.Graph().as_default():
        weights = [tf.compat.v1.Variable(tf.zeros([3]), name="w"), tf.compat.v1.Variable(tf.zeros([2, 2]), name="b")]
    folder, handed = tmp_path / "checkpoints", tmp_path / "to-evaluate"
    folder.mkdir()
    record = _KilledAt(tmp_path / "trained.jsonl", "a1", epoch=4)
    snapshots = Snapshots(weights, folder, handed, record)
    for epoch in (1, 2, 3, 4):
        snapshots.take([np.full([3], epoch, np.float32), np.full([2, 2], epoch, np.float32)], 10 * epoch, epoch, {"loss": 1.0})
    with pytest.raises(OSError, match="killed"):
        snapshots.close()
    assert [r["epoch"] for r in trained.read(record.path, "a1")] == [1, 2, 3]
    assert checkpoints.prepare(folder, has_records=True).checkpoint == "model.ckpt-30"  # the last one recorded
    assert checkpoints.epoch_of(folder, "model.ckpt-30") == 3
    restored = tf.compat.v1.train.load_checkpoint(str(folder / "model.ckpt-30"))
    assert restored.get_tensor("w").tolist() == [3.0, 3.0, 3.0]
    # The Saver keeps its last two as before; each recorded one was handed over.
    assert sorted(p.name for p in folder.glob("*.index")) == ["model.ckpt-20.index", "model.ckpt-30.index", "model.ckpt-40.index"]
    assert sorted(p.name for p in handed.glob("*.index")) == ["model.ckpt-10.index", "model.ckpt-20.index",
                                                                "model.ckpt-30.index", "model.ckpt-40.index"]


class _Slow(trained.Trained):
    """A record that takes its time (a Pi's card), so a write is still under way when the loop ends."""

    def add(self, **record):
        time.sleep(0.5)
        super().add(**record)


def test_a_cancelled_loop_leaves_every_checkpoint_it_began_written_and_its_own_error_raised(tmp_path):
    """A cancel (or a lost partner) ends the chief's epochs with an exception: the write under way
    is finished before the process goes on (a resident server's next chief shares it and its folder)."""
    import numpy as np
    import tensorflow as tf

    from picluster.jobs.har.saving import Snapshots

    tf.compat.v1.disable_eager_execution()
    with tf.Graph().as_default():
        weights = [tf.compat.v1.Variable(tf.zeros([3]), name="w")]
    folder = tmp_path / "checkpoints"
    folder.mkdir()
    record = _Slow(tmp_path / "trained.jsonl", "a1")
    with pytest.raises(KeyboardInterrupt), Snapshots(weights, folder, tmp_path / "to-evaluate", record) as snapshots:
        snapshots.take([np.full([3], 1, np.float32)], 10, 1, {"loss": 1.0})
        raise KeyboardInterrupt  # the cancel, while the write sleeps
    assert [r["epoch"] for r in trained.read(record.path, "a1")] == [1] and snapshots.pool._shutdown
    # A write that fails while the loop fails: the loop's own error is the one raised.
    with pytest.raises(KeyboardInterrupt), Snapshots(weights, folder, tmp_path / "to-evaluate", _KilledAt(record.path, "a2", epoch=2)) as snapshots:
        snapshots.take([np.full([3], 2, np.float32)], 20, 2, {"loss": 1.0})
        raise KeyboardInterrupt


def test_the_evaluators_stop_at_the_target_ends_the_run_and_its_process_is_waited_for_not_signalled(tmp_path):
    """result.json is the evaluator's last write: a run it stops at the target (its clients mid-epoch)
    ends then, not once its process has ended (TensorFlow's teardown, about 2 s on this machine),
    and the stop lets that end come rather than signal a process that has done its work.  A run of
    all its epochs still ends as its processes end: its clients exit 0 by themselves."""
    from types import SimpleNamespace

    from picluster.jobs.har import clients, metrics
    from picluster.jobs.har.follow import _Training
    from picluster.jobs.har.progress import Follower
    from picluster.jobs.har.rundir import RunDir
    from picluster.util import atomic

    run = RunDir(tmp_path)
    training = _Training.__new__(_Training)  # what __init__ keeps of the run, the chief and the evaluator
    training.run, training.stamps, training.shown, training.moved, training.earlier_live = run, {}, set(), 0.0, None
    training.started, training.epoch_s, training.epochs_done, training.row_times, training.resume_said = True, [], 0, {}, False
    training.launch, training.missing, training.sync, training.chief_done = "a1", [], False, False
    training.sync_every, training.synced = 1.0, float("-inf")
    training.shown_progress = Follower(None, SimpleNamespace(live=False, note=lambda *a: None, epoch=lambda *a, **k: None), quiet=True)
    training.chief = SimpleNamespace(label="worker:0", poll=lambda: None, sync=lambda final=False: None)
    training.evaluator = SimpleNamespace(label="the evaluator", poll=lambda: None)  # running: scoring, then its teardown
    evaluator = clients.Evaluator.__new__(clients.Evaluator)
    signalled: list[str] = []
    evaluator._result, evaluator.proc = run.result, SimpleNamespace(stop=lambda: signalled.append("SIGTERM"))

    metrics.write_rows(run.metrics, [{"epoch": 1, "global_step": 10, "val_acc": 0.97, "time": 101.0}])
    assert training.follow() is False  # a row, no result yet: the run goes on
    evaluator.terminate()
    assert signalled == ["SIGTERM"]  # stopped mid-work (a restart's clean-up, Ctrl-C)
    metrics.write_rows(run.metrics, [{"epoch": 1, "global_step": 10, "val_acc": 0.97, "time": 101.0},
                                     {"epoch": 2, "global_step": 20, "val_acc": 0.98, "time": 102.0}])
    atomic.write_json(run.result, {"test_accuracy": 0.97, "stopped_at_target": False})
    assert training.follow() is False  # every epoch run: the clients end by themselves (exit 0), then it
    atomic.write_json(run.result, {"test_accuracy": 0.97, "stopped_at_target": True})
    assert training.follow() is True and training.epochs_done == 2  # its verdict, with the rows written as it ended
    evaluator.terminate()
    assert signalled == ["SIGTERM"]  # not signalled again: its own end is waited for


def test_where_the_evaluation_runs():
    here = coordinator.evaluator_place
    assert here("auto", False, None) == "chief"  # standalone: one process does everything
    assert here("coordinator", False, None) == "chief"
    assert here("auto", True, None) == "chief"  # no data set here: the chief evaluates, as before
    assert here("auto", True, object()) == "coordinator"
    assert here("auto", True, object(), spare=False) == "chief"  # the coordinator on a node of the cluster (a Slurm job's)
    assert here("coordinator", True, object(), spare=False) == "coordinator"
    assert here("chief", True, object()) == "chief"
    with pytest.raises(UsageError, match=r"--evaluator coordinator needs the prepared HAR data set on this machine .*picluster data har"):
        here("coordinator", True, None)


def test_runs_of_earlier_versions_keep_their_evaluation_on_the_chief(tmp_path):
    config = json.loads(TrainConfig().to_json())
    del config["evaluator"]
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    assert TrainConfig.load(path).evaluator == "chief"


# ---------------------------------------------------------------- real runs


@pytest.mark.e2e
def test_beside_the_coordinator_each_row_scores_the_weights_of_its_own_step(state, tiny, tmp_path):
    runs = {}
    for where in ("chief", "coordinator"):
        run_dir = tmp_path / where
        # The command line as a user types it; --json only to read the result.
        result = picluster("train", "har", "--data-dir", tiny, "--run-dir", run_dir, *TINY_MODEL, "--epochs", "3",
                           "--evaluator", where, "--json", timeout=300)
        assert result.returncode == 0, result.stderr
        runs[where] = (json.loads(result.stdout), _rows(run_dir))
        assert json.loads((run_dir / "config.json").read_text())["evaluator"] == where
    (chief, chief_rows), (beside, beside_rows) = runs["chief"], runs["coordinator"]
    # Up to the first evaluation both runs train alike (sync training is reproducible); after it
    # they part: the chief's evaluation draws from its dropout ops' random streams.
    same = ("epoch", "global_step", "train_loss", "val_acc", "val_loss", "val_f1")
    assert {k: beside_rows[0][k] for k in same} == {k: chief_rows[0][k] for k in same}
    # A sync run's default exchange keeps the variables on the workers: no ps holds any.
    assert beside["parameters_per_ps"] == chief["parameters_per_ps"] == {} and beside["parameters"] == chief["parameters"] > 0
    # Each row's validation scores are those of the checkpoint of its step, restored here (the
    # chief's Saver keeps the last two; the evaluator released the ones handed over to it).
    beside_dir = tmp_path / "coordinator"
    for row in beside_rows[-2:]:
        assert _val_accuracy(beside_dir, int(row["global_step"])) == pytest.approx(float(row["val_acc"]), abs=1e-6)
    # Who did it: the evaluator's log beside the coordinator, nothing of it in the chief's.
    log = (beside_dir / "evaluator.log").read_text()
    assert f"evaluator: test: scored once, checkpoint of epoch {beside['best_epoch']}" in log, log
    assert "test: scored" not in (beside_dir / "worker-0.log").read_text()
    lines = trained.read(beside_dir / "trained.jsonl", json.loads((beside_dir / "layout.json").read_text())["launch"])
    assert lines[0]["begin"] and lines[-1]["end"] and [r["epoch"] for r in lines[1:-1]] == [1, 2, 3]
    assert [f"model.ckpt-{r['global_step']}" for r in beside_rows] == [r["checkpoint"] for r in lines[1:-1]]
    assert _evaluators(beside_dir) == []


def _val_accuracy(run_dir, step: int) -> float:
    """Validation accuracy of the chief's checkpoint of ``step``, restored into a standalone graph."""
    from dataclasses import replace

    import numpy as np
    import tensorflow as tf

    from picluster.jobs.har.data import load_data
    from picluster.jobs.har.graph import Graph

    config = replace(TrainConfig.load(run_dir / "config.json"), standalone=True)
    data = load_data(config)
    tf.compat.v1.disable_eager_execution()
    g = Graph(config, data)
    with g.graph.as_default(), tf.compat.v1.Session(graph=g.graph) as session:
        g.saver.restore(session, str(run_dir / "checkpoints" / f"model.ckpt-{step}"))
        pred = session.run(g.pred, {g.x: data.x_val, g.y: data.y_val})
    return float(np.mean(pred == data.y_val))


@pytest.mark.e2e
def test_the_target_stops_the_run_at_the_epoch_whose_weights_reached_it(state, tiny, tmp_path):
    run_dir = tmp_path / "run"
    result = picluster("train", "har", "--data-dir", tiny, "--run-dir", run_dir, *TINY_MODEL, "--epochs", "30",
                       "--target-val-accuracy", "0.5", "--evaluator", "coordinator", "--no-live", timeout=300)
    assert result.returncode == 0, result.stderr
    rows = _rows(run_dir)
    reached = [int(r["epoch"]) for r in rows if float(r["val_acc"]) >= 0.5]
    assert reached and int(rows[-1]["epoch"]) == reached[0] < 30  # no row after the first that reached it
    out = json.loads((run_dir / "result.json").read_text())
    assert out["stopped_at_target"] is True and out["epochs_run"] == reached[0]
    step = int(rows[-1]["global_step"])
    assert f"with the weights of epoch {reached[0]} (step {step})" in (run_dir / "evaluator.log").read_text()
    assert "selected on validation" in result.stdout and "selected on validation" not in result.stderr  # the report: stdout
    assert _evaluators(run_dir) == []


@pytest.mark.e2e
def test_a_dead_evaluator_stops_the_run_in_one_line(state, tiny, tmp_path):
    run_dir = tmp_path / "run"
    proc = picluster_popen("train", "har", "--data-dir", tiny, "--run-dir", run_dir, *TINY_MODEL, "--epochs", "200",
                           "--evaluator", "coordinator", "--no-live")
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and not (run_dir / "metrics.csv").exists():
            assert proc.poll() is None, proc.communicate()[1]
            time.sleep(0.2)
        [evaluator] = _evaluators(run_dir)
        evaluator.kill()
        _out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 1, err
    line = _error_line(err)
    assert "the evaluator failed (signal 9) (log: " in line and "evaluator.log" in line and "--resume" in line, err
    assert "Traceback" not in err
    time.sleep(0.5)
    assert _evaluators(run_dir) == []
    for proc_ in psutil.process_iter(["cmdline"]):
        cmd = proc_.info["cmdline"] or []
        assert not ("picluster.jobs.har.process" in cmd and str(run_dir) in " ".join(cmd)), cmd
