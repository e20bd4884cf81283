"""The coordinator's mirror of the chief's files on a node: which files it copies again, and the
job folder's file primitives it copies them with (on a local folder standing in for the node's)."""

import json
import os
import shutil
import stat
from pathlib import Path, PurePosixPath
from types import SimpleNamespace

import paramiko
import pytest

from picluster.cluster.jobfolder import COPY_ERRORS, JobFolder
from picluster.jobs.har.mirror import ALWAYS_COPY_BYTES, Mirror, listed_checkpoints, stale
from picluster.jobs.har.rundir import RunDir


def test_a_state_file_rewritten_in_the_same_second_is_copied_again():
    """SFTP gives whole seconds: "model.ckpt-26" and "model.ckpt-39" have the same size and time."""
    state_file = (len('model_checkpoint_path: "model.ckpt-26"\n'), 1000)
    assert stale(state_file, state_file)


def test_a_large_file_unchanged_in_size_and_time_is_not_copied_again():
    here = (100_000, 1000)
    assert not stale(here, (100_000, 1000))
    assert stale(here, (100_000, 1001))
    assert stale(here, (99_000, 1000))
    assert stale(None, (100_000, 1000))  # not here yet


def test_the_small_file_limit_is_inclusive():
    assert stale((ALWAYS_COPY_BYTES, 5), (ALWAYS_COPY_BYTES, 5))
    assert not stale((ALWAYS_COPY_BYTES + 1, 5), (ALWAYS_COPY_BYTES + 1, 5))


# -- the job folder's files, over a stand-in for paramiko's SFTPClient --------------------------------


class _Channel:
    def settimeout(self, seconds: float) -> None:
        self.timeout = seconds


class LocalSFTP:
    """The SFTPClient calls a JobFolder makes, on a local folder standing in for the node user's
    home; what it raises is what paramiko raises (OSError, FileNotFoundError for a missing name)."""

    def __init__(self, home: Path) -> None:
        self.home = home
        self.calls: list[str] = []

    def _at(self, path: str) -> Path:
        return self.home / path

    def get_channel(self):
        """paramiko's channel under the session: a JobFolder sets its read timeout on it."""
        return _Channel()

    def stat(self, path: str):
        return paramiko.SFTPAttributes.from_stat(os.stat(self._at(path)))

    def put(self, local: str, remote: str) -> None:
        self.calls.append(f"put {remote}")
        shutil.copyfile(local, self._at(remote))

    def posix_rename(self, old: str, new: str) -> None:
        self.calls.append(f"rename {old} {new}")
        os.rename(self._at(old), self._at(new))

    def mkdir(self, path: str, mode: int) -> None:
        os.mkdir(self._at(path), mode)

    def open(self, path: str, mode: str):
        return open(self._at(path), mode)

    def listdir_attr(self, path: str):
        return [paramiko.SFTPAttributes.from_stat(os.stat(p), p.name) for p in sorted(self._at(path).iterdir())]

    def remove(self, path: str) -> None:
        os.remove(self._at(path))


@pytest.fixture
def node(tmp_path):
    """(the folder, the stand-in SFTP, the folder's path here, how many times an SFTP session was opened)."""
    home = tmp_path / "home"
    (home / "runs" / "r").mkdir(parents=True)
    sftp, opened = LocalSFTP(home), []
    conn = SimpleNamespace(sftp=lambda: opened.append(1) or sftp)
    folder = JobFolder("node01", SimpleNamespace(conn=conn), PurePosixPath("runs/r"), "$HOME/servers")  # type: ignore[arg-type]
    return folder, sftp, home / "runs" / "r", opened


def test_a_folder_opens_its_sftp_session_once_on_first_use(node):
    folder, _, _, opened = node
    assert folder.word == '"$HOME"/runs/r' and opened == []  # nothing opened for what is not a file
    folder.exists("a")
    folder.read("a")
    folder.listdir(".")
    assert opened == [1]


def test_a_put_is_written_beside_and_renamed_over(node, tmp_path):
    folder, sftp, there, _ = node
    local = tmp_path / "config.json"
    local.write_text("{}")
    folder.mkdir("sub")
    folder.put(local, "sub/config.json")
    assert sftp.calls == ["put runs/r/sub/config.json.new", "rename runs/r/sub/config.json.new runs/r/sub/config.json"]
    assert os.listdir(there / "sub") == ["config.json"] and (there / "sub/config.json").read_text() == "{}"
    assert stat.S_IMODE((there / "sub").stat().st_mode) == 0o700 & ~_umask()
    with pytest.raises(OSError):
        folder.mkdir("sub")  # it exists: the mirror's put_tree goes on


def test_missing_names_read_as_none_and_a_failed_copy_is_one_of_the_copy_errors(node, tmp_path):
    folder, _, there, _ = node
    assert folder.read("progress.json") is None and folder.listdir("checkpoints") is None and not folder.exists("x")
    (there / "x").write_bytes(b"abc")
    assert folder.read("x") == b"abc" and folder.exists("x")
    folder.remove("x")
    assert not folder.exists("x")
    with pytest.raises(COPY_ERRORS):
        folder.put(tmp_path / "nowhere", "y")
    (there / "d").mkdir()
    with pytest.raises(COPY_ERRORS):
        folder.read("d")  # not ENOENT: the caller hears of it


def test_a_listing_gives_names_kinds_sizes_and_whole_second_times(node):
    folder, _, there, _ = node
    (there / "ckpt").mkdir()
    (there / "ckpt" / "model.data").write_bytes(b"x" * 10)
    os.utime(there / "ckpt" / "model.data", (1000.7, 2000.9))
    (there / "ckpt" / "sub").mkdir()
    entries = {e.name: e for e in folder.listdir("ckpt") or []}
    data = entries["model.data"]
    assert (data.is_dir, data.size, data.mtime, data.atime) == (False, 10, 2000, 1000)
    assert entries["sub"].is_dir


# -- the mirror's policy, through such a folder -----------------------------------------------------


def test_a_resumed_chief_on_a_node_without_a_copy_gets_the_records_and_trees(node, tmp_path):
    folder, _, there, _ = node
    run = tmp_path / "run"
    (run / RunDir.CHECKPOINTS / "sub").mkdir(parents=True)
    for name, text in ((RunDir.CONFIG, "{}"), (RunDir.METRICS, "epoch\n"), (RunDir.STATE, "{}"),
                       (f"{RunDir.CHECKPOINTS}/checkpoint", "c"), (f"{RunDir.CHECKPOINTS}/sub/a", "a")):
        (run / name).write_text(text)
    Mirror(folder, run).push_for_start(chief=True, resume=True)
    assert sorted(str(p.relative_to(there)) for p in there.rglob("*")) == [
        "checkpoints", "checkpoints/checkpoint", "checkpoints/sub", "checkpoints/sub/a", "config.json", "metrics.csv", "state.json"]
    (run / RunDir.METRICS).write_text("epoch\n1\n")
    Mirror(folder, run).push_for_start(chief=True, resume=True)  # the node has a checkpoint: its records are newer
    assert (there / RunDir.METRICS).read_text() == "epoch\n"


def test_the_chiefs_files_come_back_large_ones_only_when_they_moved(node, tmp_path):
    folder, _, there, _ = node
    run = tmp_path / "run"
    run.mkdir()
    (there / RunDir.BEST).mkdir()
    big = there / RunDir.BEST / "model.data"
    big.write_bytes(b"1" * (ALWAYS_COPY_BYTES + 1))
    os.utime(big, (1000, 2000))
    (there / RunDir.PROGRESS).write_text('{"epoch": 1}')
    (there / RunDir.METRICS).write_text("epoch\n1\n")
    mirror = Mirror(folder, run)
    mirror.follow()
    assert (run / RunDir.METRICS).read_text() == "epoch\n1\n" and (run / RunDir.BEST / "model.data").stat().st_mtime == 2000
    big.write_bytes(b"2" * (ALWAYS_COPY_BYTES + 1))
    os.utime(big, (1000, 2000))  # same size, same second: taken as unchanged
    mirror.follow(final=True)
    assert (run / RunDir.BEST / "model.data").read_bytes()[:1] == b"1" and mirror.complete


def test_beside_the_evaluator_takes_what_the_chief_hands_over_and_the_node_keeps_none(node, tmp_path):
    folder, _, there, _ = node
    run = tmp_path / "run"
    run.mkdir()
    (there / RunDir.TO_EVALUATE).mkdir()
    (there / RunDir.TO_EVALUATE / "model.ckpt-5.index").write_text("i")
    (there / RunDir.TRAINED).write_text('{"step": 5}\n')
    (there / RunDir.METRICS).write_text("the evaluator writes these here\n")
    Mirror(folder, run, beside=True).follow()
    assert (run / RunDir.TO_EVALUATE / "model.ckpt-5.index").read_text() == "i" and os.listdir(there / RunDir.TO_EVALUATE) == []
    assert (run / RunDir.TRAINED).read_text() == '{"step": 5}\n' and not (run / RunDir.METRICS).exists()


def _save(there: Path, *steps: int, epoch_of=lambda step: step) -> None:
    """What the chief's Saver leaves after saving ``steps`` (it keeps the last two): their files, the
    state file naming them (absolute paths, as a Saver writes them) and the epochs they end."""
    folder = there / RunDir.CHECKPOINTS
    folder.mkdir(exist_ok=True)
    for old in folder.glob("model.ckpt-*"):
        old.unlink()
    for step in steps:
        (folder / f"model.ckpt-{step}.index").write_text(f"index {step}")
        (folder / f"model.ckpt-{step}.data-00000-of-00001").write_bytes(b"w" * (ALWAYS_COPY_BYTES + step))
    paths = [f"{folder}/model.ckpt-{step}" for step in steps]
    (folder / "checkpoint").write_text(f'model_checkpoint_path: "{paths[-1]}"\n'
                                       + "".join(f'all_model_checkpoint_paths: "{p}"\n' for p in paths))
    (folder / "epochs.json").write_text(json.dumps({f"model.ckpt-{s}": epoch_of(s) for s in steps}))


def _held(run: Path) -> list[str]:
    return sorted(p.name for p in (run / RunDir.CHECKPOINTS).iterdir())


def test_a_saver_state_file_names_its_checkpoints_newest_first():
    state = (b'model_checkpoint_path: "/home/pi/runs/r/checkpoints/model.ckpt-39"\n'
             b'all_model_checkpoint_paths: "/home/pi/runs/r/checkpoints/model.ckpt-26"\n'
             b'all_model_checkpoint_paths: "/home/pi/runs/r/checkpoints/model.ckpt-39"\n')
    assert listed_checkpoints(state) == ["model.ckpt-39", "model.ckpt-26"]
    assert listed_checkpoints(b"") == [] and listed_checkpoints(None) == [] and listed_checkpoints(b"\xff garbage") == []


def test_the_checkpoints_come_back_whole_and_those_the_node_dropped_go_here_too(node, tmp_path):
    folder, _, there, _ = node
    run = tmp_path / "run"
    run.mkdir()
    mirror = Mirror(folder, run)
    _save(there, 2, 3)
    mirror.records()
    assert _held(run) == ["checkpoint", "epochs.json", "model.ckpt-2.data-00000-of-00001", "model.ckpt-2.index",
                          "model.ckpt-3.data-00000-of-00001", "model.ckpt-3.index"]
    assert RunDir(run).has_checkpoint()
    _save(there, 3, 4)
    mirror.records()
    assert _held(run) == ["checkpoint", "epochs.json", "model.ckpt-3.data-00000-of-00001", "model.ckpt-3.index",
                          "model.ckpt-4.data-00000-of-00001", "model.ckpt-4.index"]
    assert (run / RunDir.CHECKPOINTS / "checkpoint").read_bytes() == (there / RunDir.CHECKPOINTS / "checkpoint").read_bytes()


class SavingMeanwhile(LocalSFTP):
    """The chief saves again while a copy goes on: before the first read of a checkpoint's data,
    its Saver writes the next checkpoint and drops the oldest (a tenth of a second's epoch)."""

    def __init__(self, home: Path, there: Path, steps: tuple[int, int]) -> None:
        super().__init__(home)
        self.there, self.steps, self.saved = there, steps, False

    def open(self, path: str, mode: str):
        if ".data-" in path and not self.saved:
            self.saved = True
            _save(self.there, *self.steps)
        return super().open(path, mode)


def test_a_checkpoint_dropped_during_the_copy_leaves_ours_whole_and_the_next_round_takes_the_new_ones(tmp_path):
    home = tmp_path / "home"
    there = home / "runs" / "r"
    there.mkdir(parents=True)
    sftp = SavingMeanwhile(home, there, (6, 7))
    folder = JobFolder("node01", SimpleNamespace(conn=SimpleNamespace(sftp=lambda: sftp)), PurePosixPath("runs/r"), "$HOME/servers")  # type: ignore[arg-type]
    run = tmp_path / "run"
    run.mkdir()
    _save(there, 4, 5)
    Mirror(folder, run).records()  # ckpt-4's data went with the listing: this round is left, nothing named half here
    assert not RunDir(run).has_checkpoint() and not (run / RunDir.CHECKPOINTS / "checkpoint").exists()
    Mirror(folder, run).records()
    assert RunDir(run).has_checkpoint() and listed_checkpoints((run / RunDir.CHECKPOINTS / "checkpoint").read_bytes()) == [
        "model.ckpt-7", "model.ckpt-6"]
    assert [p for p in _held(run) if p.startswith("model.ckpt-4") or p.startswith("model.ckpt-5")] == []  # left here: dropped
    assert json.loads((run / RunDir.CHECKPOINTS / "epochs.json").read_text()) == {"model.ckpt-6": 6, "model.ckpt-7": 7}


def test_starting_over_removes_what_the_training_wrote_and_keeps_its_config_layout_and_logs(tmp_path):
    run = RunDir(tmp_path / "run")
    for name in RunDir.TRAINING:
        target = run.path / name
        if "." in name:
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text("x")
        else:
            (target / "sub").mkdir(parents=True)
            (target / "sub" / "f").write_text("x")
    for name in (RunDir.CONFIG, RunDir.LAYOUT, RunDir.NODES, "worker-0.log", RunDir.EVALUATOR_LOG):
        (run.path / name).write_text("kept")
    run.start_over()
    assert sorted(p.name for p in run.path.iterdir()) == sorted(
        [RunDir.CONFIG, RunDir.LAYOUT, RunDir.NODES, "worker-0.log", RunDir.EVALUATOR_LOG])
    run.start_over()  # nothing left to remove: no error


def test_a_new_run_clears_a_nodes_copy_of_an_earlier_run_of_the_same_folder(tmp_path):
    """A new run (or one started over) on a node whose folder holds a run of the same name: its chief
    must not restore that run's checkpoints.  The folder is made (its shell line run here, as the
    node's user would) with the training's files and folders removed; a resumed run keeps them."""
    import subprocess

    from picluster.jobs.har.clients import fresh_files

    home = tmp_path / "home"
    there = home / "runs" / "r"

    def out(command: str) -> str:
        return subprocess.run(["sh", "-c", command], env={"HOME": str(home), "PATH": os.environ["PATH"]},
                              capture_output=True, text=True, check=True).stdout.strip()

    folder = JobFolder("node01", SimpleNamespace(out=out), PurePosixPath("runs/r"), "$HOME/servers")  # type: ignore[arg-type]

    def earlier_run() -> None:
        there.mkdir(parents=True, exist_ok=True)
        _save(there, 3, 4)
        for name in (RunDir.CONFIG, RunDir.METRICS, RunDir.STATE, RunDir.RESULT, "worker-0.log"):
            (there / name).write_text("earlier")

    earlier_run()
    folder.make(fresh=fresh_files(resume=True), door_of=("worker", 0))
    assert (there / RunDir.CHECKPOINTS / "checkpoint").exists() and (there / RunDir.METRICS).exists()
    assert not (there / RunDir.RESULT).exists()  # the last launch's end only
    earlier_run()
    folder.make(fresh=fresh_files(resume=False), door_of=("worker", 0))
    assert sorted(p.name for p in there.iterdir()) == [RunDir.CONFIG, "worker-0.log"]


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask
