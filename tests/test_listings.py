"""Every listing in its three forms (views/listing.py): the table fitted to 80 columns (names whole,
columns left out before any is cut), sacct -P's lines, the JSON document with its schema; and
`cluster status`, `lab status`, `top --once` and `inventory` piped as a script reads them."""

import json
import shlex
import subprocess
from pathlib import Path

import pytest

from picluster.cluster.base import TaskState
from picluster.lab.lab import HostStatus
from picluster.model.inventory import load_inventory
from picluster.model.nodestats import NodeRow, NodeStats
from picluster.views.inventory import inventory_listing
from picluster.views.labs import labs_listing
from picluster.views.listing import Column, Fitted, Listing, flat, iso, parsable_line
from picluster.views.panel import nodes_listing
from picluster.views.status import status_listing

from conftest import ROOT, command_line, picluster
from render import render

pytestmark = pytest.mark.unit


def widest(text: str) -> int:
    return max(len(line) for line in text.splitlines())


def test_a_table_leaves_columns_out_before_it_cuts_a_name_and_wraps_only_free_text():
    rows = [{"id": "7", "name": "a-name-of-forty-characters-kept-whole-ok", "kind": "launch", "extra": "x" * 30,
             "why": "a reason long enough to need several lines at this width"}]
    table = Fitted([Column("id", lambda r: r["id"]), Column("name", lambda r: r["name"]), Column("kind", lambda r: r["kind"], drop=1),
                    Column("extra", lambda r: r["extra"], drop=2), Column("why", lambda r: r["why"], wrap=True)], rows)
    narrow = render(table, 80)
    assert widest(narrow) <= 80 and "a-name-of-forty-characters-kept-whole-ok" in narrow and "launch" in narrow and "xxx" not in narrow
    assert "a reason long" in narrow and len(narrow.splitlines()) > 3  # the reason wrapped, under its own column
    wide = render(table, 200)
    assert "x" * 30 in wide and len(wide.splitlines()) == 3
    table.header = False
    assert not render(table, 200).startswith("id")
    assert render(Fitted([Column("id", lambda r: r["id"])], [], empty="no jobs yet"), 80) == "no jobs yet\n"


def test_parsable_fields_hold_no_line_break_and_a_bar_only_in_the_last():
    assert parsable_line(["a|b", "two\nlines", None, "last | keeps it"]) == "a b|two lines||last | keeps it"
    assert [flat(v) for v in (None, True, 1.5, 3.0, [1, 2], {"worker:0": [0], "ps:0": [137, 0]}, "x")] == [
        "", "true", "1.5", "3", "1,2", "worker:0=0 ps:0=137,0", "x"]
    listing = Listing("things/1", "things", ("a", "b"), [{"a": 1, "b": "x", "hidden": [1]}], meta={"of": "test"})
    assert listing.document() == {"schema": "picluster.things/1", "of": "test", "things": [{"a": 1, "b": "x", "hidden": [1]}]}
    assert list(listing.lines()) == ["a|b", "1|x"] and list(listing.lines(header=False)) == ["1|x"]
    assert iso(None) is None and iso(1_800_000_000.0)[:4] == "2027" and iso(1_800_000_000.0)[-6] in "+-"


def test_cluster_status_fits_80_columns_and_says_whether_every_task_is_up():
    log = Path("/home/pi/.local/state/picluster/local/a-folder-with-a-long-name/worker-1.log")
    states = [TaskState("ps:0", "localhost", "127.0.0.1:40001", "up", task=object(), pid=4242, log=log.with_name("ps-0.log")),  # type: ignore[arg-type]
              TaskState("worker:1", "localhost", "127.0.0.1:40002", "down", task=object(), log=log)]  # type: ignore[arg-type]
    listing = status_listing(states, "local")
    out = render(listing.human[0], 80)
    rows = [line.split() for line in out.splitlines() if line.startswith(("ps:0", "worker:1"))]
    assert widest(out) <= 80 and "a-folder-with-a-long" in out and [row[:5] for row in rows] == [
        ["ps:0", "localhost", "127.0.0.1:40001", "4242", "up"], ["worker:1", "localhost", "127.0.0.1:40002", "-", "down"]]
    document = listing.document()
    assert document["schema"] == "picluster.cluster/1" and document["up"] is False and document["tasks"][1]["log"] == str(log)
    remote = status_listing([TaskState("worker:0", "node02", "10.0.0.12:2222", "up", task=object())], "pis.toml")  # type: ignore[arg-type]
    assert render(remote.human[0], 80).splitlines()[0].split() == ["task", "node", "address", "state"] and remote.meta["up"]


def test_lab_status_top_and_inventory_fit_80_columns():
    hosts = [HostStatus(f"node{i:02d}", f"10.213.1.{10 + i}", f"netns pcl-7ff1-node{i:02d}", "running", "up", "tbf rate 300Mbit burst 32Kb",
                        "pi3b: 0.05 CPU, 1 GiB", {"memory": 258 * 2**20, "memory_peak": 356 * 2**20, "cpu_seconds": 4.0, "oom_kills": 1})
             for i in (1, 2)]
    labs = labs_listing([{"name": "7ff1", "subnet": "10.213.1.0/24", "phase": "up", "owner_pid": None, "title": "lab 7ff1: up"}], {"7ff1": hosts})
    out = render(labs.human[0], 80)
    assert widest(out) <= 80 and out.splitlines()[3].split()[:3] == ["node01", "10.213.1.11", "running"] and "258.0 (356.0)" in out
    assert labs.document()["hosts"][1] == {"lab": "7ff1", "host": "node02", "address": "10.213.1.12", "machine": "netns pcl-7ff1-node02",
                                           "state": "running", "link": "up", "shaping": "tbf rate 300Mbit burst 32Kb", "limits": "pi3b: 0.05 CPU, 1 GiB",
                                           "memory_bytes": 258 * 2**20, "memory_peak_bytes": 356 * 2**20, "cpu_seconds": 4.0, "oom_kills": 1}
    stats = NodeStats("node01", cpu_percent=[10.0, 30.0, 50.0, 70.0], load=(1.5, 1.0, 0.5), memory_used=2**30, memory_total=4 * 2**30,
                      temperature=61.0, tasks={"ps:0": "up"}, throttled=0x50005)
    top = nodes_listing([NodeRow("node01", ["ps", "nfs"], stats, 1500.0, 2.5e6, {"ps:0": "up", "worker:0": "up"}), NodeRow("node02", ["worker"], None)], "pis")
    assert widest(render(top.human[0], 80)) <= 80
    first, second = top.document()["nodes"]
    assert (first["cpu_percent"], first["load"], first["memory_total_bytes"], first["temperature_c"], first["throttled"]) == (
        40.0, [1.5, 1.0, 0.5], 4 * 2**30, 61.0, ["under_voltage", "throttled"])
    assert second["reachable"] is False and second["cpu_percent"] is None
    inventory = inventory_listing(load_inventory(ROOT / "examples" / "picluster.toml"))
    out = render(inventory.human[0], 80)
    assert widest(out) <= 80 and out.splitlines()[3].split()[:4] == ["node01", "192.168.1.16", "ps,nfs", "ps:0@2222"]


def piped_json(*args, env=None, cwd=ROOT) -> tuple[int, dict]:
    """`picluster ARGS | python3 -c 'json.load'`, as a shell runs it: the exit of picluster, and the document."""
    line = f"{shlex.join(command_line(*args))} | python3 -c 'import json, sys; print(json.dumps(json.load(sys.stdin)))'; exit ${{PIPESTATUS[0]}}"
    done = subprocess.run(["bash", "-c", line], capture_output=True, text=True, env=env, cwd=cwd, timeout=120)
    assert done.stdout, done.stderr
    return done.returncode, json.loads(done.stdout)


def test_the_other_listings_piped_are_json_for_a_program(state, tmp_path):
    code, status = piped_json("cluster", "status", "--json")
    assert code == 3 and status == {"schema": "picluster.cluster/1", "cluster": None, "up": False, "tasks": []}
    assert picluster("cluster", "status", "--parsable").stdout == "task|node|address|pid|state|log\n"
    code, top = piped_json("top", "--json")  # --json takes one snapshot, as --once
    assert code == 0 and top["schema"] == "picluster.top/1" and top["nodes"][0]["node"] == "localhost"
    code, labs = piped_json("lab", "status", "--json")
    assert code == 0 and labs["schema"] == "picluster.labs/1" and isinstance(labs["hosts"], list)
    example = ROOT / "examples" / "picluster.toml"
    code, nodes = piped_json("inventory", "-i", example, "--json")
    assert code == 0 and nodes["schema"] == "picluster.inventory/1" and nodes["cluster"] == "pi16" and len(nodes["nodes"]) == 16
    assert nodes["nodes"][0] == {"node": "node01", "address": "192.168.1.16", "host": None, "roles": ["ps", "nfs"], "tasks": ["ps:0"],
                                 "ports": {"ps:0": 2222}}
    lines = picluster("inventory", "-i", example, "--parsable").stdout.splitlines()
    assert lines[0] == "node|address|host|roles|tasks" and lines[2] == "node02|192.168.1.17||worker|worker:0"
    table = picluster("inventory", "-i", example).stdout.splitlines()
    assert table[0].startswith("cluster pi16: 16 nodes, user pi") and table[1].split() == ["node", "address", "roles", "tasks"] and len(table) == 18
    wrong = picluster("inventory", "-i", example, "--ansible", "--json")
    assert wrong.returncode == 2 and "--ansible writes YAML" in wrong.stderr
    out = picluster("inventory", "-i", example, "--out", tmp_path / "x.yml")
    assert out.returncode == 2 and out.stderr == "picluster: error: --out is for the Ansible inventory: add --ansible\n"


def test_the_manual_gives_every_field_of_every_schema_and_the_parsable_columns():
    """docs/scripting.md against the documents the code makes: each key, top-level or a row's, is
    named in its schema's section, and the table of listings gives each one's parsable fields."""
    import io
    import re

    from picluster.jobs.follow import Ended, Source
    from picluster.jobs.ledger import Cancelled
    from picluster.jobs.records import JobRecord, TaskRecord
    from picluster.jobs.slurm.rows import SlurmJob
    from picluster.views.jobs import cancel_listing, job_detail, merged, queue_listing, records_listing
    from picluster.views.logs import LOG_FIELDS, LogWriter

    record = JobRecord(3, "x", "launch", "sync", "FAILED", "why", "local", "node02", [], "/logs", 1, 1.0, 2.0, 3.0, 0, None,
                       [TaskRecord("worker:0", "node02", "/logs/w.log", "FAILED", [1])])
    slurm = {"cluster": "pis", "partition": "pis", "everyone": False, "unavailable": {}}
    writer_out = io.BytesIO()
    writer = LogWriter(writer_out, "json")
    writer.emit(Source("worker:0", "node02", "/logs/w.log"), b"a line\n")
    writer.end(Ended("3", "FAILED", "why", None))
    documents = {
        "jobs/1": merged([records_listing([record], "pi", [], ""),
                          queue_listing([SlurmJob("4", "pi", "RUNNING", "None", 1, "node01", "0:01", "1:00", "y")], "q", slurm, [])]),
        "job/1": job_detail(record, "pi"),
        "cancel/1": cancel_listing([Cancelled("3", "RUNNING", "CANCELLED", "job 3 CANCELLED")]),
        "cluster/1": status_listing([TaskState("ps:0", "localhost", "127.0.0.1:1", "up", task=object(), pid=1)], "local"),  # type: ignore[arg-type]
        "top/1": nodes_listing([NodeRow("node01", ["ps"], NodeStats("node01"))], "pis"),
        "labs/1": labs_listing([{"name": "ab12", "subnet": None, "phase": "up", "owner_pid": None, "title": "lab ab12"}],
                               {"ab12": [HostStatus("node01", "10.0.0.11", "n", "running", "up", "")]}),
        "inventory/1": inventory_listing(load_inventory(ROOT / "examples" / "picluster.toml")),
    }
    manual = (ROOT / "docs" / "scripting.md").read_text()
    listed = {m[0]: m[1].split() for m in re.findall(r"^\| `picluster [^|]*\| `picluster\.([a-z]+/\d)` \|[^|]*\| `([^`]*)` \|$", manual, re.M)}
    assert listed.pop("logs/1") == list(LOG_FIELDS)
    assert listed == {name: list(listing.fields) for name, listing in documents.items()}
    shown = {name: listing.document() for name, listing in documents.items()} | {"logs/1": json.loads(writer_out.getvalue())}
    assert set(shown["job/1"]["job"]) == set(shown["jobs/1"]["jobs"][0])  # "as in picluster.jobs/1"
    shown["job/1"]["job"] = None
    for name, document in shown.items():
        section = manual.split(f"### `picluster.{name}`")[1].split("\n## ")[0].split("\n### ")[0]
        keys = set(document)
        for value in document.values():
            for row in value if isinstance(value, list) else [value]:
                if isinstance(row, dict):
                    keys |= set(row)
        keys -= {node for node in ("node01", "ab12")}  # a row's values that happen to be objects keyed by data
        named = set(re.findall(r"`([a-z_]+)`", section))
        assert keys - named == set(), f"docs/scripting.md's {name} section does not name {sorted(keys - named)}"
