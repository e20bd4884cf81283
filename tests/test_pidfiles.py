"""A node's servers and agent by their pid files (cluster/pidfiles.py), through the very shell
lines `cluster up`, the boot's start script, `cluster down` and a training replica send a node:
the helper shipped into a folder as `up` ships it, run by this machine's python3 as a node runs
it.  The processes are real; they stand in for a server by carrying its module's name on their
command line."""

import json
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from picluster.cluster.jobfolder import JobFolder
from picluster.cluster.nodecluster import _detached, _ship_pidfiles, _unless_running
from picluster.cluster.pidfiles import running, start_of
from picluster.util.processes import same_process, start_time

pytestmark = pytest.mark.unit

PY = sys.executable
SERVER = "picluster.cluster.server"
SLEEPS = f"{PY} -c 'import time; time.sleep(60)' {SERVER}"  # a server's stand-in: its module on its command line


def sh(folder: Path, script: str, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run(["sh", "-c", script], cwd=folder, capture_output=True, text=True, timeout=timeout)


def pidfiles(folder: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["python3", str(folder / "pidfiles.py"), "--dir", str(folder), *args],
                          capture_output=True, text=True, timeout=60)


@pytest.fixture
def folder(tmp_path):
    assert sh(tmp_path, _ship_pidfiles()).returncode == 0  # as `cluster up` and `down` write it
    yield tmp_path
    for pid_file in tmp_path.glob("*.pid"):  # nothing outlives the test, whatever it proved
        try:
            psutil.Process(int(pid_file.read_text())).kill()
        except (psutil.Error, ValueError):
            pass


def start(folder: Path, command: str = SLEEPS, name: str = "worker-1") -> str:
    return sh(folder, _unless_running(name, SERVER, command, "worker:1")).stdout


def test_a_started_process_is_recorded_with_its_start_time_and_not_started_twice(folder):
    assert start(folder) == "started worker:1\n"
    pid = int((folder / "worker-1.pid").read_text())
    proc = psutil.Process(pid)
    assert SERVER in proc.cmdline() and proc.name().startswith("python")  # the process itself, not its watcher shell
    assert (folder / "worker-1.start").read_text() == start_of(pid) and same_process(pid, start_time(pid))
    assert not (folder / "worker-1.pid.new").exists()
    assert running(folder, "worker-1") == pid
    assert start(folder) == ""  # running already: the boot's start script leaves it be
    assert json.loads(pidfiles(folder, "check", "worker-1").stdout) == {"worker-1": ["alive", None, []]}
    (folder / "worker-1.ready").touch()
    assert json.loads(pidfiles(folder, "check", "worker-1").stdout) == {"worker-1": ["ready", None, []]}


def test_a_pid_file_naming_another_process_of_the_same_module_does_not_count(folder):
    """What a reboot leaves: the pid now belongs to another process, which may even run the same
    module (another picluster's server).  Its command line alone would pass; its start time does not."""
    assert start(folder) == "started worker:1\n"
    first = psutil.Process(int((folder / "worker-1.pid").read_text()))
    other = subprocess.Popen([PY, "-c", "import time; time.sleep(60)", SERVER])  # started later, same module named
    try:
        while SERVER not in psutil.Process(other.pid).cmdline():  # python's, once exec'd: the module's name alone would pass
            time.sleep(0.01)
        (folder / "worker-1.pid").write_text(f"{other.pid}\n")
        assert running(folder, "worker-1") is None
        assert pidfiles(folder, "running", "worker-1", SERVER).returncode == 1
        assert json.loads(pidfiles(folder, "check", "worker-1").stdout)["worker-1"][0] == "dead"
        assert pidfiles(folder, "stop", "worker-1").stdout == ""  # nobody signalled on the pid alone
        assert other.poll() is None and first.is_running()
    finally:
        other.kill()
        other.wait()
        first.kill()


def test_an_older_pid_file_without_start_time_is_taken_on_pid_and_module(folder):
    """A pid file written by a picluster from before start files: its pid and its module, as then."""
    server = subprocess.Popen([PY, "-c", "import time; time.sleep(60)", SERVER])
    stranger = subprocess.Popen(["sleep", "60"])
    try:
        (folder / "worker-1.pid").write_text(f"{server.pid}\n")
        (folder / "agent.pid").write_text(f"{stranger.pid}\n")
        assert running(folder, "worker-1") == server.pid
        assert running(folder, "agent") is None
        assert start(folder) == ""
    finally:
        for proc in (server, stranger):
            proc.kill()
            proc.wait()


def test_a_process_that_dies_at_start_is_dead_with_its_status_and_log(folder):
    command = f"{PY} -c 'import sys; print(\"no module named tensorflow\"); sys.exit(3)' {SERVER}"
    assert start(folder, command) == "started worker:1\n"
    deadline = time.monotonic() + 10
    while not (folder / "worker-1.exit").exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    state = json.loads(pidfiles(folder, "check", "worker-1", "agent").stdout)
    assert state == {"worker-1": ["dead", 3, ["no module named tensorflow"]], "agent": ["dead", None, []]}


def test_down_stops_every_proven_process_and_clears_its_files(folder):
    """`cluster down`'s line: every pid file here; a process that ignores SIGTERM gets SIGKILL."""
    assert start(folder) == "started worker:1\n"
    stubborn = f"{PY} -c 'import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(60)' {SERVER}"
    assert start(folder, stubborn, "ps-0") == "started worker:1\n"
    pids = [int((folder / f"{n}.pid").read_text()) for n in ("ps-0", "worker-1")]
    (folder / "agent.pid").write_text("999999999\n")  # long gone: its files go too
    stopped = sh(folder, "python3 pidfiles.py stop --wait 1")  # as `down` runs it, in the run folder
    assert stopped.returncode == 0 and stopped.stdout.split("\n") == ["stopped ps-0", "stopped worker-1", ""], stopped
    for pid in pids:
        assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    assert sorted(p.name for p in folder.iterdir() if not p.name.endswith(".log")) == ["pidfiles.py"]


def test_a_replica_stops_the_node_server_it_stands_in_for(folder):
    """JobFolder.stop_server's line, as a training replica's prelude runs it before it serves."""
    assert start(folder) == "started worker:1\n"
    pid = int((folder / "worker-1.pid").read_text())
    job = JobFolder("node03", None, folder / "runs" / "r", str(folder))  # type: ignore[arg-type]  # no connection needed
    done = sh(folder, job.stop_server("worker", 1))
    assert done.returncode == 0 and done.stdout == "", done
    assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    assert not (folder / "worker-1.pid").exists()


def test_a_name_that_is_not_a_process_name_is_refused(folder):
    bad = pidfiles(folder, "stop", "../etc")
    assert bad.returncode == 2 and bad.stderr.strip().splitlines()[-1].endswith("not a process name: '../etc'"), bad.stderr
    assert "Traceback" not in bad.stderr


def test_the_helper_runs_on_a_python_without_picluster(folder):
    """Shipped as a script for the node's python3: the standard library only, so it answers (and
    says why the servers died) on a node whose venv lacks picluster; a node's python3 may be 3.9."""
    source = (folder / "pidfiles.py").read_text()
    imports = [line for line in source.splitlines() if line.startswith(("import ", "from "))]
    assert not [line for line in imports if "picluster" in line or "psutil" in line], imports
    assert any(line.startswith("from __future__ import annotations") for line in imports)
    alone = subprocess.run(["python3", "-I", "-S", str(folder / "pidfiles.py"), "check", "agent"], cwd=folder,
                           capture_output=True, text=True, timeout=60)  # no site-packages at all
    assert alone.returncode == 0 and json.loads(alone.stdout) == {"agent": ["dead", None, []]}, alone.stderr


def test_the_watcher_waits_for_the_sealed_pid_file():
    line = _detached("worker-1", "true")
    assert "echo $! > worker-1.pid.new; python3 pidfiles.py seal worker-1; wait $!" in line
    assert "[ -s worker-1.pid ] && break" in line
