"""The provision report at 80 columns: nodes with identical results fold into one row per node set
(as `clush -b` folds identical output), differing nodes get rows of their own, nothing truncated."""

from picluster.provision.report import fold_rows, show, table
from picluster.provision.result import Item, NodeReport, Status, StepResult
from picluster.provision.runner import run_order

from render import console, render, text

STEPS = list(run_order(None, slurm=False))  # an inventory without [slurm]


def node(name: str, changed: dict[str, int], seconds: float, failure: str | None = None, skip_nfs: bool = True) -> NodeReport:
    steps = []
    for step in STEPS:
        items = [Item("a", Status.OK, "fine")]
        items += [Item(f"c{i}", Status.CHANGED, f"{name} {step} {i}") for i in range(changed.get(step, 0))]
        if skip_nfs and step == "nfs-client":
            items.append(Item("mount", Status.SKIPPED, "no NFS support in this kernel"))
        steps.append(StepResult(step, items))
    report = NodeReport(name, steps, seconds=seconds)
    if failure:
        report.steps[-2].items.append(Item("venv", Status.FAILED, failure))
        report.failure = f"runtime venv: {failure}"
    return report


def sixteen() -> list[NodeReport]:
    master = {"hostname": 1, "raspi": 2, "nfs-server": 5, "nfs-client": 4, "ssh": 2, "runtime": 1, "firewall": 3}
    client = {k: v for k, v in master.items() if k != "nfs-server"}
    reports = [node("node01", master, 41.2)]
    reports += [node(f"node{i:02d}", client, 30.0 + i / 10) for i in range(2, 17)]
    # node02 still had the hostname Raspberry Pi Imager gave it: one change more.
    reports[1] = node("node02", {**client, "hostname": 3}, 31.0)
    reports[9] = node("node10", client, 12.5, failure="pip install: No space left on device")
    return reports


def test_sixteen_nodes_fold_into_a_row_per_node_set():
    groups = fold_rows(sixteen(), STEPS)
    assert [[r.name for r in g] for g in groups][:3] == [["node01"], ["node02"], ["node03", "node04", "node05", "node06",
                                                          "node07", "node08", "node09", "node11", "node12", "node13",
                                                          "node14", "node15", "node16"]]  # fmt: skip
    assert [g[0].name for g in groups] == ["node01", "node02", "node03", "node10"]


def test_the_table_reads_at_80_columns():
    out = render(table(sixteen(), STEPS), width=80)
    lines = out.splitlines()
    assert max(len(line) for line in lines) <= 80
    assert "…" not in out  # nothing cut
    rows = [line for line in lines if line.startswith("│ node")]
    assert [row.split("│")[1].strip() for row in rows] == ["node01", "node02", "node[03-09,11-16]", "node10"]
    assert "changed 18" in out and "changed 15" in out and "changed 13" in out
    cells = {row.split("│")[1].strip(): row.split("│")[3].strip() for row in rows}
    assert cells["node01"].startswith("hostname 1, raspi 2,") and "nfs-server" not in cells["node[03-09,11-16]"]
    body = " ".join(" ".join(line.split("│")[3].split()) for line in lines if line.startswith("│"))
    assert "nfs-server 5, nfs-client 4, ssh 2, runtime 1, firewall 3" in body and "hostname 3" in body
    assert "runtime failed: pip install: No space left on device" in body  # the differing node in full
    assert "30.3-31.6s" in out  # the folded nodes' times as a range
    assert len(lines) < 30, out


def test_show_prints_the_folded_skips_and_outcomes_below_the_table():
    out = console(80)
    show(out, sixteen(), STEPS)
    printed = text(out)
    assert "nfs-client mount: skipped (no NFS support in this kernel): node[01-16]" in printed
    assert "node[03-09,11-16]: changed (13)" in printed
    assert "node10: failed (runtime venv: pip install: No space left on device)" in printed


def test_an_all_ok_run_is_one_row_and_a_dry_run_says_would_change():
    quiet = [node(f"node{i:02d}", {}, 5.0, skip_nfs=False) for i in range(1, 17)]
    out = render(table(quiet, STEPS), width=80)
    assert [line.split("│")[1].strip() for line in out.splitlines() if line.startswith("│ node")] == ["node[01-16]"]
    assert "none" in out and "5.0s" in out
    planned = render(table([node("node01", {"ssh": 2}, 1.0)], STEPS, dry_run=True), width=80)
    assert "would change 2" in planned and "changes planned" in planned and "│ ssh 2 " in planned
