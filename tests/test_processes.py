"""One check, for every record that keeps a pid (jobs, lab hosts, VMs, lab owners): is that pid
still the process that was recorded?  Pid, start time and, when recorded, command line."""

import subprocess
import sys

import psutil
import pytest

from picluster.lab import registry
from picluster.util.processes import START_TOLERANCE_S, same_process, start_time


@pytest.fixture
def sleeper():
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    yield proc
    proc.kill()
    proc.wait()


def test_the_recorded_process_is_itself(sleeper):
    p = psutil.Process(sleeper.pid)
    assert same_process(sleeper.pid, p.create_time(), p.cmdline())
    assert same_process(sleeper.pid, start_time(sleeper.pid))  # no command line recorded: pid and start time


def test_another_process_with_the_pid_is_not_it(sleeper):
    p = psutil.Process(sleeper.pid)
    # A pid reused: the process now holding it started later than the recorded one (one tick, 10 ms, at least).
    assert not same_process(sleeper.pid, p.create_time() - 0.01)
    assert not same_process(sleeper.pid, p.create_time() - 1.0)
    assert not same_process(sleeper.pid, p.create_time(), ["python3", "job.py"])  # same start, other program
    assert START_TOLERANCE_S < 0.01


def test_without_a_start_time_nothing_is_proven(sleeper):
    assert not same_process(sleeper.pid, None)
    assert not same_process(sleeper.pid, None, psutil.Process(sleeper.pid).cmdline())


@pytest.mark.parametrize("pid, started", [(None, 1.0), ("12", 1.0), (True, 1.0), (-1, 1.0), (0, 1.0), (2**80, 1.0),
                                          (1, "x"), (1, float("nan")), (1, True)])
def test_values_from_a_file_of_any_type_are_not_a_process(pid, started):
    assert not same_process(pid, started)


def test_a_dead_process_is_not_alive(sleeper):
    started = start_time(sleeper.pid)
    sleeper.kill()
    sleeper.wait()
    assert not same_process(sleeper.pid, started)


def test_a_lab_owner_is_checked_the_same_way(sleeper):
    me = registry.this_owner()
    assert registry.owner_alive(me)
    assert not registry.owner_alive({"pid": sleeper.pid, "started": me["started"]})  # pid alive, another process
    assert not registry.owner_alive({"pid": me["pid"]}) and not registry.owner_alive("junk")  # type: ignore[arg-type]
