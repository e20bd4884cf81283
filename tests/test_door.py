"""The door of a resident server process (picluster/cluster/door.py), without TensorFlow: a door
served by a process of its own, real Unix sockets, and the knocker as a client would run it
(``python -m picluster.cluster.door``).  The HAR replica through real doors on test hosts:
tests/test_train_lab.py."""

import os
import re
import signal
import stat
import subprocess
import sys
import textwrap
import time

import pytest

from conftest import ROOT

JOBS = '''
import os, sys, threading, time

def echo(argv, job):
    job.say("argv " + " ".join(argv))
    job.say("env " + job.env.get("TF_CONFIG", "-"))
    job.say("cwd " + str(job.cwd))
    return int(argv[0]) if argv and argv[0].isdigit() else 0

def wait(argv, job):
    closed = []
    job.on_cancel(lambda: closed.append("session closed"))
    job.say("waiting")
    while not job.cancelled.is_set():
        time.sleep(0.01)
    open(argv[0], "w").write(" ".join(closed) or "cancelled")
    return 143

def stubborn(argv, job):
    job.say("waiting, deaf to cancels")
    time.sleep(600)

def broken(argv, job):
    raise ValueError("a bug in the job")

class Graph:  # a job's graph and session refer to each other, as TensorFlow's do
    pass

class Slow:  # garbage whose collection takes a while (a big graph's at a Pi's share of a core)
    def __init__(self, mark):
        self.self, self.mark = self, mark

    def __del__(self):
        time.sleep(2.0)
        open(self.mark, "w").write("collected")

def slow_garbage(argv, job):
    Slow(argv[0])
    return 0

def hoard(argv, job):
    """Leaves 300 MiB behind in a reference cycle, and registers a callback that holds it (as a
    replica registers its session's close)."""
    g = Graph()
    g.self, g.weights = g, bytearray(b"w" * (300 << 20))
    job.on_cancel(lambda: g)
    return 0
'''

SERVER = '''
import sys, time
from pathlib import Path
from picluster.cluster.door import Door
Door(Path(sys.argv[1]), "worker:0", allowed="doorjobs", cancel_s=1.0).open()
print("open", flush=True)
time.sleep(600)
'''


@pytest.fixture
def door(tmp_path):
    """A process with a door open at tmp_path/worker-0.door, and jobs in module doorjobs."""
    (tmp_path / "doorjobs.py").write_text(textwrap.dedent(JOBS))
    path = tmp_path / "worker-0.door"
    env = dict(os.environ, PYTHONPATH=f"{tmp_path}{os.pathsep}{ROOT}")
    server = subprocess.Popen([sys.executable, "-c", SERVER, str(path)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True, env=env)
    assert server.stdout.readline() == "open\n", server.stderr.read()
    yield path, server
    server.kill()
    server.wait()


def knocker(path, *job, cwd=None, env=None):
    return [sys.executable, "-m", "picluster.cluster.door", "--door", str(path), "--", *job]


def knock(path, *job, cwd=None, env=None, timeout=30):
    return subprocess.run(knocker(path, *job), capture_output=True, text=True, timeout=timeout, cwd=cwd or ROOT,
                          env=dict(os.environ, **(env or {})))


def test_a_job_runs_in_the_server_with_its_arguments_environment_and_folder(door, tmp_path):
    path, _ = door
    assert stat.S_IMODE(path.stat().st_mode) == 0o600  # only the node's user knocks
    done = knock(path, "doorjobs:echo", "7", "--run-dir", ".", cwd=tmp_path, env={"TF_CONFIG": '{"task": 1}', "OTHER": "x"})
    assert done.returncode == 7, done.stderr
    assert done.stdout.splitlines() == ["argv 7 --run-dir .", 'env {"task": 1}', f"cwd {tmp_path}"]


def test_a_job_that_raises_says_why_and_the_door_serves_the_next(door):
    path, server = door
    broken = knock(path, "doorjobs:broken")
    assert broken.returncode == 1 and "ValueError: a bug in the job" in broken.stdout
    assert knock(path, "doorjobs:echo", "0").returncode == 0 and server.poll() is None


def test_only_jobs_of_the_allowed_modules_and_nothing_without_a_door(door, tmp_path):
    path, _ = door
    refused = knock(path, "os:system", "touch x")
    assert refused.returncode == 2 and "'os:system' is not a picluster job (module:function under doorjobs)" in refused.stdout
    assert knock(path, "doorjobsevil:echo").returncode == 2  # a name that only starts like the allowed one
    missing = knock(tmp_path / "nope.door", "doorjobs:echo")
    assert missing.returncode == 69 and missing.stderr.startswith("picluster.cluster.door: no door at ")


def test_one_job_at_a_time(door, tmp_path):
    path, _ = door
    first = subprocess.Popen(knocker(path, "doorjobs:wait", str(tmp_path / "first")), stdout=subprocess.PIPE, text=True, cwd=ROOT)
    assert first.stdout.readline() == "waiting\n"
    second = knock(path, "doorjobs:echo")
    assert second.returncode == 75 and "worker:0: busy with another job" in second.stdout
    first.send_signal(signal.SIGTERM)
    assert first.wait(10) == 143


@pytest.mark.parametrize("how", [signal.SIGTERM, signal.SIGKILL])
def test_the_knockers_end_cancels_the_job_and_closes_what_it_registered(door, tmp_path, how):
    """SIGTERM: the tether's stop (the knocker asks, and reports the job's status); SIGKILL: the
    knocker dies, its socket closes, and the server cancels the job anyway."""
    path, server = door
    mark = tmp_path / "cancelled"
    proc = subprocess.Popen(knocker(path, "doorjobs:wait", str(mark)), stdout=subprocess.PIPE, text=True, cwd=ROOT)
    assert proc.stdout.readline() == "waiting\n"
    proc.send_signal(how)
    code = proc.wait(10)
    assert code == (143 if how == signal.SIGTERM else -9)
    deadline = time.monotonic() + 10
    while not mark.exists():
        assert time.monotonic() < deadline, "the job was not cancelled"
        time.sleep(0.05)
    assert mark.read_text() == "session closed"
    # The door is busy until the cancelled job has returned and been collected, a moment after
    # it wrote the mark: a knock then gets 75 (try again), and the next one is served.
    while (served := knock(path, "doorjobs:echo")).returncode == 75:
        assert time.monotonic() < deadline, "the door stayed busy after the job was cancelled"
        time.sleep(0.05)
    assert served.returncode == 0 and server.poll() is None  # the door serves on
    server.kill()
    assert "worker:0: job doorjobs:wait ended, status 143 (cancelled)" in server.communicate()[1]


def anonymous_mib(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        return next(int(line.split()[1]) // 1024 for line in f if line.startswith("RssAnon:"))


def test_what_a_job_leaves_in_reference_cycles_is_freed_when_it_ends(door):
    """A resident server lives through many jobs on a 1 GB board: a job's graphs and sessions
    (cycles, which Python frees only in a full collection) must not stay in it after the job."""
    path, server = door
    before = anonymous_mib(server.pid)
    for _ in range(2):
        assert knock(path, "doorjobs:hoard").returncode == 0
        # The collection follows the job's status: the next knock is served once it is done.
        assert knock(path, "doorjobs:echo").returncode == 0
        assert anonymous_mib(server.pid) < before + 100  # without the collection: + 300 MiB, then + 600
    server.kill()
    log = server.communicate()[1]
    assert re.search(r"worker:0: job doorjobs:hoard ended, status 0; memory held (\d+) MiB, (\d+) MiB after collecting and trimming \(\d+\.\d\d s\)\n", log), log


def test_the_knocker_has_the_jobs_status_before_the_collection_and_a_knock_meanwhile_waits_for_it(door, tmp_path):
    """A run's end waits for its clients' knockers: not for the servers' collections after their
    jobs.  The next launch of a run knocks at once: it waits for the collection, it is not refused."""
    path, _ = door
    mark = tmp_path / "collected"
    assert knock(path, "doorjobs:slow_garbage", str(mark)).returncode == 0
    assert not mark.exists()  # the status came first: the collection takes 2 s
    served = knock(path, "doorjobs:echo")
    assert served.returncode == 0, served.stdout  # not 75: it waited for the collection
    assert mark.read_text() == "collected"  # ... which ended before the next job began


def test_a_cancelled_job_that_does_not_end_takes_the_process_with_it(door):
    path, server = door
    proc = subprocess.Popen(knocker(path, "doorjobs:stubborn"), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT)
    assert proc.stdout.readline() == "waiting, deaf to cancels\n"
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(10) == 70  # the server ended without the job's status
    assert "ended without the job's status" in proc.stderr.read()
    assert server.wait(10) == 75
    log = server.stderr.read()
    assert "worker:0: job doorjobs:stubborn started in " in log
    assert "worker:0: a cancelled job did not end within 1 s; exiting so that the task is started afresh" in log


READ_AHEAD = '''
import os, time

DOOR_READ_AHEAD = ("doorjobs:ahead", "doorjobs:broken_ahead", "doorjobs:nothing_there")

def ahead(share):
    # A Pi reading its data set, until the test lets it end: a job knocked meanwhile is still served.
    deadline = time.monotonic() + 60
    while not os.path.exists(os.path.join(share, "go")) and time.monotonic() < deadline:
        time.sleep(0.01)
    open(os.path.join(share, "read"), "w").write("once")
    return "read " + share

def broken_ahead(share):
    raise OSError("the share hangs")

def nothing_there(share):
    return None

def echo(argv, job):
    job.say("served")
    return 0
'''

SERVING = '''
import sys, time
from pathlib import Path
from picluster.cluster.door import Door
door = Door(Path(sys.argv[1]), "worker:0", allowed="doorjobs")
door.open()
print("open", flush=True)
door.read_ahead(sys.argv[2]).join()
print("read", flush=True)
time.sleep(600)
'''


def test_once_the_task_serves_the_door_reads_ahead_what_its_jobs_read_from_the_share(tmp_path):
    """A node's server reads what the jobs read from the share (the allowed package's
    DOOR_READ_AHEAD, given the share's mount) in a thread of its own: its log says what each read,
    a failing one is one line and the others go on, and the door serves while it reads."""
    (tmp_path / "doorjobs.py").write_text(textwrap.dedent(READ_AHEAD))
    share = tmp_path / "share"
    share.mkdir()
    path = tmp_path / "worker-0.door"
    env = dict(os.environ, PYTHONPATH=f"{tmp_path}{os.pathsep}{ROOT}")
    server = subprocess.Popen([sys.executable, "-c", SERVING, str(path), str(share)], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True, env=env)
    try:
        assert server.stdout.readline() == "open\n", server.stderr.read()
        served = knock(path, "doorjobs:echo")
        assert served.returncode == 0 and served.stdout == "served\n", served.stderr
        assert not (share / "read").exists()  # served while the read ahead still ran
        (share / "go").touch()
        assert server.stdout.readline() == "read\n"
        assert (share / "read").read_text() == "once"
    finally:
        server.kill()
        _, log = server.communicate()
    assert f"picluster.cluster.door: worker:0: read {share}\n" in log, log
    assert "picluster.cluster.door: worker:0: doorjobs:broken_ahead failed: OSError: the share hangs\n" in log, log
    assert "nothing_there" not in log and "Traceback" not in log, log
