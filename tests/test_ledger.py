"""`jobs`, `logs` and `cancel` ask one ledger: a record's number goes to picluster's own records,
``slurm:ID`` to Slurm's queue when the inventory has a [slurm] table, and the commands never ask
which."""

import ast
import io
import tomllib
from pathlib import Path

import pytest

from picluster.jobs.ledger import Ledger, Queue, Records
from picluster.jobs.records import JobStore
from picluster.model.inventory import parse_inventory
from picluster.util.errors import UsageError

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


def test_the_listing_output_and_cancel_of_a_record(records):
    ledger = Ledger(None)
    assert ledger.listing(50, everyone=False) == (["no jobs yet"], None)
    job_id = records.create("montecarlo", "montecarlo")
    records.finish(job_id, "COMPLETED")
    shown, problem = ledger.listing(50, everyone=False)
    assert len(shown) == 1 and not isinstance(shown[0], str) and problem is None
    assert ledger.cancel(job_id) == f"job {job_id} is already COMPLETED; nothing to cancel"
    said: list[str] = []
    out = io.BytesIO()
    ledger.output(job_id, None, out, said.append)
    assert out.getvalue() == b"" and said == [f"job {job_id} (montecarlo) keeps no task logs"]


def test_the_commands_reach_jobs_only_through_the_ledger():
    tree = ast.parse((ROOT / "picluster" / "cli" / "jobs.py").read_text())
    reached = sorted({node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)
                      and node.module and node.module.startswith("picluster.jobs")})
    assert reached == ["picluster.jobs.ledger"]
