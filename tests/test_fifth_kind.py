"""A fifth kind of cluster, made in this test, runs a Monte-Carlo job, a launch and a training: the
jobs use what ``Cluster`` offers (layout, launcher, stage, job_folder, start_task) and never ask
which kind they have,
so a kind plugs in as one class plus its line in ``attach`` (here: a patched ``find``)."""

import json
import os
from pathlib import Path

import pytest

from picluster.cluster import attach
from picluster.cluster.base import Agent, Cluster, TaskState
from picluster.cluster.inprocess import InProcessCluster
from picluster.jobs import controller
from picluster.jobs.har import coordinator
from picluster.jobs.har.config import TrainConfig
from picluster.jobs.har.job import HarJob
from picluster.jobs.launch import config as launch_config
from picluster.jobs.launch.launcher import Launch
from picluster.jobs.montecarlo.job import MonteCarloJob
from picluster.views.live import JobDisplay

from train_fixtures import write_tiny_har

pytestmark = pytest.mark.e2e

MARK = "PICLUSTER_FIFTH_KIND"


class Borrowed(Cluster):
    """Servers it did not start (another cluster's), and job processes started through a launcher
    of its own: `env`, marking each process, as srun marks a Slurm step."""

    kind = "borrowed"
    what = "the borrowed cluster"
    title = "borrowed"

    def __init__(self, servers: Cluster) -> None:
        self.servers = servers
        self.layout = servers.layout
        self.started: list[str] = []

    def status(self) -> list[TaskState]:
        return self.servers.status()

    def agents(self) -> list[Agent]:
        return []

    def launcher(self, node: str) -> tuple[str, ...]:
        return ("env", f"{MARK}={node}")

    def start_task(self, spec, grace, on_line):
        self.started.append(spec.label)
        return super().start_task(spec, grace, on_line)


@pytest.fixture
def borrowed(state, monkeypatch):
    servers = InProcessCluster.start(ps=1, workers=2, temporary=True)
    try:
        fifth = Borrowed(servers)
        monkeypatch.setattr(attach, "find", lambda inventory, stale=False: fifth)
        yield fifth
    finally:
        servers.close()


def test_a_monte_carlo_job_runs_on_a_kind_the_jobs_do_not_know(borrowed):
    result = controller.run(MonteCarloJob(samples=2_000_000, workers=2, seed=7, show_progress=False), None, live=False)
    assert (result.cluster_kind, result.cluster_description) == ("borrowed", "borrowed cluster")
    assert result.estimate.nodes == 2 and abs(result.estimate.pi - 3.14159) < 0.01


def test_a_launch_runs_its_tasks_through_the_kinds_own_launcher(borrowed, tmp_path):
    script = tmp_path / "where.py"
    script.write_text("import json, os\nprint('task', json.loads(os.environ['TF_CONFIG'])['task']['index'], "
                      f"os.environ.get({MARK!r}))\n")
    config = launch_config.make(script, [], "each-worker", name="where")
    outcome = controller.run(Launch(config), None, live=False)
    assert outcome.state == "COMPLETED", outcome.reason
    assert sorted(borrowed.started) == ["worker:0", "worker:1"]
    logs = {p.name: p.read_text() for p in Path(outcome.log_dir).iterdir() if p.suffix == ".log"}
    said = sorted(line for text in logs.values() for line in text.splitlines() if line.startswith("task "))
    assert said == ["task 0 localhost", "task 1 localhost"], logs
    assert os.environ.get(MARK) is None  # the mark came from the launcher, not from here


def test_a_training_starts_its_clients_through_the_kind(borrowed, tmp_path):
    config = TrainConfig.for_model(model="convlstm", layers=1, conv_filters=4, conv_pool=8, rnn_hidden=8, batch=20, learning_rate=0.01,
                                   workers=2, ps=1, epochs=2, data_dir=str(write_tiny_har(tmp_path / "har")))
    run = coordinator.new_run_dir(tmp_path / "run")
    display = JobDisplay("train har", "epochs", live=False)
    job = HarJob(config, run, "auto", quiet=True)
    result = controller.run(job, None, display=display)
    assert sorted(borrowed.started) == ["worker:0", "worker:1"]
    assert result["epochs_run"] == 2 and 0.0 <= result["test_accuracy"] <= 1.0, result
    assert json.loads(run.layout.read_text())["cluster"] == "borrowed"
