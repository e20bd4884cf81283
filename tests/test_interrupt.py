"""Ctrl-C anywhere: one "interrupted" line, exit code 130, no traceback, nothing half written or left running."""

import signal
import subprocess
import sys
import time

import pytest

from conftest import ROOT, server_processes


def interrupted(args, after: float, env=None):
    """Run the CLI and send SIGINT (the terminal's Ctrl-C) after ``after`` seconds."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "picluster", *map(str, args)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        cwd=ROOT, env=env,
        # A shell without job control starts background jobs with SIGINT ignored: undo that, as a terminal would.
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )  # fmt: skip
    time.sleep(after)
    proc.send_signal(signal.SIGINT)
    _out, err = proc.communicate(timeout=120)
    return proc.returncode, err


def assert_interrupted(code, err):
    assert code == 130, (code, err[-3000:])
    assert "Traceback" not in err and "KeyboardInterrupt" not in err, err[-3000:]
    assert err.strip().splitlines()[-1] == "picluster: error: interrupted", err[-3000:]


def test_ctrl_c_while_python_loads_the_command_line(tmp_path):
    """Issue 12's traceback: Ctrl-C while click was still being imported.  MOCK of the timing only:
    a stand-in click package sends its process a real SIGINT while it loads, where the user's landed."""
    fake = tmp_path / "click"
    fake.mkdir()
    (fake / "__init__.py").write_text("import os, signal, time\nos.kill(os.getpid(), signal.SIGINT)\ntime.sleep(30)\n")
    env = dict(__import__("os").environ, PYTHONPATH=str(tmp_path))
    result = subprocess.run([sys.executable, "-m", "picluster", "data", "har"], capture_output=True, text=True, env=env,
                            cwd=ROOT, timeout=60)
    assert_interrupted(result.returncode, result.stderr)


@pytest.mark.slow
# Not earlier than 1 s: before ~0.2 s (more on a loaded machine) the interrupt lands in Python's own
# start-up, which is not ours; the moment click loads is covered deterministically above.
@pytest.mark.parametrize("after", [1.0, 2.5])
def test_ctrl_c_while_preparing_har_data(tmp_path, after):
    out = tmp_path / "har"
    code, err = interrupted(["data", "har", "--force", "--out", out], after)
    if code == 0:
        pytest.fail(f"data har finished within {after} s; the interrupt came too late to test anything")
    assert_interrupted(code, err)
    assert not out.exists() or [p.name for p in out.iterdir()] == []  # no half-written cache


@pytest.mark.slow
@pytest.mark.parametrize("after", [1.0, 6.0])
def test_ctrl_c_during_a_run_stops_its_servers(state, after):
    code, err = interrupted(["run", "montecarlo", "--samples", "1e11", "--nodes", "2", "--no-live"], after)
    assert_interrupted(code, err)
    time.sleep(1.0)
    assert not server_processes(state) and not server_processes(state, "picluster.monitor.agent")


@pytest.mark.slow
def test_ctrl_c_during_training_stops_clients_and_servers(state, tmp_path):
    from train_fixtures import TINY_MODEL, write_tiny_har

    tiny = write_tiny_har(tmp_path / "har")
    run = tmp_path / "run"
    code, err = interrupted(["train", "har", "--data-dir", tiny, "--run-dir", run, *TINY_MODEL, "--epochs", "400", "--no-live"],
                            after=12.0)
    assert_interrupted(code, err)
    time.sleep(1.0)
    assert not server_processes(state) and not server_processes(state, "picluster.monitor.agent")
    assert not server_processes(run, "picluster.jobs.har.replica")
