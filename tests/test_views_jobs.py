"""The job views: the jobs listing in its three forms, one job's tasks, cancel's lines, a launched
job's closing summary.  Tables are rendered at a fixed width (tests/render.py), 80 columns as a
terminal's."""

import json
from pathlib import Path

from picluster.jobs.launch.launcher import Outcome
from picluster.jobs.ledger import Cancelled
from picluster.jobs.records import JobRecord, TaskRecord
from picluster.jobs.slurm.rows import SlurmJob
from picluster.util.errors import UsageError
from picluster.views.jobs import (
    JOB_FIELDS,
    cancel_listing,
    duration,
    exit_codes,
    job_detail,
    merged,
    print_outcome,
    queue_listing,
    records_listing,
    slurm_detail,
)

from render import console, render, text

MOMENT = 1_800_000_000.0  # 2027-01-15, in whatever zone this machine is


def _job(job_id, state, reason="", tasks=(), name="between_graph"):
    return JobRecord(job_id, name, "launch", "each-worker", state, reason, "local", "node[02-04]", [], "/logs",
                     123, MOMENT, MOMENT + 1, MOMENT + 62, 1, None, list(tasks))


def _rows(out: str) -> list[str]:
    return [line for line in out.splitlines() if line.strip()[:1].isdigit() or line.startswith("slurm:")]


def test_exit_codes_fold_tasks_that_ended_alike():
    assert exit_codes({"worker:0": [0], "worker:1": [137, 0], "worker:2": [0], "worker:3": [0]}) == "worker:[0,2-3]=0 worker:1=137,0"
    assert exit_codes({"chief": [None], "worker:0": []}) == "chief=?"
    assert exit_codes({}) == "-"
    assert (duration(61.4), duration(3725), duration(None), duration(93784)) == ("1:01", "1:02:05", "-", "1-02:03:04")


def test_the_jobs_table_at_80_columns_keeps_names_whole_and_starts_with_their_date():
    tasks = [TaskRecord("worker:0", "node02", "", "COMPLETED", [0]), TaskRecord("worker:1", "node03", "", "FAILED", [1])]
    jobs = [_job(4, "COMPLETED", name="between_graph_with_a_long_name"),
            _job(5, "FAILED", "job 5 failed: node03: worker:1 exited (exit code 1); its last line: ValueError: bad shape", tasks)]
    listing = records_listing(jobs, "pi", [], "no jobs yet")
    out = render(listing.human[0], width=80)
    assert max(len(line) for line in out.splitlines()) <= 80, out
    rows = _rows(out)
    assert "between_graph_with_a_long_name" in rows[0] and "COMPLETED" in rows[0], out
    started = listing.rows[0]["started"]
    assert started[:19] in rows[0] and started[:4] == "2027", out  # ISO 8601, the year in it
    reason = listing.rows[1]["reason"]
    assert "FAILED" in rows[1] and all(word in out.split() for word in reason.split()), out  # wrapped, whole
    # Wider, the columns left out at 80 come back; the exit codes fold tasks alike.
    wide = render(listing.human[0], width=200)
    assert "worker:0=0 worker:1=1" in _rows(wide)[1] and "each-worker" in wide and "1:01" in wide


def test_a_job_row_is_the_same_schema_for_a_record_and_a_slurm_job():
    record = records_listing([_job(4, "COMPLETED")], "pi", [], "").rows[0]
    queued = SlurmJob("40", "alice", "PENDING", "Resources", 3, "", "0:00", "1-00:00:00", "sweep|with|bars", MOMENT)
    slurm = queue_listing([queued], "Slurm queue", {"partition": "pis"}, []).rows[0]
    assert list(record) == list(slurm) == list(JOB_FIELDS)
    assert record["id"] == "4" and record["user"] == "pi" and record["elapsed_s"] == 61.0 and record["exit_codes"] == {}
    assert slurm["id"] == "slurm:40" and slurm["reason"] == "Resources" and slurm["time_limit_s"] == 86400
    assert slurm["started"] is None and slurm["submitted"].startswith("2027-01-1")
    both = merged([records_listing([_job(4, "COMPLETED")], "pi", [], ""),
                   queue_listing([queued], "Slurm queue", {"partition": "pis"}, ["not available: node03 down"])])
    document = json.loads(both.json())
    assert document["schema"] == "picluster.jobs/1" and [j["id"] for j in document["jobs"]] == ["4", "slurm:40"]
    assert document["slurm"] == {"partition": "pis"} and document["damaged"] == []
    lines = list(both.lines())
    assert lines[0] == "|".join(JOB_FIELDS) and len(lines) == 3
    # A '|' in a name cannot shift the fields after it; the reason, last, keeps its own.
    assert lines[2].split("|")[:6] == ["slurm:40", "alice", "sweep with bars", "slurm", "", "PENDING"]
    assert lines[2].endswith("|Resources") and "not available: node03 down" in both.human


def test_slurms_table_shows_the_state_with_its_reason_and_fits_80_columns():
    jobs = [SlurmJob("40", "alice", "PENDING", "ReqNodeNotAvail, UnavailableNodes:node[02-03]", 3, "", "0:00", "10:00", "run-montecarlo"),
            SlurmJob("41", "bob", "RUNNING", "None", 2, "node[01-02]", "1:02", "UNLIMITED", "har", MOMENT, MOMENT)]
    out = render(queue_listing(jobs, "Slurm queue, partition pis on pis", {}, []).human[0], 80)
    assert max(len(line) for line in out.splitlines()) <= 80 and out.startswith("Slurm queue, partition pis on pis\n"), out
    rows = _rows(out)
    assert rows[0].split()[:4] == ["slurm:40", "run-montecarlo", "alice", "PENDING"] and "ReqNodeNotAvail" in out
    assert rows[1].split()[:5] == ["slurm:41", "har", "bob", "RUNNING", "node[01-02]"] and "(None)" not in out


def test_job_detail_lists_every_task():
    job = _job(5, "CANCELLED", "interrupted (Ctrl-C)", [TaskRecord("worker:0", "node02", "/logs/worker-0.log", "CANCELLED", [143])])
    listing = job_detail(job, "pi")
    out = render(listing.human[0], 120)
    assert out.startswith("job 5 between_graph: CANCELLED (interrupted (Ctrl-C))\n")
    assert "worker:0" in out and "143" in out and "/logs/worker-0.log" in out
    document = listing.document()
    assert document["schema"] == "picluster.job/1" and document["job"]["state"] == "CANCELLED"
    assert document["tasks"] == [{"job": "5", "task": "worker:0", "node": "node02", "state": "CANCELLED", "exit_codes": [143],
                                  "log": "/logs/worker-0.log"}]
    assert list(listing.lines(header=False)) == ["5|worker:0|node02|CANCELLED|143|/logs/worker-0.log"]
    slurm = slurm_detail(SlurmJob("40", "pi", "FAILED", "NonZeroExitCode", 1, "node02", "0:01", "1:00", "fails",
                                  batch_host="node02", exit_code=3), "Slurm job 40")
    assert slurm.document()["tasks"][0] == {"job": "slurm:40", "task": "batch", "node": "node02", "state": "FAILED",
                                            "exit_codes": [3], "log": None}


def test_cancel_names_each_job_and_leaves_what_failed_to_its_error():
    refused = UsageError("slurm:41 is bob's job: only its owner, or the cluster's operator (pi), can cancel it")
    done = [Cancelled("12", "RUNNING", "CANCELLED", "job 12 CANCELLED: cancelled with 'picluster cancel'"),
            Cancelled("slurm:40", "COMPLETED", "COMPLETED", "slurm:40 is already COMPLETED; nothing to cancel"),
            Cancelled("slurm:41", "RUNNING", "RUNNING", str(refused), refused)]
    listing = cancel_listing(done)
    assert listing.human == ["job 12 CANCELLED: cancelled with 'picluster cancel'", "slurm:40 is already COMPLETED; nothing to cancel"]
    assert [(r["id"], r["stopped"], r["error"] is None) for r in listing.rows] == [
        ("12", True, True), ("slurm:40", False, True), ("slurm:41", False, False)]


def test_outcome_prints_state_codes_and_folded_lines():
    out = console(100)
    outcome = Outcome(9, "COMPLETED", "", 41.26, 1, {"worker:0": [0], "worker:1": [137, 0]},
                      ["node[02-03]: done: global step 400 reached", "node02: worker 0: 209 steps"], Path("/state/jobs/9"))
    print_outcome(outcome, out)
    lines = text(out).splitlines()
    assert lines[0] == "job 9 COMPLETED in 41.3 s, 1 restart(s): exit codes worker:0=0 worker:1=137,0"
    assert lines[2] == "  node[02-03]: done: global step 400 reached"
    assert lines[-1].startswith("logs: picluster logs 9")
