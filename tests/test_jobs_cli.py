"""`jobs`, `logs` and `cancel` as a person and a script type them: the listing piped to a program
(JSON, sacct -P's lines, the table one row per line), filters, `logs -f` ending with its job and
its status, `cancel` of several jobs asking first, `jobs --watch` printing each change.

The jobs here are real records with a real coordinator process each (a small Python program that
records its job as `picluster launch` does and ends on SIGTERM as picluster's commands do), so no
TensorFlow server starts: unit tests, seconds each.  Slurm's side: tests/test_slurm_rows.py, and
for real tests/test_slurm_lab.py."""

import json
import os
import pty
import queue
import shlex
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from picluster.jobs.records import JobStore

from conftest import command_line, picluster

pytestmark = pytest.mark.unit

# A job's coordinator: records the job (RUNNING, one task with its log), writes a first line,
# waits for the gate file, writes a second line, then ends as asked; SIGTERM ends it as
# `picluster cancel` expects (CANCELLED).
COORDINATOR = """
import signal, sys, time
from pathlib import Path
from picluster.jobs.records import recorded
from picluster.util.errors import ClusterError
signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))
name, log, gate, end = sys.argv[1:5]
with recorded(name, "launch", mode="each-worker", cluster="local") as job:
    job.running("localhost", [("worker:0", "localhost", log)])
    with open(log, "a") as f:
        print("first line", file=f, flush=True)
        while not Path(gate).exists():
            time.sleep(0.05)
        print("second line | with a bar", file=f, flush=True)
    if end == "fail":
        raise ClusterError("worker:0 exited (exit code 3)")
"""


@pytest.fixture
def env(tmp_path, monkeypatch):
    state = tmp_path / "state"
    monkeypatch.setenv("PICLUSTER_STATE_DIR", str(state))
    monkeypatch.delenv("PICLUSTER_INVENTORY", raising=False)
    return os.environ.copy()


class Coordinators:
    """Jobs run by coordinator processes, each stopped at the end of the test."""

    def __init__(self, tmp_path: Path) -> None:
        self.tmp = tmp_path
        self.script = tmp_path / "coordinator.py"
        self.script.write_text(COORDINATOR)
        self.procs: list[subprocess.Popen] = []

    def start(self, name: str, end: str = "complete") -> tuple[int, Path]:
        """The job's id once it runs, and its gate (create it to let the job end)."""
        index = len(self.procs)
        gate = self.tmp / f"gate-{index}"
        before = {j.id for j in JobStore().list()}
        self.procs.append(subprocess.Popen([sys.executable, str(self.script), name, str(self.tmp / f"job-{index}.log"), str(gate), end]))
        deadline = time.monotonic() + 60
        while True:
            running = [j for j in JobStore().list() if j.id not in before and j.state == "RUNNING"]
            if running:
                return running[0].id, gate
            assert time.monotonic() < deadline, "the coordinator did not record its job"
            time.sleep(0.05)

    def stop(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                proc.kill()
            proc.wait()


@pytest.fixture
def jobs(tmp_path, env):
    made = Coordinators(tmp_path)
    yield made
    made.stop()


def piped(*args, into: str, env) -> subprocess.CompletedProcess:
    """`picluster ARGS | INTO`, as a shell runs it."""
    line = f"{shlex.join(command_line(*args))} | {into}"
    return subprocess.run(["bash", "-o", "pipefail", "-c", line], capture_output=True, text=True, env=env, timeout=120)


def ended_records(store: JobStore) -> list[int]:
    """Three ended jobs: COMPLETED, FAILED with a reason, CANCELLED; their ids."""
    ids = []
    for name, state, reason in [("montecarlo", "COMPLETED", ""), ("between_graph_of_a_long_name", "FAILED", "job 2 failed: node03: worker:1 exited (exit code 1)"),
                                ("har", "CANCELLED", "interrupted (Ctrl-C)")]:
        job_id = store.create(name, "launch" if name != "har" else "har", "sync")
        store.running(job_id, "node[02-04]", [("worker:0", "node02", ""), ("worker:1", "node03", "")])
        store.task_exited(job_id, "worker:1", 1 if state == "FAILED" else 0, state)
        store.finish(job_id, state, reason)
        ids.append(job_id)
    return ids


def test_the_listing_piped_is_json_for_a_program_and_one_whole_row_per_line_for_grep(env):
    ids = ended_records(JobStore())
    check = ("python3 -c 'import json, sys; d = json.load(sys.stdin); "
             "print(d[\"schema\"], *[j[\"id\"] + \"=\" + j[\"state\"] for j in d[\"jobs\"]], d[\"jobs\"][1][\"reason\"])'")
    done = piped("jobs", "--json", into=check, env=env)
    assert done.returncode == 0, done.stderr
    assert done.stdout == f"picluster.jobs/1 {ids[0]}=COMPLETED {ids[1]}=FAILED {ids[2]}=CANCELLED job 2 failed: node03: worker:1 exited (exit code 1)\n"
    # As typed, piped: the table without a width, one row per line, the names whole, times with their year.
    table = piped("jobs", into="cat", env=env).stdout.splitlines()
    assert table[0].split() == ["id", "name", "kind", "mode", "state", "nodes", "start", "elapsed", "exit", "codes", "reason"]
    assert len(table) == 4 and all(line == line.rstrip() for line in table), table
    assert table[2].split()[:6] == [str(ids[1]), "between_graph_of_a_long_name", "launch", "sync", "FAILED", "node[02-04]"]
    assert table[2].endswith("  worker:1=1  job 2 failed: node03: worker:1 exited (exit code 1)")
    year = JobStore().get(ids[0]).created
    assert time.strftime("%Y-%m-%dT", time.localtime(year)) in table[1]
    grepped = piped("jobs", into="grep FAILED", env=env)
    assert grepped.stdout.count("\n") == 1 and "between_graph_of_a_long_name" in grepped.stdout
    # sacct -P's form, and squeue -h's: awk and cut take the fields.
    lines = piped("jobs", "--parsable", into="cut -d'|' -f1,3,6", env=env).stdout.splitlines()
    assert lines == ["id|name|state", f"{ids[0]}|montecarlo|COMPLETED", f"{ids[1]}|between_graph_of_a_long_name|FAILED", f"{ids[2]}|har|CANCELLED"]
    assert picluster("jobs", "--parsable", "--noheader", env=env).stdout.splitlines()[0].startswith(f"{ids[0]}|")
    assert picluster("jobs", "--noheader", env=env).stdout.splitlines()[0].split()[:2] == [str(ids[0]), "montecarlo"]
    # One job: its tasks, in each form.
    detail = json.loads(picluster("jobs", str(ids[1]), "--json", env=env).stdout)
    assert detail["schema"] == "picluster.job/1" and detail["job"]["id"] == str(ids[1]) and [t["task"] for t in detail["tasks"]] == ["worker:0", "worker:1"]
    assert picluster("jobs", str(ids[1]), "--parsable", "--noheader", env=env).stdout.splitlines() == [
        f"{ids[1]}|worker:0|node02|FAILED||", f"{ids[1]}|worker:1|node03|FAILED|1|"]


def test_filters_choose_by_state_user_name_and_time(env):
    ids = ended_records(JobStore())
    me = picluster("jobs", "--json", env=env)
    user = json.loads(me.stdout)["jobs"][0]["user"]

    def listed(*args):
        done = picluster("jobs", "--parsable", "--noheader", *args, env=env)
        assert done.returncode == 0, done.stderr
        return [line.split("|")[0] for line in done.stdout.splitlines()]

    assert listed("--state", "f") == [str(ids[1])]
    assert listed("--state", "COMPLETED,ca") == [str(ids[0]), str(ids[2])]
    assert listed("--state", "cd", "--state", "cancelled") == [str(ids[0]), str(ids[2])]
    assert listed("--name", "between*") == [str(ids[1])]
    assert listed("--user", user) == [str(i) for i in ids] and listed("--user", "nobody-else") == []
    assert listed("--since", "1h") == [str(i) for i in ids] and listed("--since", "2099-01-01") == []
    said = picluster("jobs", "--user", "nobody-else", env=env)
    assert said.stdout == "picluster's own jobs: none match (user nobody-else)\n"
    bad = picluster("jobs", "--state", "done", env=env)
    assert bad.returncode == 2 and bad.stdout == "" and len(bad.stderr.splitlines()) == 1 and "--state done: not a job state" in bad.stderr
    both = picluster("jobs", "--json", "--parsable", env=env)
    assert both.returncode == 2 and both.stderr == "picluster: error: give one of --json and --parsable\n"
    job_and_filter = picluster("jobs", "1", "--state", "r", env=env)
    assert job_and_filter.returncode == 2 and "choose among the jobs listed" in job_and_filter.stderr


def read_lines(stream) -> "queue.Queue[str]":
    lines: queue.Queue[str] = queue.Queue()
    threading.Thread(target=lambda: [lines.put(line) for line in stream], daemon=True).start()
    return lines


def test_logs_follow_prints_as_the_job_writes_and_ends_with_it_and_its_status(jobs, env):
    job_id, gate = jobs.start("follows")
    follower = subprocess.Popen(command_line("logs", "-f", job_id), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    lines = read_lines(follower.stdout)
    assert lines.get(timeout=60) == "worker:0: first line\n"  # each task's lines after its label, as `logs` without -f
    assert follower.poll() is None  # the job runs: the follower waits for more
    gate.touch()
    assert lines.get(timeout=60) == "worker:0: second line | with a bar\n"
    assert follower.wait(60) == 0 and follower.stderr.read() == f"job {job_id} COMPLETED\n"
    # A job that fails: its lines, then its end, exit 1; the machine form says each line's task.
    failing, gate = jobs.start("fails", end="fail")
    gate.touch()
    done = picluster("logs", "-f", failing, "--parsable", env=env)
    assert done.returncode == 1, done.stderr
    assert done.stdout == "task|node|text\nworker:0|localhost|first line\nworker:0|localhost|second line | with a bar\n"
    assert done.stderr == f"job {failing} FAILED (worker:0 exited (exit code 3))\n"
    document = json.loads(picluster("logs", str(failing), "--json", env=env).stdout)
    assert document["schema"] == "picluster.logs/1" and document["state"] == "FAILED" and document["ended"] is True
    assert document["tasks"][0]["lines"] == ["first line", "second line | with a bar"]
    missing = picluster("logs", "-f", "999", "--parsable", env=env)  # nothing half written: not even the header
    assert missing.returncode == 2 and missing.stdout == "" and "no job 999" in missing.stderr


def answered(args, answer: str | None, env) -> subprocess.CompletedProcess:
    """The command run with a terminal for stdin and stderr (as a person types it), ``answer``
    typed at its prompt; None: it is not expected to ask."""
    main, side = pty.openpty()
    try:
        proc = subprocess.Popen(command_line(*args), stdin=side, stdout=subprocess.PIPE, stderr=side, env=env, text=True)
        os.close(side)
        said = b""
        if answer is not None:
            while b"go ahead?" not in said:
                chunk = os.read(main, 1024)
                assert chunk, said
                said += chunk
            os.write(main, answer.encode() + b"\n")
        out = proc.stdout.read()  # type: ignore[union-attr]
        code = proc.wait(120)
        try:
            while chunk := os.read(main, 1024):
                said += chunk
        except OSError:  # the terminal's other end closed with the command
            pass
    finally:
        os.close(main)
    return subprocess.CompletedProcess(args, code, out, said.decode(errors="replace").replace("\r\n", "\n"))


def test_cancel_of_several_jobs_asks_on_a_terminal_refuses_elsewhere_and_names_each(jobs, env):
    first, _ = jobs.start("one")
    second, _ = jobs.start("two")
    ended = ended_records(JobStore())[0]

    refused = picluster("cancel", first, second, env=env)  # not on a terminal, no --yes
    assert refused.returncode == 2 and refused.stdout == "" and refused.stderr == (
        f"picluster: error: cancel 2 jobs ({first}, {second}) cannot be undone: not on a terminal to ask, so nothing was done; add --yes to go ahead\n")
    said_no = answered(["cancel", first, second], "n", env)
    assert said_no.returncode == 2 and f"cancel 2 jobs ({first}, {second}): not confirmed, nothing was done" in said_no.stderr
    assert [JobStore().get(i).state for i in (first, second)] == ["RUNNING", "RUNNING"]

    # A filter chose them: asked too; yes stops each, and each is named.
    said_yes = answered(["cancel", "--state", "running"], "y", env)
    assert said_yes.returncode == 0, said_yes.stderr
    assert said_yes.stdout.splitlines() == [f"job {first} CANCELLED: cancelled with 'picluster cancel'",
                                            f"job {second} CANCELLED: cancelled with 'picluster cancel'"]
    nothing = picluster("cancel", "--state", "running", "--json", env=env)
    assert nothing.returncode == 0 and json.loads(nothing.stdout) == {"schema": "picluster.cancel/1", "jobs": []}
    # Named ones that ended already, with --yes and --json: said, not an error.
    again = picluster("cancel", first, ended, "--yes", "--json", env=env)
    assert again.returncode == 0, again.stderr
    assert [(j["id"], j["state"], j["stopped"]) for j in json.loads(again.stdout)["jobs"]] == [(str(first), "CANCELLED", False), (str(ended), "COMPLETED", False)]
    # One job named: no question, as before.
    third, _ = jobs.start("three")
    one = answered(["cancel", third], None, env)
    assert one.returncode == 0 and one.stdout == f"job {third} CANCELLED: cancelled with 'picluster cancel'\n"
    alone = picluster("cancel", env=env)
    assert alone.returncode == 2 and "say which jobs: give their ids (12 slurm:40), or choose them with --state" in alone.stderr


def test_watch_not_on_a_terminal_prints_the_listing_each_time_it_changes(jobs, env):
    _, gate = jobs.start("watched")
    watcher = subprocess.Popen(command_line("jobs", "--watch", "--interval", "0.5", "--json"), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               text=True, env=env)
    try:
        lines = read_lines(watcher.stdout)
        first = json.loads(lines.get(timeout=60))  # JSON Lines: one document a line
        assert first["schema"] == "picluster.jobs/1" and [j["state"] for j in first["jobs"]] == ["RUNNING"]
        gate.touch()
        while (now := json.loads(lines.get(timeout=60)))["jobs"][0]["state"] == "RUNNING":
            pass  # a running job's elapsed time changes the listing too
        assert now["jobs"][0]["state"] == "COMPLETED"
        watcher.send_signal(signal.SIGINT)
        assert watcher.wait(60) == 0 and watcher.stderr.read() == ""
    finally:
        if watcher.poll() is None:
            watcher.kill()
            watcher.wait()
