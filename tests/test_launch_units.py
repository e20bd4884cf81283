"""picluster launch, piece by piece: input checks, the failure policy, output folding, TF_CONFIG, the tether."""

import json
import os
import signal
import subprocess
import sys
import threading
import time

import psutil
import pytest

from picluster.jobs.launch import config as launch_config
from picluster.jobs.launch import plan
from picluster.jobs.launch.output import Output, fold_lines
from picluster.jobs.launch.policy import DONE, FAIL, RESTART, Budget, exit_class
from picluster.model.clusterspec import local_layout
from picluster.util.errors import UsageError


@pytest.fixture
def script(tmp_path):
    path = tmp_path / "job" / "train.py"
    path.parent.mkdir()
    path.write_text("print('hello')\n")
    return path


# -- input ------------------------------------------------------------------------------------

def test_a_good_script_makes_a_config(script):
    c = launch_config.make(script, ["--steps", "5"], "each-worker", script.parent, launch_config.Restarts(2, 3.0), None)
    assert c.name == "train" and c.args == ("--steps", "5") and c.whole_folder
    assert c.relative_script == "train.py" and c.command_line() == [str(script), "--steps", "5"]
    (script.parent / "data.csv").write_text("1,2\n")
    (script.parent / "__pycache__").mkdir()
    (script.parent / "__pycache__" / "x.pyc").write_bytes(b"x")
    assert [rel for rel, _ in c.files()] == ["data.csv", "train.py"]
    alone = launch_config.make(script, [], "each-worker")
    assert [rel for rel, _ in alone.files()] == ["train.py"]


@pytest.mark.parametrize("make, message", [
    (lambda s: launch_config.make(s.parent / "nope.py", [], "coordinator"), "nope.py: no such file"),
    (lambda s: launch_config.make(s.parent, [], "coordinator"), "not a file"),
    (lambda s: launch_config.make(s, [], "every-node"), "--mode 'every-node': choose one of coordinator, each-worker"),
    (lambda s: launch_config.make(s, [], "coordinator", s.parent), "--dir goes with --mode each-worker"),
    (lambda s: launch_config.make(s, [], "each-worker", s.parent / "sub"), "not a directory"),
    (lambda s: launch_config.make(s, [], "each-worker", s.parent.parent / "other"), "not a directory"),
    (lambda s: launch_config.make(s, [], "coordinator", name="a b"), "--name 'a b'"),
])
def test_bad_input_is_one_usage_line(script, make, message):
    with pytest.raises(UsageError) as err:
        make(script)
    assert message in str(err.value) and "\n" not in str(err.value)


def test_a_syntax_error_names_file_and_line(script):
    script.write_text("import os\n\ndef f(:\n    pass\n")
    with pytest.raises(UsageError, match=r"train.py:3: SyntaxError: "):
        launch_config.make(script, [], "coordinator")


def test_dir_must_hold_the_script_and_stay_small(script, tmp_path, monkeypatch):
    other = tmp_path / "other"
    other.mkdir()
    with pytest.raises(UsageError, match="is not inside it"):
        launch_config.make(script, [], "each-worker", other)
    monkeypatch.setattr(launch_config, "MAX_FILES", 3)
    for i in range(4):
        (script.parent / f"f{i}.txt").write_text("x")
    with pytest.raises(UsageError, match="more than 3 files"):
        launch_config.make(script, [], "each-worker", script.parent)


def test_a_script_with_nul_bytes_is_not_python_source(script):
    script.write_bytes(b"print('a')\n\x00\n")
    with pytest.raises(UsageError) as err:
        launch_config.make(script, [], "coordinator")
    assert "not Python source" in str(err.value) and "None" not in str(err.value), str(err.value)


def test_dir_refuses_a_symlink_that_leaves_the_folder(script, tmp_path):
    secret = tmp_path / "secret.key"
    secret.write_text("private")
    (script.parent / "key").symlink_to(secret)
    with pytest.raises(UsageError, match=r"key is a symlink to .*secret.key, outside the folder"):
        launch_config.make(script, [], "each-worker", script.parent)
    (script.parent / "key").unlink()
    (script.parent / "etc").symlink_to("/etc")  # a folder outside, by a link
    with pytest.raises(UsageError, match="etc is a symlink to /etc, outside the folder"):
        launch_config.make(script, [], "each-worker", script.parent)


def test_dir_copies_a_link_inside_the_folder_as_its_file_and_counts_its_bytes(script, monkeypatch):
    (script.parent / "data").mkdir()
    (script.parent / "data" / "big.bin").write_bytes(b"x" * 3000)
    (script.parent / "alias.bin").symlink_to("data/big.bin")
    (script.parent / "data-too").symlink_to("data")  # a folder inside: staged under its own name only
    c = launch_config.make(script, [], "each-worker", script.parent)
    assert [rel for rel, _ in c.files()] == ["alias.bin", "train.py", "data/big.bin"]
    monkeypatch.setattr(launch_config, "MAX_BYTES", 5000)  # 3000 + 3000 + the script: what is really copied
    with pytest.raises(UsageError, match="MiB to copy"):
        launch_config.make(script, [], "each-worker", script.parent)


# -- the failure policy -----------------------------------------------------------------------

def test_exit_classes_are_tfjobs():
    assert exit_class(0) == "success"
    assert [exit_class(c) for c in (1, 2, 126, 127)] == ["permanent"] * 4
    assert [exit_class(c) for c in (128, 137, 143, 255, None)] == ["retryable"] * 5


def test_the_budget_is_the_jobs():
    budget = Budget(limit=2)
    assert budget.decide(0)[0] == DONE
    assert budget.decide(1) == (FAIL, "a permanent error (exit codes 1-127 are not retried)")
    assert budget.decide(137) == (RESTART, "restart 1 of 2")
    assert budget.decide(None) == (RESTART, "restart 2 of 2")
    assert budget.decide(143) == (FAIL, "--restart-limit 2 reached")
    assert Budget(0).decide(137) == (FAIL, "not restarted (--restart-limit 0)")


# -- output -----------------------------------------------------------------------------------

def test_identical_lines_fold_across_nodes():
    tails = {f"node{i:02d}": [f"loss {i}", "done: global step 400 reached"] for i in range(2, 10)}
    tails["node10"] = ["Traceback", "ValueError: x"]
    folded = fold_lines(tails)
    assert folded[0] == "node[02-09]: done: global step 400 reached"
    assert "node05: loss 5" in folded and "node10: ValueError: x" in folded
    assert len(folded) == 1 + 8 + 2


def test_output_keeps_each_tasks_log_and_the_stream(tmp_path):
    shown = []
    out = Output(tmp_path, shown.append, keep=2)
    out.add("worker:0", "node02")
    out.add("worker:1", "node03")
    for line in ("start", "I0000 00:00:1795398270.380247   32085 port.cc:153] oneDNN custom operations are on.", "step 1", "done"):
        out.line("worker:0", line)
        out.line("worker:1", line)
    out.note("worker:1", "exit code 137 (SIGKILL): restarting (restart 1 of 1)")
    out.close()
    assert shown[0] == "node02: start" and shown[-1] == "node03: picluster: exit code 137 (SIGKILL): restarting (restart 1 of 1)"
    assert (tmp_path / "worker-1.log").read_text().splitlines()[-1].startswith("picluster: exit code 137")
    assert (tmp_path / "output.log").read_text().splitlines()[:2] == ["node02: start", "node03: start"]
    # TensorFlow's own log lines and picluster's notes stay in the logs, out of the summary.
    assert out.summary() == ["node[02-03]: step 1", "node[02-03]: done"]


def test_lines_from_tasks_printing_at_once_never_interleave(tmp_path):
    """The display writes a line in two parts (as print() does: text, then newline); tasks' pump
    threads call in at once, so the stream must take one whole line at a time, in the log's order."""
    written: list[str] = []

    def emit(line: str) -> None:
        written.append(line)
        time.sleep(0.0005)  # another task's thread gets in here unless emit runs under the lock
        written.append("\n")

    out = Output(tmp_path, emit)
    labels = [f"worker:{i}" for i in range(4)]
    for i, label in enumerate(labels):
        out.add(label, f"node{i + 2:02d}")
    threads = [threading.Thread(target=lambda lb=label: [out.line(lb, f"step {n}") for n in range(50)]) for label in labels]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    out.close()
    stream = "".join(written).splitlines()
    assert len(stream) == 200 and all(line.startswith("node0") and line.count(":") == 1 for line in stream)
    assert stream == (tmp_path / "output.log").read_text().splitlines()


# -- TF_CONFIG --------------------------------------------------------------------------------

def test_each_worker_gets_its_own_task_and_the_chief_joins_the_cluster(script, monkeypatch):
    layout = local_layout([2000], [2001, 2002])
    c = launch_config.make(script, ["--x"], "each-worker")
    specs = plan.worker_tasks(c, layout, 7, None)
    assert [s.label for s in specs] == ["worker:0", "worker:1"]
    tf_config = json.loads(specs[1].env["TF_CONFIG"])
    assert tf_config == {"cluster": {"ps": ["127.0.0.1:2000"], "worker": ["127.0.0.1:2001", "127.0.0.1:2002"]},
                         "task": {"type": "worker", "index": 1}}
    assert specs[1].env["PICLUSTER_JOB_ID"] == "7" and specs[1].cwd == str(script.parent)
    staged = plan.worker_tasks(c, layout, 7, {"localhost": "/srv/x"})
    assert staged[0].argv == ["train.py", "--x"] and staged[0].cwd == "/srv/x"

    monkeypatch.setattr("picluster.cluster.shim.bind_shim", lambda: "/lib/shim.so")
    chief = plan.coordinator_task(launch_config.make(script, [], "coordinator"), layout, 7)
    config = json.loads(chief.env["TF_CONFIG"])
    assert config["task"] == {"type": "chief", "index": 0}
    host, port = config["cluster"]["chief"][0].split(":")
    assert host == "127.0.0.1" and chief.env["PICLUSTER_BIND_PORT"] == port and chief.env["PICLUSTER_BIND_ADDR"] == host
    assert chief.env["LD_PRELOAD"].split(":")[0] == "/lib/shim.so" and config["cluster"]["ps"] == ["127.0.0.1:2000"]
    with pytest.raises(UsageError, match="needs a ps task"):
        plan.coordinator_task(launch_config.make(script, [], "coordinator"), local_layout([], [2001]), 7)


# -- the tether -------------------------------------------------------------------------------

TETHER = [sys.executable, "-m", "picluster.cluster.tether"]


def _run_tethered(command) -> tuple[int, str]:
    """Exit status and stderr, with the lifeline (stdin) held open throughout."""
    proc = subprocess.Popen([*TETHER, "--", *command], stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        code = proc.wait(30)
        return code, proc.stderr.read()
    finally:
        proc.stdin.close()
        proc.kill()


def test_the_tether_reports_exit_status_as_a_shell_does():
    assert _run_tethered(["sh", "-c", "exit 3"]) == (3, "")
    assert _run_tethered(["sh", "-c", "kill -KILL $$"]) == (137, "")
    code, err = _run_tethered(["/nonexistent/python"])
    assert code == 127 and "cannot start /nonexistent/python" in err


def test_the_tether_stops_the_whole_group_when_its_lifeline_closes(tmp_path):
    pids = tmp_path / "pids"
    # The task ignores SIGTERM and leaves a grandchild behind: SIGKILL after the grace takes both.
    task = f"trap '' TERM; sleep 300 & echo $$ $! > {pids}; wait"
    proc = subprocess.Popen([*TETHER, "--grace", "0.5", "--", "sh", "-c", task], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
    try:
        deadline = time.monotonic() + 10
        while not (pids.exists() and len(pids.read_text().split()) == 2) and time.monotonic() < deadline:
            time.sleep(0.05)
        shell, sleeper = map(int, pids.read_text().split())
        proc.stdin.close()  # the coordinator went away
        assert proc.wait(10) == 137
        assert b"lifeline closed" in proc.stderr.read()
        for pid in (shell, sleeper):
            assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    finally:
        proc.kill()


def test_sigterm_to_the_tether_is_a_graceful_stop():
    proc = subprocess.Popen([*TETHER, "--grace", "5", "--", sys.executable, "-c",
                             "import signal, sys, time; signal.signal(signal.SIGTERM, lambda *a: sys.exit(0)); print('up', flush=True); time.sleep(60)"],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
    try:
        assert proc.stdout.readline() == b"up\n"
        start = time.monotonic()
        os.kill(proc.pid, signal.SIGTERM)
        assert proc.wait(10) == 0  # the task handled SIGTERM and exited cleanly, well within the grace
        assert time.monotonic() - start < 4
    finally:
        proc.kill()


def test_a_silent_lifeline_stops_the_task_after_the_heartbeat():
    """A node cut off from its coordinator hears nothing, though its SSH channel looks open."""
    proc = subprocess.Popen([*TETHER, "--grace", "0.5", "--heartbeat", "1", "--", "sleep", "60"], stdin=subprocess.PIPE,
                            stderr=subprocess.PIPE, start_new_session=True)
    try:
        for _ in range(8):  # beats keep it alive
            proc.stdin.write(b".")
            proc.stdin.flush()
            time.sleep(0.3)
        assert proc.poll() is None
        start = time.monotonic()
        assert proc.wait(10) == 143  # then silence: sleep ends by SIGTERM
        assert 0.5 < time.monotonic() - start < 5
        assert b"no heartbeat from the coordinator for 1 s" in proc.stderr.read()
    finally:
        proc.kill()
