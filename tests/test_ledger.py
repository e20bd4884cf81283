"""`jobs`, `logs` and `cancel` ask one ledger: a record's number goes to picluster's own records,
``slurm:ID`` to Slurm's queue when the inventory has a [slurm] table, and the commands never ask
which."""

import ast
import io
import tomllib
from pathlib import Path

import psutil
import pytest

from picluster.jobs.filters import Filter
from picluster.jobs.ledger import Ledger, Queue, Records
from picluster.jobs.records import JobStore
from picluster.model.inventory import parse_inventory
from picluster.util.errors import UsageError
from picluster.views.jobs import queue_listing

from render import render

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parent.parent
NODES = '[cluster]\nname = "pis"\nuser = "pi"\nnodes = "node[01-04]"\naddresses = "127.0.0.[11-14]"\n'


@pytest.fixture
def records(tmp_path, monkeypatch):
    monkeypatch.setenv("PICLUSTER_STATE_DIR", str(tmp_path / "state"))
    return JobStore()


def test_a_number_is_a_record_and_slurm_ids_need_an_inventory_with_a_slurm_table(records):
    assert isinstance(Ledger(None).source(7)[0], Records)
    plain = parse_inventory(tomllib.loads(NODES))
    for inventory in (None, plain):
        with pytest.raises(UsageError, match=r"^slurm:5 is a Slurm job: give the inventory with the \[slurm\] table"):
            Ledger(inventory).source("slurm:5")
    source, number = Ledger(parse_inventory(tomllib.loads(NODES + '[slurm]\npartition = "lab"\n'))).source("slurm:5")
    assert isinstance(source, Queue) and number == "5" and source.partition == "lab"


def test_the_listing_output_and_cancel_of_a_record(records, tmp_path):
    ledger = Ledger(None)
    (empty,) = ledger.listing(50, everyone=False)
    assert empty.rows == [] and render(empty.human[0]) == "no jobs yet\n" and ledger.problem() is None
    job_id = records.create("montecarlo", "montecarlo")
    records.finish(job_id, "COMPLETED")
    (shown,) = ledger.listing(50, everyone=False)
    assert [row["id"] for row in shown.rows] == [str(job_id)] and ledger.problem() is None
    (done,) = ledger.cancel(ledger.targets([job_id], Filter()))
    assert (done.said, done.error) == (f"job {job_id} is already COMPLETED; nothing to cancel", None)
    said: list[str] = []
    out = io.TextIOWrapper(io.BytesIO(), encoding="utf-8")
    ledger.output(job_id, None, out, said.append)
    out.flush()
    assert out.buffer.getvalue() == b"" and said == [f"job {job_id} (montecarlo) keeps no task logs"]
    log = tmp_path / "worker-0.log"
    log.write_bytes(b"first\n\xff raw\n")
    logged = records.create("launch", "launch")
    records.running(logged, "localhost", [("worker:0", "localhost", str(log))])
    ledger.output(logged, "worker:0", out, said.append)  # one task's log: its bytes as they are
    assert out.buffer.getvalue() == b"first\n\xff raw\n"


def test_a_job_of_another_user_is_its_one_line_not_a_traceback(records, monkeypatch):
    """psutil's AccessDenied is not a PermissionError.  A stand-in for the other user's coordinator:
    the tests run as root, which may signal any process."""
    job_id = records.create("montecarlo", "montecarlo")

    class OtherUsersCoordinator:
        pid = records.get(job_id).pid

        def send_signal(self, sig):
            raise psutil.AccessDenied(self.pid)

    monkeypatch.setattr(JobStore, "cancel_target", lambda self, job: OtherUsersCoordinator())
    ledger = Ledger(None)
    (done,) = ledger.cancel(ledger.targets([job_id], Filter()))
    assert done.said == f"job {job_id} runs as another user (pid {OtherUsersCoordinator.pid}); cancel it as that user"
    assert done.error is not None and done.state == done.was == "PENDING"


def test_the_records_are_shown_before_slurms_queue_is_asked(records):
    ledger = Ledger(parse_inventory(tomllib.loads(NODES + '[slurm]\npartition = "lab"\n')))
    shown = ledger.listing(50, everyone=False)
    assert next(shown).rows == []

    def unreachable(limit, everyone, chosen):
        raise UsageError("cannot reach the controller")

    ledger.queue.listing = unreachable  # type: ignore[union-attr,method-assign]
    with pytest.raises(UsageError, match="cannot reach"):
        next(shown)


def test_task_is_refused_for_a_slurm_job_before_the_inventory_is_asked_for(records):
    with pytest.raises(UsageError, match=r"^--task is for picluster's own records; a Slurm job has one output file$"):
        Ledger(None).output("slurm:5", "chief", io.StringIO(), print)


def test_the_commands_reach_jobs_only_through_the_ledger():
    tree = ast.parse((ROOT / "picluster" / "cli" / "jobs.py").read_text())
    reached = sorted({node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)
                      and node.module and node.module.startswith("picluster.jobs")})
    assert reached == ["picluster.jobs.ledger"]


def test_what_the_listing_left_out_is_the_records_that_could_not_be_read(records):
    """Only the records can leave a job out (a damaged row); Slurm's queue answers whole, its
    unusable nodes among what it lists, or its error ends the listing: it has no problem to add."""
    good, bad = records.create("good", "launch"), records.create("bad", "launch")
    for job_id in (good, bad):
        records.finish(job_id, "COMPLETED")
    with records._tx() as db:
        db.execute("UPDATE jobs SET command = 'not json' WHERE id = ?", (bad,))
    ledger = Ledger(parse_inventory(tomllib.loads(NODES + '[slurm]\npartition = "lab"\n')))
    queue = queue_listing([], "Slurm queue", {}, ["not available: node04 (down)"])
    ledger.queue.listing = lambda limit, everyone, chosen: queue  # type: ignore[union-attr,method-assign]
    own, slurm = ledger.listing(50, everyone=False)
    assert [row["id"] for row in own.rows] == [str(good)] and own.meta["damaged"] == [f"job {bad}: command is not JSON"]
    assert slurm.human[1:] == ["not available: node04 (down)"]
    assert ledger.problem() == f"damaged records in {records.path}, not listed: job {bad}: command is not JSON"
