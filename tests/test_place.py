"""Where a job runs decides its defaults before anything starts (attach.place), and the jobs take
them from there (Job.placed); a training reports through the controller's Running."""

import io
import os
import tomllib

import pytest
from rich.console import Console

from picluster.cluster import attach
from picluster.cluster.attach import Place, place
from picluster.jobs import controller
from picluster.jobs.controller import Job, Running
from picluster.jobs.har.config import TrainConfig
from picluster.jobs.har.progress import Follower
from picluster.jobs.launch import config as launch_config
from picluster.jobs.launch.launcher import Launch
from picluster.jobs.montecarlo.job import MonteCarloJob, SweepJob
from picluster.jobs.records import JobStore
from picluster.model.inventory import parse_inventory
from picluster.views.live import JobDisplay

from render import console, text
from train_fixtures import write_tiny_har

pytestmark = pytest.mark.unit

# Five nodes, node01 the ps only: four workers, and five nodes with a server.
INVENTORY = '[cluster]\nname = "pis"\nuser = "pi"\nnodes = "node[01-05]"\naddresses = "127.0.0.[11-15]"\n[roles]\nps = "node01"\n'
ROW = {"epoch": "1", "train_loss": "1.2", "train_acc": "0.5", "val_loss": "1.1", "val_acc": "0.6", "val_f1": "0.55",
       "epoch_s": "3", "input_s": "0.1", "compute_s": "2", "exchange_s": "0.9"}


@pytest.fixture(autouse=True)
def here(tmp_path, monkeypatch):
    """No local cluster running, no Slurm job around."""
    monkeypatch.setenv("PICLUSTER_STATE_DIR", str(tmp_path / "state"))
    for name in [n for n in os.environ if n.startswith("SLURM_") or n.startswith("PICLUSTER_SLURM")]:
        monkeypatch.delenv(name)


def test_each_place_gives_its_defaults(monkeypatch):
    local = place(None)
    assert (local.name, local.workers, local.all_workers, local.nodes) == ("local", None, os.cpu_count(), os.cpu_count())
    nodes = place(parse_inventory(tomllib.loads(INVENTORY)))
    assert (nodes.workers, nodes.ps, nodes.all_workers, nodes.nodes) == (4, 1, 4, 5)
    monkeypatch.setenv("SLURM_JOB_ID", "42")
    monkeypatch.setenv("SLURM_JOB_NUM_NODES", "6")
    slurm = place(parse_inventory(tomllib.loads(INVENTORY)))  # the allocation wins over the inventory
    assert (slurm.name, slurm.workers, slurm.ps, slurm.all_workers, slurm.nodes) == ("slurm:42", 5, 1, 6, 6)


def test_jobs_take_what_they_were_not_told_from_their_place(tmp_path):
    where = place(parse_inventory(tomllib.loads(INVENTORY)))
    untold, told = MonteCarloJob(10, None, 7), MonteCarloJob(10, 2, 7)
    untold.placed(where)
    told.placed(where)
    assert (untold.workers, untold.title, told.workers) == (5, "montecarlo on 5 node(s)", 2)
    sweep, listed = SweepJob([10], None, 7), SweepJob([10], [1, 3], 7)
    sweep.placed(where)
    listed.placed(where)
    assert (sweep.node_counts, sweep.workers, listed.node_counts, listed.workers) == ([5], 5, [1, 3], 3)
    script = tmp_path / "s.py"
    script.write_text("print(1)\n")
    launch = Launch(launch_config.make(script, [], "each-worker", name="s"))
    launch.placed(where)
    assert launch.workers == 4


def test_a_trainings_epoch_lines_go_to_stderr_without_a_panel_and_not_with_json(capsys):
    shown = Follower(TrainConfig(epochs=3), Running(None, JobDisplay("train har", "epochs", live=False)))
    shown.epoch(ROW)
    out, err = capsys.readouterr()
    assert out == "" and err.startswith("epoch   1  train 1.200 50.0%  val 1.100 60.0% F1 0.550  3.0s")
    Follower(TrainConfig(epochs=3), Running(None, JobDisplay("train har", "epochs", live=False)), quiet=True).epoch(ROW)
    assert capsys.readouterr() == ("", "")


def test_on_a_panel_epoch_lines_and_notes_print_above_it():
    screen = console(200, terminal=True)
    running = Running(None, JobDisplay("train har", "epochs", console=screen))
    Follower(TrainConfig(epochs=3), running).epoch(ROW)
    running.note("cluster: local, 1 ps + 2 workers")
    lines = text(screen).splitlines()
    assert lines[0].startswith("epoch   1  train") and lines[1] == "cluster: local, 1 ps + 2 workers"


def test_runnings_three_lines_keep_their_streams_and_styles(capsys):
    """say and note on stderr, emit on stdout without a panel; above one, note dim and wrapped
    to the console's width, say and emit unwrapped, none of them read as markup."""
    plain = Running(None, JobDisplay("job", "tasks", live=False))
    plain.say("[b]said[/b]")
    plain.note("noted")
    plain.emit("emitted")
    assert capsys.readouterr() == ("emitted\n", "[b]said[/b]\nnoted\n")
    screen = Console(file=io.StringIO(), width=20, color_system="standard", force_terminal=True, legacy_windows=False)
    above = Running(None, JobDisplay("job", "tasks", console=screen))
    long = "x" * 30
    above.say(f"[b]{long}")
    above.note(long)
    above.emit(long)
    assert text(screen).splitlines() == [f"[b]{long}", "\x1b[2m" + "x" * 20 + "\x1b[0m", "\x1b[2m" + "x" * 10 + "\x1b[0m", long]
    assert capsys.readouterr() == ("", "")


class _Here(Job):
    """A job that needs no cluster and remembers where it was placed."""

    name = kind = "here"
    standalone = True

    def placed(self, where):
        self.where = where

    def body(self, cluster, running):
        return "done"


def test_the_controller_takes_a_place_it_is_handed_and_places_nothing_again(monkeypatch):
    """A caller that has placed the job hands its Place over: the job and its record take it."""
    def no_second_place(inventory):
        raise AssertionError("placed again")

    monkeypatch.setattr(attach, "place", no_second_place)
    handed = Place("handed", ("separate",))
    job = _Here()
    assert controller.run(job, None, live=False, where=handed) == "done"
    assert job.where is handed and JobStore().list()[0].cluster == "handed"
    # Not handed one: placed there, as before.
    monkeypatch.setattr(attach, "place", lambda inventory: Place("placed", ("separate",)))
    controller.run(job, None, live=False)
    assert job.where.name == "placed" and JobStore().list()[-1].cluster == "placed"


def test_train_har_hands_the_controller_the_place_its_options_came_from(tmp_path, monkeypatch):
    """Placed once, by the command (its workers, ps, run folder and data follow from it), and that
    Place is the one the controller records and attaches by: here the controller is a stand-in."""
    from picluster.cli.train import train

    placed, handed = [], []

    def counted(inventory, real=attach.place):
        placed.append(real(inventory))
        return placed[-1]

    def ran(job, inventory, live=True, display=None, where=None):
        handed.append(where)
        return {}

    monkeypatch.setattr(attach, "place", counted)
    monkeypatch.setattr(controller, "run", ran)
    monkeypatch.delenv("PICLUSTER_INVENTORY", raising=False)
    monkeypatch.chdir(tmp_path)  # no ./picluster.toml
    data = write_tiny_har(tmp_path / "har")
    for standalone in ([], ["--standalone"]):
        placed.clear()
        handed.clear()
        train.main(["har", "--data-dir", str(data), "--run-dir", str(tmp_path / f"run{len(standalone)}"), "--json", *standalone],
                   prog_name="picluster train", standalone_mode=False)
        assert len(placed) == 1 and handed[0] is placed[0]
