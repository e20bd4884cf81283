"""`picluster train har` through the real CLI and a real local cluster, with a tiny model on tiny data."""

import csv
import json
import os
import subprocess
import sys
import time

import numpy as np
import psutil
import pytest

from picluster.data.har.dataset import CACHE_NAME, checksum, save
from picluster.lab.cgroups import Cgroup, cgroup_name
from picluster.lab.limits import Limits
from picluster.model.clusterspec import Layout

from conftest import picluster, picluster_popen
from train_fixtures import TINY_CONV, TINY_MODEL, checkpointed_step, client_process, evaluator_process
from train_fixtures import error_line as _error_line


def _rows(run_dir):
    with open(run_dir / "metrics.csv") as f:
        return list(csv.DictReader(f))


def _one_line_usage_error(result):
    assert result.returncode == 2, result.stderr
    assert result.stderr.count("\n") == 1, result.stderr
    assert result.stderr.startswith("picluster: error: ")


@pytest.mark.parametrize(
    "args, words",
    [
        (["--model", "resbidir", "--layers", "0"], "--layers 0"),
        (["--model", "resbidir", "--hidden", "3"], "--hidden 3 must be even"),
        (["--epochs", "-2"], "--epochs -2"),
        (["--workers", "-1"], "--workers -1"),
        (["--batch", "1", "--global-batch"], "--global-batch splits a batch across the workers"),
        (["--ema", "1"], "--ema 1.0 must be in [0, 1)"),
        (["--worker-runtime", "shared"], "--worker-runtime shared needs an inventory cluster"),
        (["--warmup-updates", "6", "--warmup-epochs", "1"], "--warmup-updates 6 and --warmup-epochs 1 both set the warm-up: give one"),
        (["--warmup-updates", "1.5"], "--warmup-updates"),
        # From 8 sync workers an update is 400 windows whatever their number (the recipe), which
        # the tiny set's 240 do not hold; a --batch given stays windows per worker (16 x 20).
        (["--emulate", "--workers", "8"], "240 training windows are fewer than one update takes (400"),
        (["--emulate", "--workers", "16"], "240 training windows are fewer than one update takes (400"),
        (["--emulate", "--workers", "16", "--batch", "20"], "240 training windows are fewer than one update takes (320"),
    ],
)
def test_bad_options_fail_in_one_line(state, tiny, args, words):
    result = picluster("train", "har", "--data-dir", tiny, *args)
    _one_line_usage_error(result)
    assert words in result.stderr


@pytest.mark.parametrize(
    "args, words",
    [
        (["--model", "gpt"], "--model"),
        (["--conv-filters", "32", "--model", "resbidir"], "--conv-filters applies to --model convlstm only, not resbidir"),
        (["--model", "resbidir", "--readout", "last"], "--readout applies to --model convlstm only"),  # even at its default
        (["--residual", "2"], "--residual applies to --model resbidir only, not convlstm"),
        (["--layers", "8"], "--layers 8 is too deep for --model convlstm: at most 7"),
        (["--window-stats"], "--window-stats applies to --model resbidir only"),
        (["--augment", "rotate:270"], "--augment 'rotate:270': rotate must be a number from 0 to 180"),
        (["--augment", "spin:3"], "unknown part 'spin'"),
        (["--label-smoothing", "1"], "--label-smoothing 1.0 must be in [0, 1)"),
        (["--threads", "2"], "--threads sets a standalone run's threads"),
        (["--rnn-hidden", "7"], "--rnn-hidden 7 must be even"),
    ],
)
def test_options_of_the_other_model_and_bad_augmentation_fail_in_one_line(state, tiny, args, words):
    result = picluster("train", "har", "--data-dir", tiny, "--run-dir", tiny.parent / "run", *args)
    _one_line_usage_error(result)
    assert words in result.stderr
    assert not (tiny.parent / "run").exists()  # nothing half written


def test_missing_dataset_names_the_command_that_prepares_it(state, tmp_path):
    # A folder named by hand is not filled: a mistyped --data-dir must not train on a new copy.
    result = picluster("train", "har", "--data-dir", tmp_path / "nothing")
    _one_line_usage_error(result)
    assert "picluster data har" in result.stderr
    assert not (tmp_path / "nothing").exists()


def test_a_fresh_machine_prepares_the_data_set_on_first_use_and_not_again(state, tmp_path, monkeypatch):
    """As Keras' and torchvision's data sets fetch themselves: the default folder is filled once."""
    monkeypatch.setenv("PICLUSTER_DATA_DIR", str(tmp_path / "data"))
    folder = tmp_path / "data" / "har"
    first = picluster("train", "har", "--standalone", "--epochs", "1", *TINY_CONV, "--run-dir", tmp_path / "run1", timeout=600)
    assert first.returncode == 0, first.stderr[-2000:]
    said = [line for line in first.stderr.splitlines() if line.startswith("picluster: ")]
    assert said[0] == (f"picluster: no HAR data set in {folder} yet: preparing it from the offline HAPT recordings "
                       "(once, as 'picluster data har' does)..."), first.stderr
    assert said[1].startswith("picluster: prepared in ") and said[1].endswith(f" s: {folder / CACHE_NAME}"), first.stderr
    assert "test accuracy" in first.stdout + first.stderr, first.stderr[-2000:]
    again = picluster("train", "har", "--standalone", "--epochs", "1", *TINY_CONV, "--run-dir", tmp_path / "run2", timeout=600)
    assert again.returncode == 0 and "preparing" not in again.stderr, again.stderr[-2000:]


def test_dataset_of_the_wrong_shape_is_refused(state, tmp_path):
    arrays = {}
    for split in ("train", "val", "test"):
        arrays[f"x_{split}"] = np.zeros((12, 64, 9), np.float32)
        arrays[f"y_{split}"] = np.zeros(12, np.int64)
        arrays[f"subject_{split}"] = np.ones(12, np.int64)
    from picluster.data.har.dataset import HarData

    save(HarData(**arrays, source="tests", checksum=checksum(arrays)), tmp_path / "har" / CACHE_NAME)
    result = picluster("train", "har", "--data-dir", tmp_path / "har")
    _one_line_usage_error(result)


def _start(*args):
    return picluster_popen("train", "har", *args)


def _wait_for_epochs(run_dir, epochs, proc, timeout=120):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if (run_dir / "metrics.csv").exists() and len(_rows(run_dir)) >= epochs:
            return
        assert proc.poll() is None, proc.communicate()
        time.sleep(0.2)
    raise AssertionError(f"no {epochs} epochs after {timeout} s")


def _kill_after(run_dir, proc, epochs, timeout, victim=lambda run_dir: client_process(run_dir, 1)):
    """Kill ``victim`` (a psutil.Process; worker 1's client by default) once the chief logged
    ``epochs`` epochs; the run's (out, err)."""
    try:
        _wait_for_epochs(run_dir, epochs, proc)
        victim(run_dir).kill()
        return proc.communicate(timeout=timeout)
    finally:
        proc.kill()


def _no_clients_left(run_dir):
    time.sleep(0.5)
    assert client_process(run_dir, 0) is None and client_process(run_dir, 1) is None


@pytest.mark.e2e
def test_sync_training_learns_and_a_killed_worker_run_resumes(state, tiny, tmp_path):
    run_dir = tmp_path / "run"
    # --max-restarts 0: the run stops at the loss, as it did before it went on by itself (test_elastic.py).
    proc = _start("--data-dir", tiny, "--run-dir", run_dir, *TINY_MODEL, "--epochs", "40", "--mode", "sync", "--max-restarts", "0")
    _out, err = _kill_after(run_dir, proc, epochs=3, timeout=60)
    assert proc.returncode == 1, err
    assert "worker 1 died" in err and "--resume" in err
    _no_clients_left(run_dir)
    done = _rows(run_dir)
    steps = [int(r["global_step"]) for r in done]
    # 240 windows / 2 workers / 20 each (--batch per worker): 6 steps, one gradient per worker each
    assert steps == sorted(steps) and steps[0] == 6
    # Each epoch's steps split into the worker's own ops and the exchange (one traced step): both
    # there.  A traced step whose ops a busy machine slowed may cover the epoch's whole step time
    # (the compute is capped there: test_steptrace.py), and that epoch's exchange is then 0.
    split = [(float(r["compute_s"]), float(r["exchange_s"])) for r in done]
    assert all(c > 0 and x >= 0 for c, x in split) and sum(x for _, x in split) > 0, split
    checkpointed = checkpointed_step(run_dir)

    result = picluster("train", "har", "--resume", run_dir, "--epochs", str(len(done) + 5), "--json", timeout=240)
    assert result.returncode == 0, result.stderr
    rows = _rows(run_dir)
    resumed = [r for r in rows if int(r["global_step"]) > checkpointed]
    # The first epoch after the restart starts from the checkpoint's step, not from zero.
    assert int(resumed[0]["global_step"]) == checkpointed + 6
    assert int(rows[-1]["epoch"]) == len(done) + 5
    losses = [float(r["train_loss"]) for r in rows]
    assert losses[-1] < 0.7 * losses[0]
    final = json.loads(result.stdout)
    assert final["selected_on"] == "validation" and final["test_accuracy"] > 0.5
    assert final["resumes"] and final["resumes"][0]["global_step"] == checkpointed
    assert sum(map(sum, final["confusion"])) == 60
    by_volunteer = final["test_accuracy_by_volunteer"]
    assert set(by_volunteer) == {"2", "4"}
    # 12 windows of volunteer 4 and 48 of volunteer 2 make up the whole test accuracy.
    assert (12 * by_volunteer["4"] + 48 * by_volunteer["2"]) / 60 == pytest.approx(final["test_accuracy"])
    assert (run_dir / "tensorboard").is_dir() and any((run_dir / "best").glob("*.index"))


@pytest.mark.e2e
def test_a_worker_the_others_wait_for_is_named_the_straggler(state, tiny, tmp_path):
    run_dir = tmp_path / "run"
    # 12 steps an epoch (240 windows, 2 workers, 10 each): 11 of them timed, the first is not.
    # Validation on the chief, so that epoch 1's row marks the chief's own progress: beside the
    # coordinator the rows lag, and the slowing began when most epochs were over.
    proc = _start("--data-dir", tiny, "--run-dir", run_dir, *TINY_CONV, "--batch", "10", "--epochs", "5", "--mode", "sync",
                  "--evaluator", "chief")
    # Hold worker 1 back as a throttled Pi's CPU would: the kernel gives it 1 % of a core (cpu.max; a
    # tiny step takes about 2 ms of CPU, so at 5 % it kept within 15 ms of the other).
    # Not SIGSTOP/SIGCONT from here: on a loaded machine this process wakes late to stop it again,
    # and a worker that runs a few times longer than meant keeps up (a loaded CI run named nobody).
    group = Cgroup(cgroup_name(f"straggler-{os.getpid()}", "worker1"))
    group.create(Limits(cpu=0.01))
    try:
        _wait_for_epochs(run_dir, 1, proc)
        slow = client_process(run_dir, 1)
        assert slow is not None, "worker 1's client not found"
        try:
            group.add(slow.pid)
        except OSError:
            assert not slow.is_running(), "worker 1's client could not be throttled"  # its epochs done, it has exited
        _out, err = proc.communicate(timeout=300)
    finally:
        proc.kill()
        proc.wait()
        group.remove(timeout=30)  # once its client has exited with the coordinator
    assert proc.returncode == 0, err
    rows = _rows(run_dir)
    # Epochs 3-5 (epoch 2 may have begun before the slowing): worker 1 named, never worker 0; a
    # step now and then in which the stopped worker happened to run may leave one epoch unnamed.
    named = [(r["straggler"], r["straggler_ms"]) for r in rows[2:]]
    assert [who for who, _ in named].count("1") >= 2 and "0" not in [who for who, _ in named], named
    assert all(float(ms) > 10 for who, ms in named if who == "1"), named
    assert err.count("straggler worker:1 (+") >= 2, err


@pytest.mark.e2e
def test_async_training_goes_on_without_a_killed_worker(state, tiny, tmp_path):
    run_dir = tmp_path / "run"
    # Epochs enough that worker 1 is still training when the evaluator (beside the coordinator,
    # behind the chief) has recorded the second: async workers do not wait for each other.
    proc = _start("--data-dir", tiny, "--run-dir", run_dir, *TINY_MODEL, "--epochs", "30", "--mode", "async", "--json")
    out, err = _kill_after(run_dir, proc, epochs=2, timeout=180)
    assert proc.returncode == 0, err
    assert "worker 1 died" in err and "goes on" in err
    result = json.loads(out)
    assert result["lost_workers"] == [1] and result["epochs_run"] == 30
    rows = _rows(run_dir)
    assert len(rows) == 30
    assert float(rows[-1]["train_loss"]) < 0.7 * float(rows[0]["train_loss"])
    # Async: the global step counts every worker's updates; staleness is reported.
    assert rows[0]["staleness_mean"] != "" and int(rows[0]["global_step"]) >= 6
    _no_clients_left(run_dir)


def _epochs_trained(run_dir):
    lines = (run_dir / "trained.jsonl").read_text().splitlines() if (run_dir / "trained.jsonl").exists() else []
    return sum('"epoch"' in line for line in lines)


@pytest.mark.e2e
def test_an_evaluator_that_falls_behind_still_records_every_epoch(state, tiny, tmp_path):
    # A busy coordinator: its evaluator is held still while the chief trains on, far more epochs
    # than the chief's Saver keeps; once it runs again it must find every epoch's weights.
    run_dir = tmp_path / "run"
    proc = _start("--data-dir", tiny, "--run-dir", run_dir, *TINY_MODEL, "--epochs", "24", "--mode", "sync", "--evaluator", "coordinator")
    try:
        _wait_for_epochs(run_dir, 1, proc)
        evaluator = evaluator_process(run_dir)
        evaluator.suspend()
        # The tiny model's epochs are short: the evaluator may have read several before it stopped,
        # never one trained after this count.
        suspended_at = _epochs_trained(run_dir)
        assert suspended_at <= 16, suspended_at
        try:
            deadline = time.monotonic() + 120
            while _epochs_trained(run_dir) < suspended_at + 6 and time.monotonic() < deadline:
                assert proc.poll() is None, proc.communicate()
                time.sleep(0.2)
            assert _epochs_trained(run_dir) >= suspended_at + 6
            held = {p.name.removesuffix(".index") for p in (run_dir / "to-evaluate").glob("*.index")}
            assert len(held) >= 6, held  # the chief's Saver keeps 2: these are the hand-overs
        finally:
            evaluator.resume()
        _out, err = proc.communicate(timeout=180)
    finally:
        proc.kill()
    assert proc.returncode == 0, err
    assert [int(r["epoch"]) for r in _rows(run_dir)] == list(range(1, 25))
    assert "not evaluated" not in (run_dir / "evaluator.log").read_text()
    assert not list((run_dir / "to-evaluate").iterdir())  # each read, each released
    assert len(list((run_dir / "checkpoints").glob("*.index"))) == 2


@pytest.mark.e2e
def test_a_killed_chief_stops_the_run_and_resume_continues(state, tiny, tmp_path):
    run_dir = tmp_path / "run"
    # Sync: no update can land between the chief's last save and its death, so the step is exact.
    proc = _start("--data-dir", tiny, "--run-dir", run_dir, *TINY_MODEL, "--epochs", "40", "--mode", "sync", "--max-restarts", "0")
    _out, err = _kill_after(run_dir, proc, epochs=2, timeout=60, victim=lambda run_dir: client_process(run_dir, 0))
    assert proc.returncode == 1, err
    line = _error_line(err)
    assert "the chief (worker 0) failed" in line and "--resume" in line, err
    _no_clients_left(run_dir)
    checkpointed = checkpointed_step(run_dir)
    result = picluster("train", "har", "--resume", run_dir, "--epochs", str(len(_rows(run_dir)) + 2), "--json", timeout=240)
    assert result.returncode == 0, result.stderr
    final = json.loads(result.stdout)
    assert final["resumes"][0]["global_step"] == checkpointed > 0
    # The killed launch never reached its end: the test set is scored once, by the resumed one,
    # for the epoch chosen on validation over the whole run.
    rows = _rows(run_dir)
    best = min(rows, key=lambda r: (-float(r["val_acc"]), float(r["val_loss"]), int(r["epoch"])))
    assert final["test_scored"]["times"] == 1 and final["test_scored"]["epoch"] == final["best_epoch"] == int(best["epoch"])
    # The evaluator beside the coordinator scored it (the default when this machine holds the data).
    scorings = [ln for name in ("worker-0.log", "evaluator.log") for ln in (run_dir / name).read_text().splitlines() if "test: scored" in ln]
    assert scorings == [f"evaluator: test: scored once, checkpoint of epoch {best['epoch']} (best/model-{best['global_step']})"]
    assert not [c for c in rows[0] if c.startswith("test_")]


@pytest.mark.e2e
def test_a_killed_ps_stops_the_run_naming_it(state, tiny, tmp_path):
    from picluster.cluster.local import LocalCluster

    assert picluster("cluster", "up", "--ps", "1", "--workers", "2").returncode == 0
    run_dir = tmp_path / "run"
    try:
        proc = _start("--data-dir", tiny, "--run-dir", run_dir, *TINY_MODEL, "--epochs", "400", "--mode", "async", "--no-live")
        ps_server = lambda run_dir: psutil.Process(next(s.pid for s in LocalCluster.open().status() if s.label == "ps:0"))
        _out, err = _kill_after(run_dir, proc, epochs=2, timeout=90, victim=ps_server)
        assert proc.returncode == 1, err
        line = _error_line(err)
        assert "ps:0 on localhost stopped answering" in line and "--resume" in line, err
        _no_clients_left(run_dir)
    finally:
        picluster("cluster", "down")


@pytest.mark.e2e
def test_two_ps_tasks_share_the_variables(state, tiny, tmp_path):
    result = picluster("train", "har", "--data-dir", tiny, "--run-dir", tmp_path / "run", *TINY_MODEL, "--epochs", "1",
                       "--ps", "2", "--workers", "2", "--exchange", "fused", "--json", timeout=300)
    assert result.returncode == 0, result.stderr
    out = json.loads(result.stdout)
    per_ps = out["parameters_per_ps"]
    assert set(per_ps) == {"ps:0", "ps:1"} and all(n > 0 for n in per_ps.values()), per_ps
    assert sum(per_ps.values()) == out["parameters"]
    assert json.loads((tmp_path / "run" / "layout.json").read_text())["cluster"] == "temporary"


@pytest.mark.e2e
def test_sync_chief_moves_the_weight_averages(state, tiny, tmp_path):
    """--ema: only the chief applies sync updates, and its step must move the averages too."""
    import tensorflow as tf

    run = tmp_path / "run"
    result = picluster("train", "har", "--data-dir", tiny, "--run-dir", run, *TINY_MODEL, "--epochs", "2",
                       "--ema", "0.9", "--json", timeout=300)
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["config"]["ema"] == 0.9
    first, second = (tf.train.load_checkpoint(str(run / "checkpoints" / f"model.ckpt-{step}")) for step in (6, 12))
    averaged = [name for name, _ in tf.train.list_variables(str(run / "checkpoints")) if name.endswith("ExponentialMovingAverage")]
    assert "output/fc/w/ExponentialMovingAverage" in averaged
    for name in averaged:
        assert not np.allclose(first.get_tensor(name), second.get_tensor(name)), name


# Whether a launch's variables are on the ps: global_step, as the replicas declare it, in the
# launch's container.  Checked on a container made here first, so a wrong name cannot pass.
ON_THE_PS = """
import json, sys
import tensorflow as tf
from picluster.cluster.containers import container, reset
tf.compat.v1.disable_eager_execution()
worker, ps, launches = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])

def held(name, create=False):
    with tf.Graph().as_default(), tf.compat.v1.container(name), tf.compat.v1.device("/job:ps/task:0"):
        step = tf.compat.v1.get_variable("global_step", shape=[], dtype=tf.int64, initializer=tf.compat.v1.zeros_initializer(),
                                         trainable=False, use_resource=True)
        with tf.compat.v1.Session("grpc://" + worker) as session:
            if create:
                session.run(step.initializer)
            return bool(session.run(tf.compat.v1.is_variable_initialized(step)))

control = held("picluster-control", create=True)
reset(ps, ["picluster-control"])
print(json.dumps({"control": [control, held("picluster-control")], "launches": [held(container(l)) for l in launches]}))
"""


@pytest.mark.e2e
def test_each_run_on_a_running_cluster_starts_from_fresh_variables_and_leaves_none(state, tiny, tmp_path):
    """The ps keeps variables between sessions: a second run must not inherit the first one's, and
    a run's variables must not stay on the ps after it (a cluster that stays up would fill)."""
    assert picluster("cluster", "up", "--ps", "1", "--workers", "2").returncode == 0
    try:
        firsts, launches = [], []
        for name in ("one", "two"):
            result = picluster("train", "har", "--data-dir", tiny, "--run-dir", tmp_path / name, *TINY_MODEL,
                               "--epochs", "1", "--json", timeout=240)
            assert result.returncode == 0, result.stderr
            layout = json.loads((tmp_path / name / "layout.json").read_text())
            assert layout["cluster"] == "local"
            launches.append(layout["launch"])
            firsts.append(int(_rows(tmp_path / name)[0]["global_step"]))
        assert firsts == [6, 6]  # 240 windows / 2 workers / 20 per worker, counted from zero both times
        tasks = {(t.job, t.index): t.address for t in Layout.from_json(layout["layout"]).tasks}
        probe = subprocess.run([sys.executable, "-c", ON_THE_PS, tasks["worker", 0], tasks["ps", 0], json.dumps(launches)],
                               capture_output=True, text=True, timeout=120, env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2"))
        assert probe.returncode == 0, probe.stderr
        assert json.loads(probe.stdout) == {"control": [True, False], "launches": [False, False]}
    finally:
        picluster("cluster", "down")


@pytest.mark.e2e
@pytest.mark.parametrize("mode", [["--standalone"], ["--mode", "sync"]])
def test_the_same_seed_gives_the_same_metrics(state, tiny, tmp_path, mode):
    """Seeded initialisation, dropout, input order and augmentation: two runs, identical numbers."""
    columns = ("train_loss", "train_acc", "val_loss", "val_acc")
    runs, tests = [], []
    for i in range(2):
        run_dir = tmp_path / f"run{i}"
        result = picluster("train", "har", "--data-dir", tiny, "--run-dir", run_dir, *TINY_CONV, "--epochs", "3",
                           "--seed", "7", *mode, "--json", timeout=240)  # the default augmentation
        assert result.returncode == 0, result.stderr
        runs.append([[r[c] for c in columns] for r in _rows(run_dir)])
        final = json.loads(result.stdout)
        tests.append((final["test_accuracy"], final["test_loss"]))
        assert final["model"] == "convlstm" and final["augment"] == "rotate:45,scale:0.1,shift:8"
        assert final["deterministic"] == {"seed": 7, "op_determinism": False, "reproducible": True, "threads": None}
    assert len(runs[0]) == 3 and runs[0] == runs[1] and tests[0] == tests[1]
    if "sync" in mode:
        # The statistics emulator makes the same updates in one process: the same numbers again.
        result = picluster("train", "har", "--data-dir", tiny, "--run-dir", tmp_path / "emulated", *TINY_CONV, "--epochs", "3",
                           "--seed", "7", "--emulate", "--workers", "2", "--json", timeout=240)
        assert result.returncode == 0, result.stderr
        final = json.loads(result.stdout)
        assert [[r[c] for c in columns] for r in _rows(tmp_path / "emulated")] == runs[0]
        assert (final["test_accuracy"], final["test_loss"]) == tests[0]
        assert [r["global_step"] for r in _rows(tmp_path / "emulated")] == [r["global_step"] for r in _rows(tmp_path / "run0")]
