"""`train har --resume` on a run that was tampered with or damaged: a config.json of the wrong shape,
a damaged latest checkpoint, no intact checkpoint, a disk that filled up under the run directory.

The records (metrics.csv) are never silently overwritten: a run resumes from its newest intact
checkpoint, saying which, or is refused.
"""

import json
import subprocess
import time

import psutil
import pytest

from picluster.jobs.har.config import TrainConfig
from picluster.jobs.har.resume import resume_config
from picluster.jobs.har.rundir import RunDir
from picluster.util.errors import UsageError

from conftest import ROOT, command_line, one_line, picluster
from train_fixtures import TINY_MODEL


def _run_with(tmp_path, tiny, config: object, rows: int = 0):
    """A run directory as a run leaves it, with this config.json and ``rows`` epochs of records."""
    from picluster.jobs.har import metrics

    run = tmp_path / "run"
    run.mkdir()
    (run / "config.json").write_text(config if isinstance(config, str) else json.dumps(config))
    if rows:
        metrics.write_rows(run / "metrics.csv", [{"epoch": e, "global_step": 12 * e, "time": 1.0 + e} for e in range(1, rows + 1)])
    return run


def _good(tiny) -> dict:
    return json.loads(TrainConfig.for_model(model="resbidir", standalone=True, data_dir=str(tiny)).to_json())


@pytest.mark.parametrize("change,needle", [
    (lambda c: [c], "must be a JSON object of training options, found a list"),
    (lambda c: "[" * 30_000 + "]" * 30_000, "nested too deeply"),
    (lambda c: c | {"layers": "3"}, "field 'layers' '3' must be a whole number"),
    (lambda c: c | {"layers": 3.0}, "field 'layers' 3.0 must be a whole number"),
    (lambda c: c | {"layers": True}, "field 'layers' True must be a whole number"),
    (lambda c: c | {"layers": 1000}, "field 'layers' 1000 must be a whole number from 1 to 16"),
    (lambda c: c | {"bidir": 1}, "field 'bidir' must be true or false"),
    (lambda c: c | {"learning_rate": [0.1]}, "field 'learning_rate' [0.1] must be a number"),
    (lambda c: c | {"l2": {"a": {"b": {}}}}, "field 'l2'"),
    (lambda c: c | {"mode": "semi"}, "field 'mode' 'semi' must be one of sync, async"),
    (lambda c: c | {"model_name": "gpt"}, "unknown field 'model_name'"),
    (lambda c: c | {"model": "gpt"}, "field 'model' 'gpt' must be one of convlstm, resbidir"),
    (lambda c: c | {"conv_filters": 32}, "--conv-filters applies to --model convlstm only, not resbidir"),
    (lambda c: c | {"model": "convlstm", "hidden": 64}, "--hidden applies to --model resbidir only, not convlstm"),
    (lambda c: c | {"augment": "spin:3"}, "field 'augment' 'spin:3': unknown part 'spin'"),
    (lambda c: {k: v for k, v in c.items() if k != "epochs"}, "field 'epochs' is missing"),
    (lambda c: json.dumps(c).replace('"l2": 0.005', '"l2": NaN'), "field 'l2' nan must be a finite number"),
    (lambda c: json.dumps(c).replace('"epochs": 40', '"epochs": -Infinity'), "field 'epochs' -inf must be a whole number"),
    (lambda c: json.dumps(c).replace('"l2": 0.005', '"l2": 1e999'), "field 'l2' inf must be a finite number"),
    (lambda c: json.dumps(c) + " " * 70_000, "larger than 64 KiB"),
    (lambda c: b"\xff\xfe".decode("latin-1"), "not valid JSON"),
])
def test_a_config_json_of_the_wrong_shape_is_refused_naming_the_field(tmp_path, tiny, change, needle):
    run = _run_with(tmp_path, tiny, change(_good(tiny)))
    with pytest.raises(UsageError) as err:
        resume_config(RunDir(run))
    assert str(err.value).startswith(f"{run / 'config.json'}: ") and needle in str(err.value)
    assert "\n" not in str(err.value)


@pytest.mark.parametrize("change,needle", [
    (lambda c: [c], "found a list"),
    (lambda c: "[" * 30_000 + "]" * 30_000, "nested too deeply"),
    (lambda c: c | {"hidden": "32"}, "field 'hidden' '32' must be a whole number"),
])
def test_the_command_refuses_it_in_one_line_before_anything_starts(state, tmp_path, tiny, change, needle):
    run = _run_with(tmp_path, tiny, change(_good(tiny)))
    before = (run / "config.json").read_bytes()
    one_line(picluster("train", "har", "--resume", run, timeout=60), 2, str(run / "config.json"), needle)
    assert (run / "config.json").read_bytes() == before and not (run / "worker-0.log").exists()


@pytest.mark.parametrize("args,needle", [
    (["--model", "convlstm"], "trained --model resbidir; it cannot continue as --model convlstm"),
    (["--model", "resbidir", "--layers", "2"], "only --epochs, --max-restarts and --worker-deadline may change (got --layers)"),
])
def test_resume_refuses_another_model_in_one_line(state, tmp_path, tiny, args, needle):
    run = _run_with(tmp_path, tiny, _good(tiny))
    before = (run / "config.json").read_bytes()
    one_line(picluster("train", "har", "--resume", run, *args, timeout=60), 2, needle)
    assert (run / "config.json").read_bytes() == before and not (run / "worker-0.log").exists()


def test_the_rules_for_losses_are_kept_with_the_run_and_may_change_on_resume(state, tmp_path, tiny):
    kept = TrainConfig.load(_run_with(tmp_path, tiny, _good(tiny) | {"max_restarts": 1, "worker_deadline": 6}) / "config.json")
    assert (kept.max_restarts, kept.worker_deadline) == (1, 6.0)
    earlier = {k: v for k, v in _good(tiny).items() if k not in ("max_restarts", "worker_deadline")}  # an earlier version's
    (tmp_path / "old").mkdir()
    old = TrainConfig.load(_run_with(tmp_path / "old", tiny, earlier) / "config.json")
    assert (old.max_restarts, old.worker_deadline) == (3, 0.0)
    one_line(picluster("train", "har", "--max-restarts", "-1", "--run-dir", tmp_path / "r", timeout=60), 2,
             "--max-restarts -1 must be a whole number from 0 to 1,000")
    assert not (tmp_path / "r").exists()


def test_records_without_any_checkpoint_are_never_started_over(state, tmp_path, tiny):
    run = _run_with(tmp_path, tiny, _good(tiny), rows=3)
    before = (run / "metrics.csv").read_bytes()
    one_line(picluster("train", "har", "--resume", run, timeout=60), 2, "no checkpoint to continue them from")
    assert (run / "metrics.csv").read_bytes() == before and not (run / "worker-0.log").exists()


@pytest.mark.parametrize("name,text,needle", [
    ("layout.json", "[1, 2]", "layout.json is not a run's layout"),
    ("layout.json", '{"inventory": 7}', "layout.json is not a run's layout"),
    ("metrics.csv", "epoch,global_step\n1,abc\n", "line 2 is not a complete row"),
])
def test_other_records_of_the_wrong_shape_are_refused_in_one_line(state, tmp_path, tiny, name, text, needle):
    run = _run_with(tmp_path, tiny, _good(tiny))
    (run / name).write_text(text)
    one_line(picluster("train", "har", "--resume", run, timeout=60), 2, needle)


@pytest.mark.parametrize("text,needle", [
    ("[]", "not a run's state"), ('{"best": []}', "field 'best'"), ('{"best": {"epoch": "3"}}', "not a run's state"),
    ('{"started": "yesterday"}', "field 'started'"), ("{", "cannot read the run's state"),
])
def test_a_damaged_state_json_is_refused_by_the_chief(tmp_path, text, needle):
    from picluster.jobs.har.chief import _load_state

    (tmp_path / "state.json").write_text(text)
    with pytest.raises(UsageError, match=needle):
        _load_state(tmp_path / "state.json")
    assert _load_state(tmp_path / "missing.json") == {}


# -- real runs ----------------------------------------------------------------------------------

def _train(run, tiny, *extra, epochs: int, timeout: float = 300):
    return picluster("train", "har", "--standalone", "--data-dir", tiny, "--run-dir", run, *TINY_MODEL,
                     "--epochs", epochs, "--json", *extra, timeout=timeout)


def _rows(run) -> list[tuple[str, str]]:
    from picluster.jobs.har import metrics

    return [(r["epoch"], r["time"]) for r in metrics.read_rows(run / "metrics.csv")]


def _steps(run) -> list[int]:
    return sorted(int(p.name.split("-")[-1].split(".")[0]) for p in (run / "checkpoints").glob("model.ckpt-*.index"))


@pytest.mark.e2e
def test_a_damaged_latest_checkpoint_is_named_and_the_older_one_restored(state, tmp_path, tiny):
    run = tmp_path / "run"
    assert (result := _train(run, tiny, "--max-restarts", "1", "--worker-deadline", "6", epochs=3)).returncode == 0, result.stderr
    older, newest = _steps(run)[-2:]
    data = run / "checkpoints" / f"model.ckpt-{newest}.data-00000-of-00001"
    data.write_bytes(data.read_bytes()[: data.stat().st_size // 2])  # a copy cut short
    records = _rows(run)

    result = picluster("train", "har", "--resume", run, "--epochs", "5", "--json", timeout=300)
    assert result.returncode == 0, result.stderr
    said = [ln for ln in result.stderr.splitlines() if "damaged" in ln]
    assert len(said) == 1 and f"checkpoint model.ckpt-{newest} is damaged" in said[0], result.stderr
    assert f"resumed from checkpoints/model.ckpt-{older} (epoch 2" in said[0], said
    resume = json.loads(result.stdout)["resumes"][-1]
    assert resume["checkpoint"] == f"model.ckpt-{older}" and resume["damaged"][0][0] == f"model.ckpt-{newest}"
    rows = _rows(run)
    assert [e for e, _ in rows] == ["1", "2", "3", "4", "5"]
    assert rows[:2] == records[:2] and rows[2] != records[2]  # epochs 1-2 kept as written; 3 trained again
    assert (run / "checkpoints" / "damaged" / data.name).exists()
    # The rules for losses go on with the run: --resume keeps them unless given again.
    kept = json.loads((run / "config.json").read_text())
    assert (kept["max_restarts"], kept["worker_deadline"], kept["epochs"]) == (1, 6.0, 5)


@pytest.mark.e2e
def test_no_intact_checkpoint_refuses_and_keeps_the_records(state, tmp_path, tiny):
    run = tmp_path / "run"
    assert (result := _train(run, tiny, epochs=2)).returncode == 0, result.stderr
    for data in (run / "checkpoints").glob("*.data-*"):
        data.write_bytes(b"\0" * 8)
    before = (run / "metrics.csv").read_bytes()
    one_line(picluster("train", "har", "--resume", run, "--epochs", "4", timeout=300), 2, "no intact checkpoint",
             "model.ckpt-24: ", "1 more damaged", "start a new run")
    assert (run / "metrics.csv").read_bytes() == before


@pytest.mark.lab  # small_disk: root
def test_a_disk_that_fills_during_training_stops_it_in_one_line_and_resume_continues(state, tmp_path, tiny, small_disk):
    run = small_disk.path / "run"
    proc = subprocess.Popen([*command_line(), "train", "har", "--standalone", "--data-dir", str(tiny),
                             "--run-dir", str(run), *TINY_MODEL, "--epochs", "30", "--no-live"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT)
    try:
        deadline = time.monotonic() + 240
        while len(_rows(run)) < 2 if (run / "metrics.csv").exists() else True:
            assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
            time.sleep(0.1)
        small_disk.fill()
        out, err = proc.communicate(timeout=120)
    finally:
        proc.kill()
    line = one_line(subprocess.CompletedProcess(proc.args, proc.returncode, out, err), 1, "No space left on device",
                    str(run))
    assert "free it, then continue with 'picluster train har --resume" in line, line
    assert not [p for p in psutil.process_iter(["cmdline"]) if str(run) in " ".join(p.info["cmdline"] or [])]
    kept = _rows(run)  # complete rows only: read_rows refuses a damaged one
    assert len(kept) >= 2

    small_disk.free()
    result = picluster("train", "har", "--resume", run, "--epochs", str(len(kept) + 2), "--json", timeout=300)
    assert result.returncode == 0, result.stderr
    rows = _rows(run)
    assert [int(e) for e, _ in rows] == list(range(1, len(kept) + 3))
    assert rows[:len(kept) - 1] == kept[:len(kept) - 1]  # at most the last epoch is trained again


def _save_checkpoints(directory, steps) -> None:
    """A one-variable model's checkpoints at ``steps``, as the chief's Saver keeps them (the last two)."""
    import tensorflow as tf

    with tf.Graph().as_default():
        v = tf.compat.v1.Variable(1.0, name="v")
        saver = tf.compat.v1.train.Saver(max_to_keep=2)
        with tf.compat.v1.Session() as session:
            session.run(v.initializer)
            for step in steps:
                saver.save(session, str(directory / "model.ckpt"), global_step=step, write_meta_graph=False)


def test_checkpoints_without_their_state_file_restore_the_newest(tmp_path):
    """A copy of the checkpoints whose state file did not come (TensorFlow restores only what a
    state file names): the newest intact one is named in a new state file, not a fresh start."""
    import tensorflow as tf

    from picluster.jobs.har import checkpoints

    _save_checkpoints(tmp_path, (3, 7))
    (tmp_path / "checkpoint").unlink()
    restore = checkpoints.prepare(tmp_path, has_records=True)
    assert restore.checkpoint == "model.ckpt-7" and not restore.damaged
    assert tf.train.latest_checkpoint(str(tmp_path)).endswith("model.ckpt-7")


def test_a_checkpoint_ahead_of_the_rows_is_passed_over_for_the_one_they_end_with(tmp_path):
    """The chief's node lost after its checkpoint of epoch 7 reached the coordinator and before
    that epoch's row did: the next launch restores epoch 6's, so epoch 7 is trained again and gets
    its row, where restoring 7's would leave the rows 1-6, 8, ..."""
    import tensorflow as tf

    from picluster.jobs.har import checkpoints

    _save_checkpoints(tmp_path, (36, 42))
    for step, epoch in ((36, 6), (42, 7)):
        checkpoints.record_epoch(tmp_path, f"model.ckpt-{step}", epoch)
    # With the row of epoch 7 there, the newest, as always.
    assert checkpoints.prepare(tmp_path, has_records=True, last_row=7).checkpoint == "model.ckpt-42"
    restore = checkpoints.prepare(tmp_path, has_records=True, last_row=6)
    assert restore.checkpoint == "model.ckpt-36" and tf.train.latest_checkpoint(str(tmp_path)).endswith("model.ckpt-36")


def test_a_checkpoint_named_newest_by_picluster_is_the_one_tensorflow_reads_and_the_oldest_go(tmp_path):
    """The chief names a checkpoint the newest only once the evaluator was told of it (chief.save):
    the state file it writes is read by TensorFlow as its own, in any folder name, and the
    checkpoints before the two newest are removed."""
    import tensorflow as tf

    from picluster.jobs.har import checkpoints

    folder = tmp_path / 'a "run" – Zürich'
    folder.mkdir()
    with tf.Graph().as_default():
        v = tf.compat.v1.Variable(1.0, name="v")
        saver = tf.compat.v1.train.Saver(max_to_keep=checkpoints.KEPT)
        with tf.compat.v1.Session() as session:
            session.run(v.initializer)
            for step in (10, 20, 30):
                prefix = saver.save(session, str(folder / "model.ckpt"), global_step=step, write_meta_graph=False, write_state=False)
                checkpoints.name_newest(saver, prefix)
    state = tf.train.get_checkpoint_state(str(folder))
    assert state.model_checkpoint_path == str(folder / "model.ckpt-30")
    assert list(state.all_model_checkpoint_paths) == [str(folder / "model.ckpt-20"), str(folder / "model.ckpt-30")]
    assert sorted(p.name for p in folder.glob("*.index")) == ["model.ckpt-20.index", "model.ckpt-30.index"]
    assert tf.train.load_checkpoint(tf.train.latest_checkpoint(str(folder))).get_tensor("v") == 1.0
