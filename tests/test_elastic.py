"""A sync training that loses a task goes on from its last checkpoint (picluster/jobs/har/elastic.py):
real clients and servers on the embedded local cluster, killed as the OOM killer or a pulled plug
would; the rules of what the next launch trains with, and what the run records, as units."""

import json
import time

import psutil
import pytest

from picluster.jobs.har import clients, elastic
from picluster.jobs.har.config import TrainConfig
from picluster.jobs.har.replica import cluster_and_task
from picluster.model.clusterspec import Layout, Task
from picluster.util.errors import UsageError

from conftest import picluster, picluster_popen
from train_fixtures import TINY_MODEL, client_process, evaluator_process, relaunched
from train_fixtures import error_line as _error_line

LAYOUT = Layout((Task("ps", 0, "node01", "10.0.0.1", 2222), Task("worker", 0, "node02", "10.0.0.2", 2222),
                 Task("worker", 1, "node03", "10.0.0.3", 2222), Task("worker", 2, "node04", "10.0.0.4", 2222)))


# -- units ---------------------------------------------------------------------------------------


def test_a_launch_without_a_worker_names_its_members_in_tf_config_and_each_replica_takes_its_place():
    every = json.loads(clients.tf_config(LAYOUT, 1, [0, 1, 2]))
    assert "members" not in every  # every worker: TF_CONFIG as TFJob writes it
    fewer = clients.tf_config(LAYOUT, 2, [0, 2])
    assert json.loads(fewer)["members"] == [0, 2] and json.loads(fewer)["task"] == {"type": "worker", "index": 2}
    cfg = TrainConfig.for_model(workers=3)
    cluster, task, members = cluster_and_task(cfg, fewer)
    # Task 2 keeps its server's place in the cluster; it trains as the second of two workers.
    assert task == 2 and members == [0, 2] and members.index(task) == 1
    assert len(cluster["worker"]) == 3


@pytest.mark.parametrize("members", [[0, 5], [2, 0], [0, 0, 2], [0, 1], "0,2", [0, True]])
def test_a_tf_config_whose_members_are_not_the_clusters_workers_in_order_is_refused(members):
    text = json.loads(LAYOUT.tf_config("worker", 2)) | {"members": members}
    with pytest.raises(UsageError, match="TF_CONFIG is not a worker's cluster spec"):
        cluster_and_task(TrainConfig.for_model(workers=3), json.dumps(text))


def test_the_deadline_adapts_to_the_slowest_epoch_and_an_option_sets_it():
    assert elastic.deadline(0, []) == elastic.DEADLINE_FLOOR_S
    assert elastic.deadline(0, [2.0, 3.0]) == elastic.DEADLINE_FLOOR_S  # short epochs: the floor
    assert elastic.deadline(0, [20.0, 41.0, 30.0]) == pytest.approx(123.0)  # three of the slowest
    assert elastic.deadline(12.5, [100.0]) == 12.5


def test_the_record_gives_the_workers_of_each_epoch_the_epochs_trained_again_and_the_seconds_lost():
    record = elastic.Record(max_restarts=2)
    record.launched([0, 1, 2])
    record.resumed(0, 100.0)
    lost = elastic.Lost("worker:2 on node04 stopped answering", LAYOUT.task("worker", 2), "stopped answering")
    assert record.lost(lost, 3, {1: 110.0, 2: 120.0, 3: 130.0})
    record.launched([0, 1])
    record.resumed(3, 150.5)  # the epoch-3 checkpoint restored; training again 20.5 s after it was written
    record.launched([0, 1, 2])  # node04 rejoined
    record.resumed(6, 200.0)
    summary = record.summary(epochs_run=8)
    assert summary["restarts"] == 1 and summary["launches"] == 3
    assert summary["workers_per_epoch"] == {"1": 3, "2": 3, "3": 3, "4": 2, "5": 2, "6": 2, "7": 3, "8": 3}
    assert summary["failures"] == [{"task": "worker:2", "node": "node04", "cause": "stopped answering", "epochs_done": 3,
                                    "time": summary["failures"][0]["time"], "restored_epoch": 3, "seconds_lost": 20.5,
                                    "epochs_repeated": 1}]
    assert summary["seconds_lost"] == 20.5 and summary["epochs_repeated"] == 1
    assert elastic.line(summary) == ("lost 1 time: worker:2 on node04 after epoch 3 (stopped answering); 1 restart, "
                                     "1 epoch(s) trained again, 20 s lost, 2-3 workers an epoch")


def test_past_the_budget_the_record_says_no_more():
    record = elastic.Record(max_restarts=1)
    record.launched([0, 1])
    lost = elastic.Lost("worker:1 died", LAYOUT.task("worker", 1), "signal 9")
    assert record.lost(lost, 2, {}) is True
    assert record.lost(lost, 4, {}) is False and record.restarts == 1


def test_a_loss_before_any_checkpoint_came_here_starts_the_run_over_and_counts_all_it_trained_as_lost(tmp_path):
    """The chief's node cut in the run's first epochs, before its first checkpoint was copied here:
    the next launch starts from epoch 1 (a relaunched chief would otherwise refuse to overwrite the
    records), saying so, and the record counts every epoch trained and the time since the lost
    launch began."""
    from types import SimpleNamespace

    from picluster.jobs.har import coordinator, metrics
    from picluster.jobs.har.rundir import RunDir

    run = RunDir(tmp_path / "run")
    run.path.mkdir()
    run.config.write_text("{}")
    metrics.write_rows(run.metrics, [{"epoch": e, "time": 100.0 + e} for e in (1, 2)])
    record = elastic.Record(max_restarts=3)
    record.launched([0, 1, 2])
    record.launches[-1]["time"] = 90.0
    record.lost(elastic.Lost("worker:0 on node02 stopped answering", LAYOUT.task("worker", 0), "stopped answering"),
                2, {1: 101.0, 2: 102.0})
    said: list[str] = []
    assert not run.has_checkpoint()
    coordinator._start_over(run, record, SimpleNamespace(note=said.append))
    assert said == ["no checkpoint of the run had reached this machine yet: it starts again from epoch 1"]
    assert not run.metrics.exists() and run.config.exists()
    record.launched([1, 2])
    metrics.write_rows(run.metrics, [{"epoch": 1, "time": 130.0, "epoch_s": 2.0}])  # the new launch's first epoch
    coordinator._restored(run, record, "l2", began=120.0, started_over=True)
    failure = record.summary(epochs_run=1)["failures"][0]
    assert (failure["restored_epoch"], failure["epochs_repeated"], failure["seconds_lost"]) == (0, 3, 38.0)


def test_past_the_budget_the_last_line_names_the_checkpoint_the_clean_up_copied_back(tmp_path):
    """A node's chief's checkpoint may reach this machine only once the clients have stopped (each
    round mid-epoch can miss one the chief is rewriting): the run's last line is written after
    that, so it says how to resume from it."""
    from types import SimpleNamespace

    from picluster.jobs.har import coordinator
    from picluster.jobs.har.rundir import RunDir
    from picluster.util.errors import ClusterError

    run = RunDir(tmp_path / "run")
    run.path.mkdir()
    lost = elastic.Lost("worker 2 on node04 died (signal 9); sync training cannot go on without it",
                        LAYOUT.task("worker", 2), "signal 9", run.resume_hint())
    assert lost.hint == ""  # as the loss was seen: no checkpoint here yet
    run.checkpoints.mkdir()  # then the clean-up's last copy
    (run.checkpoints / RunDir.CHECKPOINT_STATE).write_text('model_checkpoint_path: "model.ckpt-8"\n')
    (run.checkpoints / "model.ckpt-8.index").write_bytes(b"")
    record = elastic.Record(max_restarts=0)
    record.launched([0, 1, 2])
    with pytest.raises(ClusterError) as stopped:
        coordinator._after_loss(lost, record, None, LAYOUT, SimpleNamespace(note=print), run)
    assert str(stopped.value) == ("worker 2 on node04 died (signal 9); sync training cannot go on without it"
                                  f"; continue with 'picluster train har --resume {run}'")


def test_in_a_relaunchs_start_up_a_killed_client_or_a_lost_node_is_a_loss_and_its_own_failure_is_not():
    """The run trained before: a Pi that dies while the next launch starts is one more loss; a
    client's own error (exit 1, a usage error's 2) would fail again in every launch, and ends the run."""
    from picluster.jobs.har.follow import _Training

    training = _Training.__new__(_Training)  # the rule alone, without a run to follow
    training.started, training.relaunch = False, True
    assert training._mid_run(128 + 9) and training._mid_run(None) and training._mid_run(clients.LOST)
    assert not training._mid_run(1) and not training._mid_run(2)
    training.relaunch = False  # the run's first launch: a start-up failure is the run's
    assert not training._mid_run(128 + 9) and not training._mid_run(None)
    training.started = True
    assert training._mid_run(1)


def test_a_relaunch_times_its_steps_from_its_own_live_json_not_the_last_launchs(tmp_path):
    """The last launch's live.json is still in the run folder as the next launch starts: it is no
    step of the new one, whose start-up --worker-deadline does not time (and a client's own error
    in it ends the run); the new chief's first live.json is its first step."""
    from types import SimpleNamespace

    from picluster.jobs.har.follow import _live_time, _Training
    from picluster.jobs.har.progress import Follower
    from picluster.jobs.har.rundir import RunDir
    from picluster.util import atomic

    run = RunDir(tmp_path)
    atomic.write_json(run.live, {"epoch": 27, "epochs": 40, "step": 3, "steps": 15, "time": 1000.0})  # the lost launch's
    training = _Training.__new__(_Training)  # what __init__ keeps of the folder, then the records' look
    training.run, training.stamps, training.shown, training.moved = run, {}, set(), 0.0
    training.earlier_live, training.started = _live_time(run), False
    training.shown_progress = Follower(None, SimpleNamespace(live=False), quiet=True)
    training._records()
    assert not training.started and training.moved == 0.0
    atomic.write_json(run.live, {"epoch": 27, "epochs": 40, "step": 1, "steps": 15, "time": 1100.0})  # the new chief's
    training._records()
    assert training.started and training.moved > 0


def test_a_loss_while_a_left_out_worker_answers_again_is_recorded_as_a_loss_and_the_clean_up_reads_every_epoch(tmp_path, monkeypatch):
    """The clean-up before a restart reads the evaluator's rows until every epoch the chief finished
    is scored.  A worker left out earlier that answers meanwhile must not turn the loss into a
    rejoin (the loss unrecorded, the restart not spent) nor end the clean-up at the first new row."""
    from types import SimpleNamespace

    from picluster.jobs.har import follow as following
    from picluster.jobs.har import metrics
    from picluster.jobs.har.follow import _Training
    from picluster.jobs.har.progress import Follower
    from picluster.jobs.har.rundir import RunDir
    from picluster.jobs.har.trained import Trained

    run = RunDir(tmp_path)
    for epoch in (1, 2, 3):
        Trained(run.trained, "a2").add(epoch=epoch, checkpoint=f"model.ckpt-{10 * epoch}")  # the chief's three epochs

    class Evaluator:  # stand-in for the evaluator beside the coordinator: it scores one epoch each poll
        label, scored = "evaluator", 0

        def poll(self):
            if self.scored < 3:
                self.scored += 1
                metrics.write_rows(run.metrics, [{"epoch": e, "global_step": 10 * e, "val_acc": 0.9, "time": 100.0 + e} for e in range(1, self.scored + 1)])
            return None

    chief = SimpleNamespace(label="worker:0", task=0, sync=lambda final=False: None, poll=lambda: None)
    training = _Training.__new__(_Training)  # what __init__ keeps for the clean-up
    training.run, training.launch, training.evaluator, training.running, training.chief = run, "a2", Evaluator(), [chief], chief
    training.stamps, training.shown, training.moved, training.earlier_live, training.started = {}, set(), 0.0, None, True
    training.epoch_s, training.epochs_done, training.row_times, training.resume_said = [], 0, {}, False
    training.shown_progress = Follower(None, SimpleNamespace(live=False, note=lambda *a: None, epoch=lambda *a, **k: None), quiet=True)
    training.missing = training.answered = [Task("worker", 2, "node03", "127.0.0.13", 2222)]  # left out, and answering again
    monkeypatch.setattr(following.clients, "stop_only", lambda running: None)
    monkeypatch.setattr(following.time, "sleep", lambda s: None)
    lost = elastic.Lost("worker 1 on node02 died (signal 9)", Task("worker", 1, "node02", "127.0.0.12", 2222), "signal 9")
    training.settle(lost)
    assert training.epochs_done == 3 and training.evaluator.scored == 3


def test_a_launch_that_ends_for_a_rejoin_or_a_stall_returns_it_as_its_outcome_and_raises_nothing(tmp_path, monkeypatch):
    """Watching a launch returns what happened: a left-out worker answering at an epoch's end is a
    Rejoin, no step within the deadline a Lost with no task to blame; neither is raised from the
    reading of records, and the coordinator decides on each in one place."""
    from types import SimpleNamespace

    from picluster.jobs.har import follow as following
    from picluster.jobs.har import metrics
    from picluster.jobs.har.rundir import RunDir

    run = RunDir(tmp_path)

    def launch(epoch: int) -> list:
        """A chief whose sync brings the row of ``epoch`` (as a node's mirror does), and a worker."""
        row = {"epoch": epoch, "global_step": 10 * epoch, "val_acc": 0.9, "time": 100.0 + epoch, "epoch_s": 1.0}
        chief = SimpleNamespace(label="worker 0", task=0, folder=None, runtime="separate", poll=lambda: None,
                                sync=lambda final=False: metrics.write_rows(run.metrics, [row]))
        return [chief, SimpleNamespace(label="worker 1", task=1, folder=None, runtime="separate", poll=lambda: None)]

    left_out = Task("worker", 2, "node03", "127.0.0.13", 2222)
    job = SimpleNamespace(live=False, note=lambda *a: None, epoch=lambda *a, **k: None)
    monkeypatch.setattr(following, "unanswered", lambda tasks, **kw: [])  # every server answers, the left-out one too
    monkeypatch.setattr(following, "CHECK_S", 0.0)
    config = TrainConfig(workers=2, mode="sync")
    rejoin = following.follow(run, config, launch(1), job, quiet=True, launch=following.Watching("a1", missing=(left_out,)))
    assert isinstance(rejoin, elastic.Rejoin) and rejoin.tasks == [left_out]

    # A stall: training began (the row of epoch 2), then no step within the deadline.
    stalled = following.follow(run, config, launch(2), job, quiet=True, launch=following.Watching("a2", deadline_s=0.5))
    assert isinstance(stalled, elastic.Lost) and stalled.task is None and stalled.cause == "no step for 0 s"


# -- real runs on the embedded local cluster -----------------------------------------------------


def _epochs(run_dir) -> list[int]:
    import csv

    try:
        with open(run_dir / "metrics.csv") as f:
            return [int(r["epoch"]) for r in csv.DictReader(f)]
    except FileNotFoundError:
        return []


def _rows(run_dir) -> list[dict]:
    import csv

    with open(run_dir / "metrics.csv") as f:
        return list(csv.DictReader(f))


def _wait_for(run_dir, proc, epochs: int, timeout: float = 180) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if len(_epochs(run_dir)) >= epochs:
            return
        assert proc.poll() is None, proc.communicate()
        time.sleep(0.2)
    raise AssertionError(f"no {epochs} epochs after {timeout} s")


def _kill_when(run_dir, proc, epochs: int, victim) -> None:
    _wait_for(run_dir, proc, epochs)
    target = victim()
    assert target is not None, "nothing to kill"
    target.kill()


def _no_clients_left(run_dir):
    time.sleep(0.5)
    assert all(client_process(run_dir, t) is None for t in range(3))


@pytest.mark.e2e
def test_a_sync_run_that_loses_a_worker_goes_on_from_its_last_checkpoint_as_if_nothing_happened(state, tiny, tmp_path):
    calm = picluster("train", "har", "--data-dir", tiny, "--run-dir", tmp_path / "calm", *TINY_MODEL, "--epochs", "30", "--json",
                     timeout=300)
    assert calm.returncode == 0, calm.stderr
    run_dir = tmp_path / "run"
    proc = picluster_popen("train", "har", "--data-dir", tiny, "--run-dir", run_dir, *TINY_MODEL, "--epochs", "30", "--json")
    try:
        _kill_when(run_dir, proc, 3, lambda: client_process(run_dir, 1))  # as the OOM killer would
        out, err = proc.communicate(timeout=300)
    finally:
        proc.kill()
    assert proc.returncode == 0, err
    said = [line for line in err.splitlines() if "lost during epoch" in line]
    assert len(said) == 1 and said[0].startswith("worker:1 on localhost lost during epoch ") and said[0].endswith("(signal 9): restart 1 of 3"), err
    assert "going on with 2 workers from the last checkpoint" in err, err
    result = json.loads(out)
    lost = result["elastic"]
    assert lost["restarts"] == 1 and lost["max_restarts"] == 3 and lost["launches"] == 2
    assert [(f["task"], f["cause"]) for f in lost["failures"]] == [("worker:1", "signal 9")]
    assert lost["failures"][0]["restored_epoch"] >= 3 and lost["epochs_repeated"] == 1 and lost["seconds_lost"] > 0
    assert lost["workers_per_epoch"] == {str(e): 2 for e in range(1, 31)}
    # Every epoch recorded once, and the run is the undisturbed one: the restored checkpoint, the
    # keyed input order and dropout make the same updates.
    assert _epochs(run_dir) == list(range(1, 31))
    calm_rows = _rows(tmp_path / "calm")
    assert [r["val_acc"] for r in _rows(run_dir)] == [r["val_acc"] for r in calm_rows]
    assert result["test_accuracy"] == json.loads(calm.stdout)["test_accuracy"]
    assert result["val_accuracy"] >= 0.96  # the target, on this tiny set (the model chosen on validation)
    assert json.loads((run_dir / "result.json").read_text())["elastic"] == lost  # on record, not only printed
    _no_clients_left(run_dir)
    # The job's record says what it lost.
    shown = picluster("jobs", str(_job_id(result, run_dir)))
    assert shown.returncode == 0 and "lost 1 time: worker:1 on localhost" in shown.stdout, shown.stdout


def _job_id(result, run_dir) -> int:
    """The newest training's job id (the one that lost a worker ran after the calm one)."""
    listed = json.loads(picluster("jobs", "--json").stdout)
    return max(j["id"] for j in listed["jobs"] if j["kind"] == "har")


@pytest.mark.e2e
def test_a_killed_chief_then_a_killed_ps_each_restart_the_run_and_it_finishes(state, tiny, tmp_path):
    from picluster.cluster.local import LocalCluster

    assert picluster("cluster", "up", "--ps", "1", "--workers", "2").returncode == 0
    run_dir = tmp_path / "run"
    try:
        # The ps holds the variables only in the ps exchanges: a run that keeps them there.
        proc = picluster_popen("train", "har", "--data-dir", tiny, "--run-dir", run_dir, *TINY_MODEL, "--epochs", "40",
                               "--exchange", "fused", "--json")
        try:
            _kill_when(run_dir, proc, 2, lambda: client_process(run_dir, 0))
            relaunched(run_dir, proc, set())  # not while the first restart is under way: two losses, one after the other
            psutil.Process(next(s.pid for s in LocalCluster.open().status() if s.label == "ps:0")).kill()
            out, err = proc.communicate(timeout=300)
        finally:
            proc.kill()
        assert proc.returncode == 0, err
        result = json.loads(out)
        lost = result["elastic"]
        assert [f["task"] for f in lost["failures"]] == ["worker:0", "ps:0"] and lost["restarts"] == 2, err
        assert result["val_accuracy"] >= 0.96  # the target, on this tiny set
        assert "ps:0 on localhost lost during epoch" in err and "restart 2 of 3" in err, err
        assert _epochs(run_dir) == list(range(1, 41))
        # The ps was started again by the run, on its port: the cluster is up as it was.
        assert all(s.state == "up" for s in LocalCluster.open().status() if s.task is not None)
        _no_clients_left(run_dir)
    finally:
        picluster("cluster", "down")


@pytest.mark.e2e
def test_a_stall_restarts_the_run_once_the_evaluator_has_scored_every_epoch_the_chief_recorded(state, tiny, tmp_path):
    """A worker that stops stepping (SIGSTOP: a hung process) stalls a sync run past --worker-deadline;
    the restart waits for the evaluator, behind the chief as on a busy coordinator, to score the
    epochs the chief recorded, or the next launch would go on past epochs nothing ever scored."""
    assert picluster("cluster", "up", "--ps", "1", "--workers", "2").returncode == 0
    run_dir = tmp_path / "run"
    held = []
    try:
        proc = picluster_popen("train", "har", "--data-dir", tiny, "--run-dir", run_dir, *TINY_MODEL, "--epochs", "60",
                               "--worker-deadline", "6", "--json")
        try:
            _wait_for(run_dir, proc, 2)
            evaluator, stalled = evaluator_process(run_dir), client_process(run_dir, 1)
            assert evaluator is not None and stalled is not None
            evaluator.suspend()
            held.append(evaluator)
            time.sleep(1.5)  # the chief records epochs the evaluator has not scored
            stalled.suspend()
            held.append(stalled)
            time.sleep(6 + 7)  # past the deadline: the run has lost the worker and waits for the evaluator
            try:
                evaluator.resume()
            except psutil.NoSuchProcess:
                pass  # stopped with its launch: what it had not scored is asserted below
            out, err = proc.communicate(timeout=300)
        finally:
            for p in held:
                try:
                    p.resume()
                except psutil.Error:
                    pass
            proc.kill()
        assert proc.returncode == 0, err
        assert "lost during epoch" in err and "(no step for 6 s): restart 1 of 3" in err, err
        assert _epochs(run_dir) == list(range(1, 61)), err
        assert json.loads(out)["elastic"]["restarts"] == 1
        _no_clients_left(run_dir)
    finally:
        picluster("cluster", "down")


@pytest.mark.e2e
def test_past_its_restarts_the_run_stops_with_the_command_that_resumes_it(state, tiny, tmp_path):
    run_dir = tmp_path / "run"
    proc = picluster_popen("train", "har", "--data-dir", tiny, "--run-dir", run_dir, *TINY_MODEL, "--epochs", "100",
                           "--max-restarts", "1")
    try:
        _kill_when(run_dir, proc, 2, lambda: client_process(run_dir, 1))
        relaunched(run_dir, proc, set())
        client_process(run_dir, 1).kill()
        _out, err = proc.communicate(timeout=120)
    finally:
        proc.kill()
    assert proc.returncode == 1, err
    line = _error_line(err)
    assert line.startswith("picluster: error: worker 1 died (signal 9"), line
    assert "after 1 restart (--max-restarts 1); continue with 'picluster train har --resume " in line, line
    assert "Traceback" not in err
    _no_clients_left(run_dir)


def test_a_negative_worker_deadline_is_refused_in_one_line(state, tiny, tmp_path):
    result = picluster("train", "har", "--data-dir", tiny, "--run-dir", tmp_path / "run", "--worker-deadline", "-1")
    assert result.returncode == 2 and result.stderr.count("\n") == 1, result.stderr
    assert "--worker-deadline -1 must be 0 (adaptive) or more seconds" in result.stderr
    assert not (tmp_path / "run").exists()  # nothing half written
