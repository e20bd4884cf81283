"""Disk full, read-only file systems and permission denied, for real (a tmpfs, a non-root user):
one line naming the path and the cause, no half-written file a later command accepts, nothing left running."""

import json
import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

import pytest

from picluster.jobs.har import metrics
from picluster.util import atomic
from picluster.util.errors import StorageError

from conftest import ROOT, command_line, one_line, picluster, server_processes
from train_fixtures import TINY_MODEL, write_tiny_har

ROW = {"epoch": 1, "global_step": 10, "train_loss": 1.5, "time": 1700000000.123}


pytestmark = pytest.mark.lab  # small_disk mounts a tmpfs and runs the CLI as nobody: root


def leftovers(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if p.name != ".filler")


# -- the write paths ------------------------------------------------------------------------------

def test_atomic_write_on_a_full_disk_names_the_path_and_keeps_the_old_file(small_disk):
    target = small_disk.path / "state.json"
    atomic.write_json(target, {"old": True})
    small_disk.fill()
    with pytest.raises(StorageError) as err:
        atomic.write_json(target, {"new": "x" * 100_000})
    assert str(err.value) == f"cannot write {target}: No space left on device"
    assert isinstance(err.value, OSError)  # callers that handle OSError still do
    assert json.loads(target.read_text()) == {"old": True} and leftovers(small_disk.path) == ["state.json"]


def test_atomic_write_on_a_read_only_file_system(small_disk):
    target = small_disk.path / "state.json"
    atomic.write_json(target, {"old": True})
    small_disk.read_only()
    with pytest.raises(StorageError, match=r"state\.json: Read-only file system"):
        atomic.write_json(target, {"new": True})
    with pytest.raises(StorageError, match="Read-only file system"):
        atomic.check_writable(small_disk.path)
    assert json.loads(target.read_text()) == {"old": True}


def test_a_metrics_row_that_does_not_fit_leaves_the_complete_rows(small_disk):
    csv_path = small_disk.path / "metrics.csv"
    metrics.append_row(csv_path, ROW)
    before = csv_path.read_bytes()
    small_disk.fill()
    with pytest.raises(OSError, match="No space left"):
        metrics.append_row(csv_path, ROW | {"epoch": 2, "train_loss": "x" * 200_000})
    assert csv_path.read_bytes() == before  # cut back to the last complete row
    assert [r["epoch"] for r in metrics.read_rows(csv_path)] == ["1"]


def test_readers_ignore_an_unfinished_last_row_and_refuse_a_damaged_one(tmp_path):
    csv_path = tmp_path / "metrics.csv"
    metrics.write_rows(csv_path, [ROW, ROW | {"epoch": 2}])
    with open(csv_path, "a") as f:
        f.write("3,30,0.5")  # a write cut short: no newline
    assert [r["epoch"] for r in metrics.read_rows(csv_path)] == ["1", "2"]
    lines = csv_path.read_text().splitlines()
    csv_path.write_text("\n".join([lines[0], "1,10", lines[2]]) + "\n")
    with pytest.raises(Exception, match=r"line 2 is not a complete row"):
        metrics.read_rows(csv_path)


# -- commands ------------------------------------------------------------------------------------

def test_csv_on_a_read_only_or_unwritable_place_is_refused_before_any_server(small_disk, state):
    small_disk.read_only()
    result = picluster("run", "montecarlo", "--sweep", "1e6", "--nodes-list", "1", "--csv", small_disk.path / "t5.csv", timeout=60)
    one_line(result, 2, f"--csv {small_disk.path / 't5.csv'}", "Read-only file system")
    assert not state.exists() or not server_processes(state)


def test_csv_where_the_user_may_not_write(tmp_path):
    folder = Path(tempfile.mkdtemp(prefix="picluster-denied-"))  # root's, 0755: nobody may not write there
    try:
        folder.chmod(0o755)
        env = dict(os.environ, HOME=str(folder), PICLUSTER_STATE_DIR=str(folder / "state"))
        result = picluster("run", "montecarlo", "--sweep", "1e6", "--csv", folder / "t5.csv", timeout=60, env=env,
                           how=["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"])  # as nobody
        one_line(result, 2, "Permission denied", str(folder))
        assert leftovers(folder) == []
    finally:
        shutil.rmtree(folder)


def test_a_device_or_a_pipe_is_never_replaced_by_a_file(tmp_path, state):
    """`--csv /dev/full` (found by hand) replaced the device node with a CSV file: as root,
    `--csv /dev/sda` would have done the same to a disk.  A FIFO stands in for any non-file."""
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    with pytest.raises(StorageError, match="not a regular file"):
        atomic.write_text(fifo, "x")
    inventory = tmp_path / "picluster.toml"
    inventory.write_text('[cluster]\nname = "c"\nuser = "pi"\nnodes = "n1"\naddresses = "10.0.0.1"\n')
    one_line(picluster("inventory", "--ansible", "-i", inventory, "--out", fifo, timeout=60), 2, f"--out {fifo}", "not a regular file")
    one_line(picluster("run", "montecarlo", "--sweep", "1e5", "--nodes-list", "1", "--csv", fifo, timeout=120), 2,
             f"--csv {fifo}", "not a regular file")
    assert fifo.is_fifo() and sorted(p.name for p in tmp_path.iterdir()) == ["fifo", "picluster.toml"]
    assert not state.exists() or not server_processes(state)


def test_ansible_inventory_onto_a_full_disk(small_disk, tmp_path):
    inventory = tmp_path / "picluster.toml"
    inventory.write_text('[cluster]\nname = "c"\nuser = "pi"\nnodes = "n[1-64]"\naddresses = "10.0.0.[1-64]"\n')
    small_disk.fill()
    out = small_disk.path / "inventory.yml"
    one_line(picluster("inventory", "--ansible", "-i", inventory, "--out", out, timeout=60), 1,
             f"cannot write {out}: No space left on device")
    assert leftovers(small_disk.path) == []


def test_cluster_state_on_a_read_only_file_system_starts_nothing(small_disk, monkeypatch):
    state = small_disk.path / "state"
    state.mkdir()
    small_disk.read_only()
    monkeypatch.setenv("PICLUSTER_STATE_DIR", str(state))
    one_line(picluster("cluster", "up", timeout=120), 1, str(state), "Read-only file system")
    assert not server_processes(state) and not server_processes(state, "picluster.monitor.agent")


def test_a_sweep_table_onto_a_full_disk_is_one_line_and_no_file(small_disk, state):
    out = small_disk.path / "t5.csv"
    # Full only once the sweep has begun: the check before it must pass, the write after it fail.
    proc = subprocess.Popen([*command_line(), "run", "montecarlo", "--sweep", "1e6,2e6", "--nodes-list", "1",
                             "--csv", str(out), "--no-live"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT)
    try:
        deadline = time.monotonic() + 120
        while not (state / "tmp").exists() or not any((state / "tmp").iterdir()):  # the temporary cluster is starting
            assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
            time.sleep(0.05)
        small_disk.fill()
        stdout, stderr = proc.communicate(timeout=240)
    finally:
        proc.kill()
    one_line(subprocess.CompletedProcess(proc.args, proc.returncode, stdout, stderr), 1,
             f"cannot write {out}: No space left on device")
    assert leftovers(small_disk.path) == []
    assert not server_processes(state) and not server_processes(state, "picluster.monitor.agent")


def test_har_data_onto_a_full_disk_leaves_no_cache(small_disk):
    small_disk.fill()
    out = small_disk.path / "har"
    one_line(picluster("data", "har", "--out", out, timeout=300), 1, f"cannot write {out / 'har.npz'}: No space left on device")
    assert not out.exists() or list(out.iterdir()) == []


def test_a_training_onto_a_full_disk_is_refused_before_any_server_starts(small_disk, state, tmp_path):
    """A full disk still lets a folder and an empty file be made: the run's folder is checked for
    room before the temporary cluster starts, not found full at the run's first write."""
    data = write_tiny_har(tmp_path / "har")
    small_disk.fill()
    run = small_disk.path / "run"
    result = picluster("train", "har", "--epochs", "1", *TINY_MODEL, "--data-dir", data, "--run-dir", run, "--no-live", timeout=300)
    one_line(result, 1, f"cannot write {run}: No space left on device")
    assert not any(line.startswith("cluster:") for line in result.stderr.splitlines()), result.stderr  # a started cluster's line
    assert not run.exists()  # made by this command, so removed with it
    assert not (state / "tmp").exists() or not any((state / "tmp").iterdir())
