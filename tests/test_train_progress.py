"""The training job's live panel, rendered to a fixed-width console from recorded chief files."""

import pytest

from picluster.jobs.controller import Running
from picluster.jobs.har.config import TrainConfig
from picluster.jobs.har.progress import Follower
from picluster.views.live import JobDisplay

from render import console, render, text


def _render(display) -> str:
    return " ".join(render(display._render(), width=100).split())  # the detail may wrap below the bar


def test_panel_shows_where_the_chief_is_and_the_validation_accuracy():
    display = JobDisplay("train har", "epochs", live=True,
                         console=console(100, terminal=True))
    follow = Follower(TrainConfig(epochs=10), Running(None, display), quiet=True)
    follow.epoch({"epoch": "1", "val_acc": "0.8"})
    follow.epoch({"epoch": "2", "val_acc": "0.75"})
    follow.live({"epoch": 3, "epochs": 10, "step": 5, "steps": 10, "global_step": 25, "train_acc": 0.9, "time": 0})
    text = _render(display)
    assert "25.0 % (2/10 epochs)" in text  # 2.5 of 10 epochs; the count shows whole ones
    assert "epoch 3/10 step 5/10 train acc 90.0%" in text
    assert "val acc 75.0% (best 80.0%)" in text


def test_a_stale_live_file_does_not_move_progress_back():
    display = JobDisplay("train har", "epochs", live=True,
                         console=console(100, terminal=True))
    follow = Follower(TrainConfig(epochs=4), Running(None, display), quiet=True)
    follow.epoch({"epoch": "2", "val_acc": "0.5"})
    follow.live({"epoch": 2, "epochs": 4, "step": 1, "steps": 10, "global_step": 11, "train_acc": 0.4, "time": 0})
    assert display.progress.done == 2


def test_summary_shows_the_selected_model_the_confusion_matrix_and_each_volunteer():
    from picluster.jobs.har.progress import Printer

    out = console(120)
    printer = Printer(TrainConfig(epochs=3), "RUN", console=out)
    confusion = [[10 if i == j else 0 for j in range(6)] for i in range(6)]
    confusion[3][4], confusion[3][3] = 2, 8
    printer.summary({"best_epoch": 2, "val_accuracy": 0.9, "test_accuracy": 58 / 60, "test_f1": 0.966, "wall_s": 12,
                     "parameters": 30412, "confusion": confusion,
                     "test_accuracy_by_volunteer": {"2": 0.975, "4": 28 / 30}})
    printed = text(out)
    assert "selected on validation: epoch 2 (val 90.0%)  test accuracy 96.67%" in printed
    assert "test accuracy by volunteer: 2: 97.5%, 4: 93.3%" in printed
    sitting = next(line for line in printed.splitlines() if line.lstrip("│ ").startswith("SITTING"))
    assert sitting.replace("│", " ").split() == ["SITTING", "0", "0", "0", "8", "2", "0"]
    # Piped (80 columns, no terminal), every header and row stays whole.
    out = console(80)
    Printer(TrainConfig(epochs=3), "RUN", console=out).summary(
        {"best_epoch": 2, "val_accuracy": 0.9, "test_accuracy": 0.9, "test_f1": 0.9, "wall_s": 12, "parameters": 1,
         "confusion": [[1000 if i == j else 0 for j in range(6)] for i in range(6)]})
    header = next(line for line in text(out).splitlines() if "┃" in line)
    assert header.replace("┃", " ").split() == ["WALK", "UP", "DOWN", "SIT", "STAND", "LAY"], text(out)
    rows = [line.replace("│", " ").split() for line in text(out).splitlines() if "│" in line]
    assert rows[2] == ["WALKING_DOWNSTAIRS", "0", "0", "1000", "0", "0", "0"], text(out)


def test_a_slow_agent_does_not_stall_the_redraw():
    import threading
    import time

    class SlowMonitor:
        def __init__(self):
            self.release = threading.Event()
            self.polls = 0

        def poll(self):
            self.polls += 1
            self.release.wait(10)  # an agent that takes its time to answer
            return []

    monitor = SlowMonitor()
    display = JobDisplay("run montecarlo", "samples", monitor=monitor, live=True,
                         console=console(100, terminal=True))
    with display:
        deadline = time.monotonic() + 5
        while monitor.polls == 0 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert monitor.polls == 1
        display.update(3, 10, "")
        started = time.perf_counter()
        text = _render(display)
        assert time.perf_counter() - started < 0.5  # drawn while the scrape is still waiting
        assert "30.0 %" in text
        monitor.release.set()


@pytest.mark.parametrize("options, warned", [({"mode": "async"}, True), ({"mode": "sync"}, False),
                                             ({"mode": "async", "standalone": True}, False)])
def test_the_run_line_names_the_model_and_async_says_it_is_not_reproducible(options, warned):
    from picluster.jobs.har.progress import Printer

    out = console(200)
    Printer(TrainConfig(epochs=3, **options), "RUN", console=out)
    printed = text(out)
    assert "run RUN: convlstm: 3 convolutions x 64, 1 bidir LSTM 64, augment rotate:45,scale:0.1,shift:8" in printed
    assert ("async mode is not reproducible" in printed) == warned
    out = console(200)
    Printer(TrainConfig.for_model(model="resbidir"), "RUN", console=out)
    assert "run RUN: resbidir: 3x2 bidir LSTM, hidden 32, no augmentation, sync, 1 ps + 2 workers, 40 epochs" in text(out)
    out = console(200)
    Printer(TrainConfig.for_model(model="resbidir", epochs=1), "RUN", console=out)
    assert ", 1 ps + 2 workers, 1 epoch, " in text(out)


def test_epoch_lines_show_test_scores_only_when_the_run_records_them():
    out = console(200, terminal=True)
    follow = Follower(TrainConfig(epochs=3), Running(None, JobDisplay("train har", "epochs", console=out)))
    row = {"epoch": "1", "train_loss": "1.2", "train_acc": "0.5", "val_loss": "1.1", "val_acc": "0.6", "val_f1": "0.55",
           "epoch_s": "3", "input_s": "0.1", "compute_s": "2", "exchange_s": "0.9", "staleness_mean": "", "staleness_max": ""}
    follow.epoch(row)  # the default: validation only
    follow.epoch(row | {"epoch": "2", "test_loss": "1.0", "test_acc": "0.7", "test_f1": "0.65"})  # --eval-test-every-epoch
    first, second = [line for line in text(out).splitlines() if line.startswith("epoch")]
    assert "val 1.100 60.0% F1 0.550  3.0s" in first and "test" not in first and "nan" not in first
    assert "val 1.100 60.0% F1 0.550  test 1.000 70.0% F1 0.650  3.0s" in second
