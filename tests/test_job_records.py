"""Job records in SQLite: states with reasons, exit codes per attempt, two commands at once."""

import json
import multiprocessing
import os
import signal
import subprocess
import sys
import time

import pytest

from picluster.errors import ClusterError, UsageError
from picluster.jobs.records import JobStore, recorded


@pytest.fixture
def store(tmp_path):
    return JobStore(tmp_path / "jobs.db")


def test_a_job_from_pending_to_completed(store):
    job_id = store.create("train", "launch", "each-worker", "local", ["picluster", "launch", "train.py"], "/logs")
    job = store.get(job_id)
    assert (job.state, job.mode, job.command, job.pid) == ("PENDING", "each-worker", ["picluster", "launch", "train.py"], os.getpid())
    assert job.elapsed_s is None
    store.running(job_id, "node[02-03]", [("worker:0", "node02", "/logs/worker-0.log"), ("worker:1", "node03", "/logs/worker-1.log")])
    store.task_exited(job_id, "worker:1", 137, "RUNNING")
    store.restarted(job_id, "worker:1")
    store.task_exited(job_id, "worker:1", 0, "COMPLETED")
    store.task_exited(job_id, "worker:0", 0, "COMPLETED")
    store.finish(job_id, "COMPLETED")
    job = store.get(job_id)
    assert job.state == "COMPLETED" and job.nodes == "node[02-03]" and job.restarts == 1
    assert {t.label: t.exit_codes for t in job.tasks} == {"worker:0": [0], "worker:1": [137, 0]}
    assert job.elapsed_s is not None and job.elapsed_s >= 0
    # An ended job stays ended: a late writer (a reaper, a second finish) changes nothing.
    store.finish(job_id, "FAILED", "late")
    assert store.get(job_id).state == "COMPLETED"


def test_unknown_job_and_task_are_usage_errors(store):
    with pytest.raises(UsageError, match="no job 7"):
        store.get(7)
    job_id = store.create("x", "launch")
    store.running(job_id, "localhost", [("chief", "localhost", "")])
    with pytest.raises(UsageError, match=r"no task worker:3 \(its tasks: chief\)"):
        store.get(job_id).task("worker:3")


def test_a_job_whose_coordinator_died_reads_failed(store):
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        job_id = store.create("x", "launch")
        # Recorded by that process: as if it had created the job, then been killed.
        with store._tx() as db:
            import psutil

            proc = psutil.Process(child.pid)
            db.execute("UPDATE jobs SET pid = ?, pid_start = ?, pid_cmdline = ? WHERE id = ?",
                       (child.pid, proc.create_time(), json.dumps(proc.cmdline()), job_id))
        assert store.get(job_id).state == "PENDING"
        child.send_signal(signal.SIGKILL)
        child.wait()
        job = store.get(job_id)
        assert job.state == "FAILED" and f"coordinator (pid {child.pid}) ended" in job.reason
    finally:
        child.kill()


def test_recorded_maps_how_the_block_ended(store):
    with recorded("ok", "montecarlo", store=store) as job:
        job.running("localhost")
    with pytest.raises(ClusterError), recorded("bad", "montecarlo", store=store) as job:
        job.running("localhost")
        raise ClusterError("node03: TensorFlow server not answering")
    with pytest.raises(KeyboardInterrupt), recorded("ctrl-c", "har", store=store) as job:
        job.running("localhost")
        raise KeyboardInterrupt
    with pytest.raises(SystemExit), recorded("term", "har", store=store) as job:
        job.running("localhost")
        raise SystemExit(143)
    states = {j.name: (j.state, j.reason) for j in store.list()}
    assert states == {"ok": ("COMPLETED", ""), "bad": ("FAILED", "node03: TensorFlow server not answering"),
                      "ctrl-c": ("CANCELLED", "interrupted (Ctrl-C)"), "term": ("CANCELLED", "stopped (exit 143)")}


def test_bad_input_before_the_job_ran_leaves_no_record(store):
    with pytest.raises(UsageError), recorded("rejected", "montecarlo", store=store):
        raise UsageError("--nodes 3 is more than the 2 workers")
    with pytest.raises(UsageError), recorded("kept", "launch", store=store, keep_rejected=True):
        raise UsageError("node03: staged files missing")
    with pytest.raises(UsageError), recorded("ran", "har", store=store) as job:
        job.running("node02")
        raise UsageError("node02: no data set")
    assert [(j.name, j.state) for j in store.list()] == [("kept", "FAILED"), ("ran", "FAILED")]


def test_cancel_request_names_the_reason(store):
    with pytest.raises(SystemExit), recorded("x", "launch", store=store) as job:
        store.request_cancel(job.id)
        raise SystemExit(143)
    assert store.list()[0].reason == "cancelled with 'picluster cancel'"


def test_a_damaged_database_is_one_line(tmp_path):
    path = tmp_path / "jobs.db"
    path.write_bytes(b"not a database at all, but long enough to be read as a header" * 100)
    with pytest.raises(UsageError, match="move the file away"):
        JobStore(path).list()


def _hammer(path: str, worker: int, jobs: int) -> None:
    store = JobStore(__import__("pathlib").Path(path))
    for i in range(jobs):
        job_id = store.create(f"w{worker}-{i}", "launch")
        store.running(job_id, "localhost", [("chief", "localhost", "")])
        store.task_exited(job_id, "chief", i, "COMPLETED")
        store.finish(job_id, "COMPLETED")
        store.list(5)


def test_many_commands_at_once_lose_nothing(tmp_path):
    """Eight processes creating, updating and reading jobs at the same time, on a fresh database."""
    path = tmp_path / "jobs.db"
    context = multiprocessing.get_context("spawn")
    procs = [context.Process(target=_hammer, args=(str(path), w, 15)) for w in range(8)]
    start = time.monotonic()
    for p in procs:
        p.start()
    for p in procs:
        p.join(120)
    assert all(p.exitcode == 0 for p in procs), [p.exitcode for p in procs]
    jobs = JobStore(path).list()
    assert len(jobs) == 120 and len({j.id for j in jobs}) == 120
    assert all(j.state == "COMPLETED" and j.tasks[0].exit_codes == [int(j.name.split("-")[1])] for j in jobs)
    assert time.monotonic() - start < 120
