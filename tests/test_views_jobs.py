"""The job views: the jobs table, one job's tasks, a launched job's closing summary."""

from pathlib import Path

from picluster.jobs.launch.launcher import Outcome
from picluster.jobs.records import JobRecord, TaskRecord
from picluster.views.jobs import duration, exit_codes, job_detail, jobs_table, print_outcome

from render import console, render, text


def _job(job_id, state, reason="", tasks=()):
    return JobRecord(job_id, "between_graph", "launch", "each-worker", state, reason, "local", "node[02-04]", [], "/logs",
                     123, 1_800_000_000.0, 1_800_000_001.0, 1_800_000_062.0, 1, None, list(tasks))


def test_exit_codes_fold_tasks_that_ended_alike():
    assert exit_codes({"worker:0": [0], "worker:1": [137, 0], "worker:2": [0], "worker:3": [0]}) == "worker:[0,2-3]=0 worker:1=137,0"
    assert exit_codes({"chief": [None], "worker:0": []}) == "chief=?"
    assert exit_codes({}) == "-"
    assert (duration(61.4), duration(3725), duration(None)) == ("1:01", "1:02:05", "-")


def test_jobs_table_has_state_reason_and_codes():
    tasks = [TaskRecord("worker:0", "node02", "", "COMPLETED", [0]), TaskRecord("worker:1", "node03", "", "FAILED", [1])]
    out = render(jobs_table([_job(4, "COMPLETED"), _job(5, "FAILED", "job 5 failed: node03: worker:1 exited (exit code 1)", tasks)]),
                 width=200)
    rows = [line for line in out.splitlines() if line.strip()[:1].isdigit()]
    assert len(rows) == 2
    assert "COMPLETED" in rows[0] and "1:01" in rows[0]
    assert "FAILED" in rows[1] and "worker:0=0 worker:1=1" in rows[1] and "exit code 1" in rows[1]


def test_job_detail_lists_every_task():
    out = render(job_detail(_job(5, "CANCELLED", "interrupted (Ctrl-C)", [TaskRecord("worker:0", "node02", "/logs/worker-0.log", "CANCELLED", [143])])), 120)
    assert "job 5 between_graph: CANCELLED (interrupted (Ctrl-C))" in out
    assert "worker:0" in out and "143" in out and "/logs/worker-0.log" in out


def test_outcome_prints_state_codes_and_folded_lines():
    out = console(100)
    outcome = Outcome(9, "COMPLETED", "", 41.26, 1, {"worker:0": [0], "worker:1": [137, 0]},
                      ["node[02-03]: done: global step 400 reached", "node02: worker 0: 209 steps"], Path("/state/jobs/9"))
    print_outcome(outcome, out)
    lines = text(out).splitlines()
    assert lines[0] == "job 9 COMPLETED in 41.3 s, 1 restart(s): exit codes worker:0=0 worker:1=137,0"
    assert lines[2] == "  node[02-03]: done: global step 400 reached"
    assert lines[-1].startswith("logs: picluster logs 9")
