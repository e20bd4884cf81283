"""The evaluation protocol: validation chooses, the test set is scored once at the end for the
chosen model, and recipe claims rest on leave-volunteers-out folds of the training volunteers."""

import csv
import json
import subprocess
import sys

import numpy as np
import pytest

from picluster.data.har.dataset import HarData, checksum
from picluster.data.har.spec import TEST_SUBJECTS, TRAIN_SUBJECTS, VALIDATION_SUBJECTS
from picluster.jobs.har import folds, metrics
from picluster.jobs.har.config import TrainConfig
from picluster.util.errors import UsageError

from conftest import ROOT, picluster
from train_fixtures import TINY_MODEL

STANDALONE = [*TINY_MODEL, "--standalone", "--threads", "1"]



def _rows(run_dir):
    with open(run_dir / "metrics.csv") as f:
        return list(csv.DictReader(f))


def _one_line_usage_error(result):
    assert result.returncode == 2, result.stderr
    assert result.stderr.count("\n") == 1, result.stderr
    assert "Traceback" not in result.stderr


# ---------------------------------------------------------------- folds of training volunteers

@pytest.mark.parametrize("k", [2, 3, 5, 7, 21])
def test_folds_are_disjoint_and_cover_the_training_volunteers_only(k):
    made = folds.folds(TRAIN_SUBJECTS, k)
    assert len(made) == k and all(made)
    every = [v for fold in made for v in fold]
    assert len(every) == len(set(every))  # disjoint
    assert sorted(every) == sorted(TRAIN_SUBJECTS)  # covers them, and nothing else
    assert not set(every) & set(TEST_SUBJECTS)
    assert max(map(len, made)) - min(map(len, made)) <= 1


def test_with_five_folds_the_usual_validation_split_is_one_of_them():
    assert tuple(VALIDATION_SUBJECTS) in folds.folds(TRAIN_SUBJECTS, 5)


@pytest.mark.parametrize("k", [0, 1, 22])
def test_a_fold_count_that_cannot_split_the_volunteers_is_refused(k):
    with pytest.raises(UsageError, match=f"--folds {k}: must be from 2 to the 21 training volunteers"):
        folds.folds(TRAIN_SUBJECTS, k)


@pytest.mark.parametrize("text, words", [
    ("2", "volunteer 2 is a test volunteer"),
    ("5,24", "volunteer 24 is a test volunteer"),
    ("31", "volunteer 31 is not one of UCI HAR's training volunteers"),
    (",", "names no volunteer"),
    ("5,x", "'x' is not a volunteer number"),
    ("5,5", "names a volunteer twice"),
])
def test_validation_volunteers_must_be_training_volunteers(text, words):
    with pytest.raises(ValueError, match=words):
        folds.parse(text)


def _three_volunteers() -> HarData:
    rng = np.random.default_rng(0)
    arrays = {}
    for split, who in (("train", [1, 1, 3, 3, 3]), ("val", [5, 5]), ("test", [2, 4])):
        arrays[f"x_{split}"] = rng.normal(size=(len(who), 128, 9)).astype(np.float32)
        arrays[f"y_{split}"] = np.arange(len(who), dtype=np.int64) % 6
        arrays[f"subject_{split}"] = np.asarray(who, np.int64)
    return HarData(**arrays, source="tests", checksum=checksum(arrays))


def test_other_validation_volunteers_move_windows_between_train_and_validation_only():
    data = _three_volunteers()
    moved = folds.revalidate(data, (3,))
    assert moved.subject_val.tolist() == [3, 3, 3]
    assert sorted(moved.subject_train.tolist()) == [1, 1, 5, 5]
    assert np.array_equal(moved.x_test, data.x_test) and moved.subject_test.tolist() == [2, 4]
    # Every training window is somewhere, once.
    before = np.sort(np.concatenate([data.x_train, data.x_val])[:, 0, 0])
    assert np.array_equal(np.sort(np.concatenate([moved.x_train, moved.x_val])[:, 0, 0]), before)
    assert folds.training_volunteers(data) == (1, 3, 5)


@pytest.mark.parametrize("volunteers, words", [((7,), "volunteer 7 has no windows"), ((1, 3, 5), "names every training volunteer")])
def test_validation_volunteers_the_data_cannot_serve_are_refused(volunteers, words):
    with pytest.raises(UsageError, match=words):
        folds.revalidate(_three_volunteers(), volunteers)


@pytest.mark.parametrize("args, words", [
    (["--val-volunteers", "2"], "--val-volunteers '2': volunteer 2 is a test volunteer"),
    (["--val-volunteers", ","], "names no volunteer"),
    (["--val-volunteers", "3"], "volunteer 3 has no windows"),  # tiny data: volunteers 1 and 5 only
    (["--val-volunteers", "1,5"], "names every training volunteer"),
])
def test_bad_validation_volunteers_fail_in_one_line_before_anything_starts(state, tiny, args, words):
    result = picluster("train", "har", "--data-dir", tiny, "--run-dir", tiny.parent / "run", *STANDALONE, *args)
    _one_line_usage_error(result)
    assert words in result.stderr
    assert not (tiny.parent / "run").exists()


@pytest.mark.parametrize("args, words", [
    (["--folds", "1"], "--folds 1: must be from 2 to the 2 training volunteers"),
    (["--folds", "3"], "--folds 3: must be from 2 to the 2 training volunteers"),
    (["--configs", "nothing"], "--configs: no configuration 'nothing'"),
    (["--seeds", "1,x"], "--seeds '1,x'"),
])
def test_the_study_refuses_bad_folds_in_one_line(tiny, tmp_path, args, words):
    out = tmp_path / "study.jsonl"
    result = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "har_study.py"), "--cv", "--data-dir", str(tiny),
                             "--out", str(out), *args], capture_output=True, text=True, timeout=120)
    _one_line_usage_error(result)
    assert words in result.stderr
    assert not out.exists()  # no run started


# ---------------------------------------------------------------- records of earlier runs

def test_a_config_json_of_an_earlier_version_keeps_its_per_epoch_test_scores(tmp_path):
    written = json.loads(TrainConfig().to_json())
    for name in ("eval_test_every_epoch", "val_volunteers"):
        del written[name]
    (tmp_path / "config.json").write_text(json.dumps(written))
    loaded = TrainConfig.load(tmp_path / "config.json")
    assert loaded.eval_test_every_epoch is True and loaded.val_volunteers == ""
    assert TrainConfig().eval_test_every_epoch is False


def test_rows_appended_to_an_earlier_metrics_csv_keep_its_test_columns(tmp_path):
    path = tmp_path / "metrics.csv"
    old = {"epoch": 1, "global_step": 12, "val_acc": 0.5, "test_acc": 0.4, "time": 1.0}
    metrics.append_row(path, old, metrics.columns(True))
    metrics.append_row(path, {"epoch": 2, "global_step": 24, "val_acc": 0.6, "time": 2.0}, metrics.columns(False))
    rows = metrics.read_rows(path)
    assert [r["test_acc"] for r in rows] == ["0.4", ""]
    metrics.write_rows(path, rows[:1], metrics.columns(False))  # a resume drops a row: the header stays
    assert path.read_text().splitlines()[0].split(",") == list(metrics.COLUMNS)


def test_a_new_metrics_csv_has_no_test_column_unless_asked():
    assert not {"test_loss", "test_acc", "test_f1"} & set(metrics.columns(False))
    assert {"test_loss", "test_acc", "test_f1"} <= set(metrics.columns(True))


# ---------------------------------------------------------------- real runs

def _best_by_validation(rows) -> int:
    """The epoch the chief keeps: highest validation accuracy, then lowest validation loss, first."""
    best = min(rows, key=lambda r: (-float(r["val_acc"]), float(r["val_loss"]), int(r["epoch"])))
    return int(best["epoch"])


def _scorings(run_dir) -> list[str]:
    return [line for line in (run_dir / "worker-0.log").read_text().splitlines() if "chief: test: scored" in line]


@pytest.mark.e2e
def test_test_is_scored_once_at_the_end_for_the_epoch_chosen_on_validation(state, tiny, tmp_path):
    run_dir = tmp_path / "run"
    result = picluster("train", "har", "--data-dir", tiny, "--run-dir", run_dir, *STANDALONE, "--epochs", "4", "--json")
    assert result.returncode == 0, result.stderr
    rows = _rows(run_dir)
    assert len(rows) == 4 and not [c for c in rows[0] if c.startswith("test_")]  # no per-epoch test column
    out = json.loads(result.stdout)
    best = _best_by_validation(rows)
    assert out["best_epoch"] == best
    assert out["test_scored"] == {"epoch": best, "global_step": int(rows[best - 1]["global_step"]),
                                  "checkpoint": f"best/model-{rows[best - 1]['global_step']}", "times": 1}
    assert _scorings(run_dir) == [f"chief: test: scored once, checkpoint of epoch {best} (best/model-{rows[best - 1]['global_step']})"]
    assert out["test_accuracy"] > 0.5 and sum(map(sum, out["confusion"])) == 60
    assert set(out["test_accuracy_by_volunteer"]) == {"2", "4"} and out["val_volunteers"] == [5]
    assert json.loads((run_dir / "config.json").read_text())["eval_test_every_epoch"] is False


@pytest.mark.e2e
def test_eval_test_every_epoch_adds_the_columns_and_the_end_scores_the_chosen_epoch(state, tiny, tmp_path):
    # A rate high enough that validation wobbles: the chosen epoch (4 for this seed, of 1.0 at the
    # lowest loss) is not the last one (0.93).
    run_dir = tmp_path / "run"
    result = picluster("train", "har", "--data-dir", tiny, "--run-dir", run_dir, *STANDALONE, "--lr", "0.1", "--seed", "1",
                       "--epochs", "6", "--eval-test-every-epoch", "--json")
    assert result.returncode == 0, result.stderr
    rows = _rows(run_dir)
    assert all(r["test_acc"] != "" and r["test_loss"] != "" for r in rows)
    out = json.loads(result.stdout)
    best = _best_by_validation(rows)
    assert best < len(rows)  # otherwise the last weights would pass for the chosen ones
    assert out["best_epoch"] == out["test_scored"]["epoch"] == best
    # The end's one scoring is of best/'s weights: the chosen epoch's own per-epoch test scores.
    assert out["test_loss"] == pytest.approx(float(rows[best - 1]["test_loss"]), rel=1e-5)
    assert out["test_accuracy"] == pytest.approx(float(rows[best - 1]["test_acc"]), abs=1e-6)
    assert out["config"]["eval_test_every_epoch"] is True
    assert len(_scorings(run_dir)) == 1


@pytest.mark.e2e
def test_other_validation_volunteers_validate_the_run(state, tmp_path):
    data = _three_volunteers()
    many = {k: np.concatenate([getattr(data, k)] * 48) for k in ("x_train", "y_train", "subject_train")}
    arrays = {k: getattr(data, k) for k in HarData.__dataclass_fields__ if k not in ("source", "checksum")} | many
    from picluster.data.har.dataset import CACHE_NAME, save

    save(HarData(**arrays, source="tests", checksum=checksum(arrays)), tmp_path / "har" / CACHE_NAME)
    result = picluster("train", "har", "--data-dir", tmp_path / "har", "--run-dir", tmp_path / "run", *STANDALONE,
                       "--epochs", "1", "--val-volunteers", "3", "--json")
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["val_volunteers"] == [3]


@pytest.mark.e2e
def test_a_run_of_an_earlier_version_resumes_with_its_test_columns(state, tiny, tmp_path):
    run_dir = tmp_path / "run"
    first = picluster("train", "har", "--data-dir", tiny, "--run-dir", run_dir, *STANDALONE, "--epochs", "2",
                      "--eval-test-every-epoch", "--json")
    assert first.returncode == 0, first.stderr
    config = json.loads((run_dir / "config.json").read_text())
    for name in ("eval_test_every_epoch", "val_volunteers"):  # as an earlier version wrote it
        del config[name]
    (run_dir / "config.json").write_text(json.dumps(config))
    result = picluster("train", "har", "--resume", run_dir, "--epochs", "3", "--json")
    assert result.returncode == 0, result.stderr
    rows = _rows(run_dir)
    assert len(rows) == 3 and all(r["test_acc"] != "" for r in rows)
    out = json.loads(result.stdout)
    # Extended after it had finished: the test set was scored at each end, and the count says so.
    assert out["test_scored"]["times"] == 2 and out["test_scored"]["epoch"] == out["best_epoch"]
    assert len(_scorings(run_dir)) == 2 and "scored 2 times in this run" in _scorings(run_dir)[-1]


@pytest.mark.e2e
def test_a_run_stopped_at_its_target_scores_the_test_set_once_for_the_chosen_epoch(state, tiny, tmp_path):
    run_dir = tmp_path / "run"
    result = picluster("train", "har", "--data-dir", tiny, "--run-dir", run_dir, *STANDALONE, "--epochs", "30",
                       "--target-val-accuracy", "0.6", "--json")
    assert result.returncode == 0, result.stderr
    out = json.loads(result.stdout)
    rows = _rows(run_dir)
    assert out["stopped_at_target"] and len(rows) < 30
    assert out["test_scored"]["times"] == 1 and out["test_scored"]["epoch"] == out["best_epoch"] == _best_by_validation(rows)
    assert len(_scorings(run_dir)) == 1 and out["test_accuracy"] is not None
