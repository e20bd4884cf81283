"""Job records in SQLite: states with reasons, exit codes per attempt, two commands at once."""

import contextlib
import json
import multiprocessing
import os
import signal
import sqlite3
import subprocess
import sys
import time

import psutil
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from picluster.jobs import record_schema
from picluster.jobs.records import JobStore, recorded
from picluster.util.errors import ClusterError, UsageError

from conftest import one_line, picluster


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


def test_tables_created_by_another_command_while_this_one_checks_are_not_taken_for_a_foreign_file(
        tmp_path, monkeypatch):
    """The race behind a first command refused at random: the schema check read the version (0),
    another first command then created the tables, and the check saw tables without a version."""
    path = tmp_path / "jobs.db"
    other = {"tried": False}
    real_connect = sqlite3.connect

    def racing_connect(*args, **kwargs):
        conn = real_connect(*args, **kwargs)

        def between(statement: str) -> None:
            if statement.startswith("SELECT name FROM sqlite_master") and not other["tried"]:
                other["tried"] = True  # the other first command creates the tables at the worst moment
                with (contextlib.suppress(sqlite3.OperationalError),  # held off until the check's reads end
                      contextlib.closing(real_connect(path, timeout=0.2, isolation_level=None)) as rival):
                    record_schema._create(rival)
        conn.set_trace_callback(between)
        return conn

    monkeypatch.setattr(sqlite3, "connect", racing_connect)
    job_id = JobStore(path).create("first", "launch")
    monkeypatch.undo()
    assert other["tried"], "the check never read the tables: this test no longer reaches the race"
    assert [j.id for j in JobStore(path).list()] == [job_id]


# -- the records are untrusted input ----------------------------------------------------------------

def test_a_foreign_database_is_named_and_left_untouched(tmp_path):
    path = tmp_path / "jobs.db"
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE jobs (id INTEGER PRIMARY KEY, title TEXT)")  # someone else's "jobs"
    conn.commit()
    conn.close()
    before = path.read_bytes()
    with pytest.raises(UsageError, match=r"not picluster's job records.*missing columns.*left as it is"):
        JobStore(path).list()
    with pytest.raises(UsageError):
        JobStore(path).create("x", "launch")
    assert path.read_bytes() == before and not (tmp_path / "jobs.db-wal").exists()


def test_a_newer_schema_is_named_and_never_relabelled(tmp_path):
    path = tmp_path / "jobs.db"
    JobStore(path).create("x", "launch")
    conn = sqlite3.connect(path)
    conn.execute("PRAGMA user_version = 7")
    conn.commit()
    conn.close()
    with pytest.raises(UsageError, match="newer picluster \\(schema 7"):
        JobStore(path).list()
    conn = sqlite3.connect(path)
    assert conn.execute("PRAGMA user_version").fetchone()[0] == 7
    conn.close()


def test_our_older_schema_is_upgraded_and_its_jobs_kept(tmp_path):
    path = tmp_path / "jobs.db"
    conn = sqlite3.connect(path)
    conn.executescript(_v1_schema())
    conn.execute("INSERT INTO jobs (name, kind, state, created) VALUES ('old', 'launch', 'COMPLETED', 1.0)")
    conn.execute("PRAGMA user_version = 1")
    conn.commit()
    conn.close()
    store = JobStore(path)
    assert [j.name for j in store.list()] == ["old"]
    assert store.get(store.create("new", "launch")).state == "PENDING"


def _v1_schema() -> str:
    from picluster.jobs import record_schema

    return record_schema._TABLES.replace(",\n    pid_cmdline TEXT", "")


@pytest.mark.parametrize("column, value, words", [
    ("command", "not json", "command is not JSON"),
    ("command", '{"a": 1}', "command is not a list of strings"),
    ("state", "SLEEPING", "state 'SLEEPING' is none of"),
    ("created", "yesterday", "created is 'yesterday', not a time"),
    ("restarts", -3, "restarts is -3"),
    ("name", b"\xff", "name is b'\\xff', not text"),
])
def test_a_damaged_row_is_named_by_job_id_and_the_rest_still_list(tmp_path, column, value, words):
    store = JobStore(tmp_path / "jobs.db")
    ids = [store.create(f"j{i}", "launch") for i in range(3)]
    for job_id in ids:
        store.finish(job_id, "COMPLETED")
    with store._tx() as db:
        db.execute(f"UPDATE jobs SET {column} = ? WHERE id = ?", (value, ids[1]))
    listed = store.list()
    assert [j.id for j in listed] == [ids[0], ids[2]]
    assert len(store.damaged) == 1 and store.damaged[0].startswith(f"job {ids[1]}: ") and words in store.damaged[0]
    with pytest.raises(UsageError, match=f"job {ids[1]}'s record .* is damaged"):
        store.get(ids[1])


def test_a_damaged_task_row_is_named_too(tmp_path):
    store = JobStore(tmp_path / "jobs.db")
    job_id = store.create("x", "launch")
    store.running(job_id, "localhost", [("chief", "localhost", "")])
    store.finish(job_id, "COMPLETED")
    with store._tx() as db:
        db.execute("UPDATE tasks SET exit_codes = ? WHERE job_id = ?", ('[0, "x"]', job_id))
    assert store.list() == [] and "a task's exit_codes is not a list of exit codes" in store.damaged[0]


def test_the_cli_lists_the_good_rows_and_names_the_damaged_one(state):
    store = JobStore(state / "jobs.db")
    good, bad = store.create("good", "launch"), store.create("bad", "launch")
    for job_id in (good, bad):
        store.finish(job_id, "COMPLETED")
    with store._tx() as db:
        db.execute("UPDATE jobs SET command = 'x' WHERE id = ?", (bad,))
    result = picluster("jobs")
    one_line(result, 2, f"job {bad}: command is not JSON")
    assert "good" in result.stdout


@pytest.mark.parametrize("args", [["jobs", "9223372036854775808"], ["jobs", "--limit", "99999999999999999999"],
                                  ["cancel", "9223372036854775808"], ["logs", "9223372036854775808"]])
def test_numbers_beyond_sqlites_integers_are_usage_errors(state, args):
    result = picluster(*args)
    assert result.returncode == 2 and "Traceback" not in result.stderr and "OverflowError" not in result.stderr, result.stderr
    assert "9223372036854775807" in result.stderr


def test_numbers_beyond_sqlites_integers_are_refused_by_the_store(tmp_path):
    with pytest.raises(UsageError, match="between 1 and 9223372036854775807"):
        JobStore(tmp_path / "jobs.db").get(2**63)
    with pytest.raises(UsageError, match="--limit"):
        JobStore(tmp_path / "jobs.db").list(2**64)


def test_a_state_directory_that_is_a_file_is_one_line(tmp_path, monkeypatch):
    (tmp_path / "state").write_text("")
    monkeypatch.setenv("PICLUSTER_STATE_DIR", str(tmp_path / "state" / "deeper"))
    one_line(picluster("jobs"), 2, "is not a directory")
    monkeypatch.setenv("PICLUSTER_STATE_DIR", str(tmp_path / "state"))
    one_line(picluster("jobs"), 2, "is not a directory")


def test_a_state_directory_that_cannot_be_made_is_one_line(monkeypatch):
    # sysfs refuses a new folder even to root: "Operation not permitted" (the disk's, not the user's fault)
    monkeypatch.setenv("PICLUSTER_STATE_DIR", "/sys/picluster-state")
    one_line(picluster("jobs"), 1, "cannot write /sys/picluster-state")


def test_cancel_never_signals_a_process_it_cannot_prove_is_the_job(state):
    """A RUNNING record without the coordinator's start time, whose pid is now an unrelated process."""
    store = JobStore(state / "jobs.db")
    bystander = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        job_id = store.create("x", "launch")
        store.running(job_id, "localhost")
        with store._tx() as db:
            db.execute("UPDATE jobs SET pid = ?, pid_start = NULL WHERE id = ?", (bystander.pid, job_id))
        result = picluster("cancel", job_id)
        assert "cannot find the job's process" in result.stdout + result.stderr, (result.stdout, result.stderr)
        assert bystander.poll() is None, "an unrelated process was signalled"
        job = store.get(job_id)
        assert job.state == "FAILED" and job.reason.startswith("cannot find the job's process")
    finally:
        bystander.kill()
        bystander.wait()


def test_cancel_without_a_recorded_command_line_signals_nothing_and_marks_the_record(state):
    """Pid and start time match (a record of the older schema, say) but no command line: not proven."""
    store = JobStore(state / "jobs.db")
    bystander = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        job_id = store.create("x", "launch")
        store.running(job_id, "localhost")
        with store._tx() as db:
            db.execute("UPDATE jobs SET pid = ?, pid_start = ?, pid_cmdline = NULL WHERE id = ?",
                       (bystander.pid, psutil.Process(bystander.pid).create_time(), job_id))
        one_line(picluster("cancel", job_id), 1, "cannot find the job's process", "marked FAILED")
        assert bystander.poll() is None, "an unrelated process was signalled"
        assert store.get(job_id).state == "FAILED"
    finally:
        bystander.kill()
        bystander.wait()


# -- property: whatever a row holds, reading lists it or names it ------------------------------------

_ANY_VALUE = st.one_of(st.none(), st.integers(min_value=-(2**63), max_value=2**63 - 1), st.floats(allow_nan=True),
                       st.text(max_size=30), st.binary(max_size=10), st.sampled_from(['[]', '["a"]', '[1, null]', '{}', 'null']))


@given(values=st.dictionaries(st.sampled_from(["name", "kind", "mode", "state", "reason", "command", "log_dir", "pid",
                                                "pid_start", "created", "started", "ended", "restarts",
                                                "cancel_requested", "pid_cmdline"]), _ANY_VALUE, max_size=5),
       codes=_ANY_VALUE)
@settings(suppress_health_check=[HealthCheck.function_scoped_fixture])
def test_any_row_is_listed_or_named_never_a_traceback(tmp_path_factory, values, codes):
    store = JobStore(tmp_path_factory.mktemp("db") / "jobs.db")
    keep = store.create("keep", "launch")
    store.finish(keep, "COMPLETED")
    odd = store.create("odd", "launch")
    store.running(odd, "localhost", [("chief", "localhost", "")])
    with store._tx() as db:
        for column, value in values.items():
            try:
                db.execute(f"UPDATE jobs SET {column} = ? WHERE id = ?", (value, odd))
            except sqlite3.IntegrityError:
                pass  # NOT NULL: SQLite itself refuses
        try:
            db.execute("UPDATE tasks SET exit_codes = ? WHERE job_id = ?", (codes, odd))
        except sqlite3.IntegrityError:
            pass
    listed = store.list()
    assert keep in [j.id for j in listed]
    assert (odd in [j.id for j in listed]) != any(d.startswith(f"job {odd}: ") for d in store.damaged)
    for job in listed:
        assert isinstance(job.command, list) and all(isinstance(c, str) for c in job.command)
        assert job.state in ("PENDING", "RUNNING", "COMPLETED", "FAILED", "CANCELLED")
        assert all(c is None or isinstance(c, int) for t in job.tasks for c in t.exit_codes)
