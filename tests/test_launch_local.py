"""picluster launch on the local cluster, end to end: both examples, killed workers, a killed ps,
Ctrl-C and cancel, a task that dies at start, and the built-in jobs in the same records."""

import json
import signal
import time

import psutil
import pytest

from picluster.util import tflog

from conftest import picluster, server_processes
from launch_fixtures import EXAMPLES, job_record, kill_worker_script, script_processes, tethers, wait_gone, write_script
from train_fixtures import TINY_MODEL, write_tiny_har

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    """One local cluster (1 ps + 2 workers) for the module, in its own state directory."""
    state = tmp_path_factory.mktemp("launch") / "state"
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("PICLUSTER_STATE_DIR", str(state))
        mp.delenv("PICLUSTER_INVENTORY", raising=False)
        up = picluster("cluster", "up", "--ps", "1", "--workers", "2")
        assert up.returncode == 0, up.stderr
        try:
            yield state
        finally:
            picluster("cluster", "down")
            left = server_processes(state) + server_processes(state, "picluster.monitor.agent")
            for proc in left:
                proc.kill()
            assert not left, "servers left running"


def _pid(state, label: str) -> int:
    return json.loads((state / "local" / "cluster.json").read_text())["pids"][label]


def _nothing_left(script: str) -> None:
    assert wait_gone(lambda: script_processes(script), 15) == []
    assert wait_gone(tethers, 15) == []


def test_coordinator_example_restarts_a_killed_worker_server_and_completes(launch, cluster):
    run = launch("--restart-limit", "1", EXAMPLES / "ps_coordinator.py", "--steps", "3000", "--log-every", "500")
    run.wait_for("chief: step 1/3000")
    # The chief (TF 2's coordinator) serves on its cluster address only, as every server does.
    chief = next(p for p in script_processes("ps_coordinator.py"))
    listening = {c.laddr.ip for c in chief.net_connections("inet") if c.status == psutil.CONN_LISTEN}
    assert listening and listening <= {"127.0.0.1", "::ffff:127.0.0.1"}, listening
    psutil.Process(_pid(cluster, "worker:1")).kill()
    assert run.finish() == 0, run.text()
    assert any("worker:1 on localhost stopped answering; restarting its server (restart 1 of 1)" in ln for ln in run.err), run.text()
    assert any(ln.startswith("chief: done: 3000 steps") for ln in run.out), run.text()
    assert any(ln.startswith("job ") and "COMPLETED" in ln and "1 restart(s)" in ln for ln in run.out)
    job = job_record(run.job_id())
    assert job.state == "COMPLETED" and job.restarts == 1 and job.mode == "coordinator"
    assert {t.label: t.exit_codes for t in job.tasks} == {"chief": [0], "worker:0": [], "worker:1": [None]}
    assert picluster("cluster", "status").returncode == 0  # the restarted worker is up
    logs = picluster("logs", job.id, "--task", "chief")
    assert logs.returncode == 0 and "done: 3000 steps" in logs.stdout and not logs.stdout.startswith("chief:")
    # TensorFlow's start-up lines stay in the task's log, off the terminal.
    assert not any(tflog.startup_line(ln.removeprefix("chief: ")) for ln in run.out + run.err), run.text()
    assert any(tflog.startup_line(ln) for ln in logs.stdout.splitlines()), logs.stdout[:2000]
    _nothing_left("ps_coordinator.py")


def test_each_worker_example_restarts_a_killed_worker_and_completes(launch, cluster):
    run = launch("--mode", "each-worker", "--restart-limit", "1", EXAMPLES / "between_graph.py", "--steps", "1200", "--log-every", "400")
    run.wait_for("worker 1: step 1 ")
    kill_worker_script("between_graph.py", 1)
    assert run.finish() == 0, run.text()
    # The summary folds what both workers printed alike; each keeps its own log.
    assert "  worker:[0-1]: done: global step 1200 reached" in run.out, run.text()
    job = job_record(run.job_id())
    assert job.state == "COMPLETED" and job.restarts == 1
    assert {t.label: t.exit_codes for t in job.tasks} == {"worker:0": [0], "worker:1": [137, 0]}
    streamed = picluster("logs", job.id).stdout
    assert "worker:1: picluster: exit code 137 (SIGKILL): restarting (restart 1 of 1)" in streamed
    assert "worker:0: done: global step 1200 reached" in streamed
    # between_graph.py sets TF_CPP_MIN_LOG_LEVEL=2, so whether TensorFlow prints start-up lines at
    # all depends on the machine's CPU; the coordinator test checks that they reach the log.
    assert not any(tflog.startup_line(ln.split(": ", 1)[-1]) for ln in run.out + run.err), run.text()
    _nothing_left("between_graph.py")


def test_ctrl_c_and_cancel_stop_every_task_even_one_that_ignores_sigterm(launch, cluster, tmp_path):
    stubborn = write_script(tmp_path / "stubborn.py", (
        "import signal, sys, time\n"
        "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
        "print('ready', flush=True)\n"
        "while True:\n    time.sleep(1)\n"))
    run = launch("--mode", "each-worker", "--grace", "1", stubborn)
    # Both ignore SIGTERM by now: a task still starting (a loaded machine) would end on it, 143.
    run.wait_for("worker:0: ready", 60)
    run.wait_for("worker:1: ready", 60)
    run.proc.send_signal(signal.SIGINT)
    assert run.finish(60) == 130, run.text()
    job = job_record(run.job_id())
    assert (job.state, job.reason) == ("CANCELLED", "interrupted (Ctrl-C)")
    assert {t.label: t.exit_codes for t in job.tasks} == {"worker:0": [137], "worker:1": [137]}  # SIGKILL after the grace
    _nothing_left("stubborn.py")

    run = launch("--mode", "each-worker", "--grace", "1", stubborn)
    run.wait_for("worker:0: ready", 60)
    run.wait_for("worker:1: ready", 60)
    cancel = picluster("cancel", run.job_id(), timeout=60)
    assert cancel.returncode == 0 and f"job {run.job_id()} CANCELLED: cancelled with 'picluster cancel'" in cancel.stdout, cancel.stderr
    assert run.finish(30) == 143
    _nothing_left("stubborn.py")
    again = picluster("cancel", run.job_id())
    assert again.returncode == 0 and "already CANCELLED" in again.stdout


def test_tasks_that_die_at_start_are_named_together_in_one_line(launch, cluster, tmp_path):
    broken = write_script(tmp_path / "broken.py", "import no_such_module_here\n")
    run = launch("--mode", "each-worker", "--restart-limit", "2", broken)
    assert run.finish(60) == 1, run.text()
    assert time.monotonic() - run.start < 30
    (line,) = run.error_lines()
    assert line == (f"picluster: error: job {run.job_id()} failed: localhost: worker:[0-1] exited (exit code 1): "
                    "ModuleNotFoundError: No module named 'no_such_module_here'; a permanent error (exit codes 1-127 are not retried)")
    assert job_record(run.job_id()).restarts == 0  # exit 1 is permanent: never retried


def test_run_and_train_are_recorded_beside_launched_jobs(cluster, tmp_path):
    mc = picluster("run", "montecarlo", "--samples", "1e6", "--nodes", "2", "--json")
    assert mc.returncode == 0, mc.stderr
    data = write_tiny_har(tmp_path / "har")
    train = picluster("train", "har", "--data-dir", data, "--run-dir", tmp_path / "run", *TINY_MODEL, "--epochs", "1", "--json", timeout=300)
    assert train.returncode == 0, train.stderr
    bad = picluster("run", "montecarlo", "--samples", "1e6", "--nodes", "3")
    assert bad.returncode == 2  # more workers than the cluster has: rejected, and not recorded
    jobs = picluster("jobs")
    rows = [line.split() for line in jobs.stdout.splitlines() if line.strip()[:1].isdigit()]
    montecarlo = [r for r in rows if r[1] == "montecarlo"]
    har = [r for r in rows if r[1] == "har"]
    assert len(montecarlo) == 1 and "COMPLETED" in montecarlo[0] and "localhost" in montecarlo[0], jobs.stdout
    assert len(har) == 1 and "COMPLETED" in har[0] and "worker:[0-1]=0" in har[0] and "sync" in har[0], jobs.stdout
    logs = picluster("logs", har[0][0], "--task", "worker:0")
    assert logs.returncode == 0 and "replica 0:" in logs.stdout


def test_a_killed_ps_fails_both_jobs_at_once_and_leaves_nothing(launch, cluster):
    """Last in the module: its ps stays dead.  Two jobs at once, one of each mode, on one ps."""
    coordinator = launch("--restart-limit", "3", EXAMPLES / "ps_coordinator.py", "--steps", "1000000", "--log-every", "100000")
    each = launch("--mode", "each-worker", "--restart-limit", "3", EXAMPLES / "between_graph.py", "--steps", "1000000", "--log-every", "100000")
    coordinator.wait_for("chief: step 1/")
    each.wait_for("worker 1: step 1 ")
    killed = time.monotonic()
    psutil.Process(_pid(cluster, "ps:0")).kill()
    for run in (coordinator, each):
        assert run.finish(60) == 1, run.text()
        lines = run.error_lines()
        assert len(lines) == 1 and "localhost: ps:0 stopped answering; the job cannot go on without its parameter server" in lines[0], run.text()
        assert job_record(run.job_id()).state == "FAILED"
    assert time.monotonic() - killed < 20  # a probe a second; a dead ps's job does not wait for its tasks' grace
    _nothing_left("ps_coordinator.py")
    _nothing_left("between_graph.py")
