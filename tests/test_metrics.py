"""The node agent's metrics page: node_exporter's names where they overlap, promtool-clean, task states."""

import json
import re
import shutil
import socket
import subprocess
from pathlib import Path

from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from picluster.model.inventory import AGENT_PORT, load_inventory
from picluster.monitor.agent import read_meminfo, registry_for

ROOT = Path(__file__).resolve().parents[1]
DASHBOARD = ROOT / "docs" / "grafana" / "picluster-tasks.json"

# What node_exporter (1.x, collector/*_linux.go) exports under these names: type and label names.
# The "Node Exporter Full" dashboard (grafana.com 1860) reads them; its quick row needs each one.
NODE_EXPORTER = {
    "node_uname_info": ("gauge", {"sysname", "release", "version", "machine", "nodename", "domainname"}),
    "node_boot_time_seconds": ("gauge", set()),
    "node_time_seconds": ("gauge", set()),
    "node_load1": ("gauge", set()),
    "node_load5": ("gauge", set()),
    "node_load15": ("gauge", set()),
    "node_cpu_seconds_total": ("counter", {"cpu", "mode"}),
    "node_memory_MemTotal_bytes": ("gauge", set()),
    "node_memory_MemAvailable_bytes": ("gauge", set()),
    "node_memory_MemFree_bytes": ("gauge", set()),
    "node_memory_Cached_bytes": ("gauge", set()),
    "node_memory_Buffers_bytes": ("gauge", set()),
    "node_memory_SReclaimable_bytes": ("gauge", set()),
    "node_memory_SwapTotal_bytes": ("gauge", set()),
    "node_memory_SwapFree_bytes": ("gauge", set()),
    "node_network_receive_bytes_total": ("counter", {"device"}),
    "node_network_transmit_bytes_total": ("counter", {"device"}),
    "node_filesystem_size_bytes": ("gauge", {"device", "fstype", "mountpoint", "device_error"}),
    "node_filesystem_avail_bytes": ("gauge", {"device", "fstype", "mountpoint", "device_error"}),
    "node_filesystem_free_bytes": ("gauge", {"device", "fstype", "mountpoint", "device_error"}),
    "node_thermal_zone_temp": ("gauge", {"zone", "type"}),
}
CPU_MODES = {"user", "nice", "system", "idle", "iowait", "irq", "softirq", "steal"}


def page(node: str = "node02", cluster_file: Path | None = None, throttled: Path | None = None) -> str:
    if throttled is None:
        return generate_latest(registry_for(node, cluster_file)).decode()
    return generate_latest(registry_for(node, cluster_file, throttled)).decode()


def families(text: str) -> dict[str, tuple[str, list]]:
    """Sample name -> (family type, samples)."""
    out: dict[str, tuple[str, list]] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            out.setdefault(sample.name, (family.type, []))[1].append(sample)
    return out


def test_overlapping_metrics_carry_node_exporters_names_types_and_labels():
    found = families(page())
    for name, (kind, labels) in NODE_EXPORTER.items():
        if name == "node_thermal_zone_temp" and not list(Path("/sys/class/thermal").glob("thermal_zone*")):
            assert name not in found  # no zones here (a VM): none reported, as node_exporter does
            continue
        assert name in found, f"{name} missing"
        assert found[name][0] == kind, f"{name} is a {found[name][0]}, node_exporter's is a {kind}"
        for sample in found[name][1]:
            assert set(sample.labels) == labels, f"{name} labels {sorted(sample.labels)}"
    modes = {s.labels["mode"] for s in found["node_cpu_seconds_total"][1]}
    cpus = {s.labels["cpu"] for s in found["node_cpu_seconds_total"][1]}
    assert modes == CPU_MODES and cpus == {str(i) for i in range(len(cpus))}
    devices = {s.labels["device"] for s in found["node_network_receive_bytes_total"][1]}
    assert "lo" not in devices
    assert {s.labels["mountpoint"] for s in found["node_filesystem_size_bytes"][1]} == {"/"}
    # No sample of node_exporter's names carries our own labels: joins in its dashboard match on them.
    for name, (_, samples) in found.items():
        if name.startswith("node_"):
            assert all("node" not in s.labels for s in samples), name
    # Values are the node's own: MemTotal is /proc/meminfo's.
    assert found["node_memory_MemTotal_bytes"][1][0].value == read_meminfo()["MemTotal"]
    assert len(found["node_cpu_seconds_total"][1]) == len(cpus) * len(CPU_MODES)


def test_only_task_states_and_what_node_exporter_lacks_are_picluster_metrics():
    names = set(families(page()))
    ours = {n for n in names if not n.startswith("node_")}
    # rpi_* only on a Pi (its firmware's throttled bits; see the MOCK firmware file test).
    assert all(n.startswith("picluster_") for n in ours), ours
    assert "picluster_node_info" in names
    assert not any(n.startswith("picluster_cpu") or n.startswith("picluster_memory") or n.startswith("picluster_load")
                   for n in names)  # the old names are gone


def test_promtool_finds_nothing_to_lint_but_node_exporters_own_meminfo_names():
    promtool = shutil.which("promtool")
    assert promtool, "promtool is missing: scripts/lab-deps.sh installs it (Debian package prometheus)"
    result = subprocess.run([promtool, "check", "metrics"], input=page(), capture_output=True, text=True, timeout=30)
    problems = [line for line in (result.stdout + result.stderr).splitlines() if line.strip()]
    # node_exporter names /proc/meminfo's fields as the kernel does (node_memory_MemAvailable_bytes),
    # which promtool's style lint flags for node_exporter too; the dashboards need exactly those names.
    camel = re.compile(r"^node_memory_\w+_bytes metric names should be written in 'snake_case' not 'camelCase'$")
    assert [p for p in problems if not camel.match(p)] == []
    assert len(problems) < len(read_meminfo())  # not every field: MemTotal-style ones only
    broken = page() + "# HELP picluster_bad A counter without _total.\n# TYPE picluster_bad counter\npicluster_bad 1\n"
    check = subprocess.run([promtool, "check", "metrics"], input=broken, capture_output=True, text=True, timeout=30)
    assert "picluster_bad" in check.stdout + check.stderr  # the lint does read the whole page


def test_task_states_are_this_nodes_tasks_probed(tmp_path):
    listening = socket.socket()
    listening.bind(("127.0.0.1", 0))
    listening.listen()
    closed = socket.socket()
    closed.bind(("127.0.0.1", 0))  # bound, not listening: connections are refused
    try:
        layout = [
            {"job": "ps", "index": 0, "node": "node01", "host": "127.0.0.1", "port": listening.getsockname()[1]},
            {"job": "worker", "index": 0, "node": "node02", "host": "127.0.0.1", "port": listening.getsockname()[1]},
            {"job": "worker", "index": 1, "node": "node02", "host": "127.0.0.1", "port": closed.getsockname()[1]},
        ]
        cluster = tmp_path / "cluster.json"
        cluster.write_text(json.dumps({"layout": layout}))
        samples = families(page("node02", cluster))["picluster_task_up"][1]
    finally:
        listening.close()
        closed.close()
    states = {(s.labels["tf_job"], s.labels["tf_task"]): s.value for s in samples}
    assert states == {("worker", "0"): 1.0, ("worker", "1"): 0.0}  # node01's ps is not this node's
    assert all(s.labels["node"] == "node02" for s in samples)
    # A damaged or missing cluster file gives no tasks, never a failed scrape.
    cluster.write_text("{not json")
    assert "picluster_task_up" not in families(page("node02", cluster))
    assert "picluster_task_up" not in families(page("node02", tmp_path / "missing.json"))


def test_a_pis_throttled_bits_are_rpi_throttled_by_condition_and_period(tmp_path):
    # MOCK: no machine here has a Pi's firmware; this file stands in for its sysfs get_throttled,
    # written as the driver writes it (hex without 0x).  0x50005: under-voltage and throttled now,
    # and both since boot.
    mock = tmp_path / "MOCK-soc-firmware-get_throttled"
    mock.write_text("50005\n")
    text = page(throttled=mock)
    found = families(text)
    assert found["rpi_throttled_status"][0] == "gauge" and found["rpi_throttled_status"][1][0].value == 0x50005
    flags = {(s.labels["condition"], s.labels["period"]): s.value for s in found["rpi_throttled"][1]}
    assert flags == {("under_voltage", "now"): 1.0, ("freq_capped", "now"): 0.0, ("throttled", "now"): 1.0,
                     ("soft_temp_limit", "now"): 0.0, ("under_voltage", "since_boot"): 1.0,
                     ("freq_capped", "since_boot"): 0.0, ("throttled", "since_boot"): 1.0,
                     ("soft_temp_limit", "since_boot"): 0.0}
    lint = subprocess.run([shutil.which("promtool") or "promtool", "check", "metrics"], input=text,
                          capture_output=True, text=True, timeout=30)
    assert "rpi_" not in lint.stdout + lint.stderr
    mock.write_text("0\n")  # a healthy Pi: every flag 0, still reported
    assert {s.value for s in families(page(throttled=mock))["rpi_throttled"][1]} == {0.0}
    # No firmware (this machine, a VM, a test host) or a file that is not the driver's: nothing.
    for missing in (tmp_path / "absent", mock.with_name("garbage")):
        if missing.name == "garbage":
            missing.write_text("throttled? no\n")
        assert not any(n.startswith("rpi_") for n in families(page(throttled=missing)))


def test_default_agent_port_is_not_node_exporters(tmp_path):
    assert AGENT_PORT != 9100 and not 9100 <= AGENT_PORT <= 9999  # the range exporters have taken
    path = tmp_path / "picluster.toml"
    path.write_text('[cluster]\nname = "c"\nuser = "pi"\nnodes = "node[01-02]"\naddresses = "10.0.0.[1-2]"\n')
    assert load_inventory(path).agent_port == AGENT_PORT
    assert f"agent_port = {AGENT_PORT}" in (ROOT / "docs" / "cluster.md").read_text()
    assert f"agent_port = {AGENT_PORT}" in (ROOT / "examples" / "picluster.toml").read_text()


def test_grafana_dashboard_reads_only_metrics_the_agent_serves(tmp_path):
    dashboard = json.loads(DASHBOARD.read_text())
    exprs = [t["expr"] for p in dashboard["panels"] for t in p.get("targets", [])]
    exprs += [v["query"]["query"] for v in dashboard["templating"]["list"] if isinstance(v.get("query"), dict)]
    served = set(families(page()))
    # A test host's cgroup metrics appear only in a cgroup with limits (tests/test_lab_limits.py).
    served |= {"picluster_task_up", "picluster_cgroup_cpu_seconds_total", "picluster_cgroup_cpu_limit_cores",
               "picluster_cgroup_memory_usage_bytes", "picluster_cgroup_memory_limit_bytes"}
    # A Pi's firmware flags appear only on a Pi: here from a MOCK firmware file.
    mock = tmp_path / "MOCK-soc-firmware-get_throttled"
    mock.write_text("0\n")
    served |= set(families(page(throttled=mock)))
    used = {m for e in exprs for m in re.findall(r"\b(?:node|picluster|rpi)_[A-Za-z0-9_]+", e)}
    assert used and used <= served, used - served
    assert any("picluster_task_up" in e for e in exprs) and any("rpi_throttled" in e for e in exprs)
    assert len({p["id"] for p in dashboard["panels"]}) == len(dashboard["panels"])


def test_grafana_dashboard_queries_are_valid_promql(tmp_path):
    promtool = shutil.which("promtool")
    assert promtool, "promtool is missing: scripts/lab-deps.sh installs it (Debian package prometheus)"
    dashboard = json.loads(DASHBOARD.read_text())
    exprs = [t["expr"] for p in dashboard["panels"] for t in p.get("targets", [])]
    # Grafana fills its variables before Prometheus sees a query; promtool parses each as a rule.
    filled = [e.replace("$__rate_interval", "1m").replace("$job", "picluster") for e in exprs]
    rules = {"groups": [{"name": "dashboard", "rules": [{"record": f"dashboard:q{i}", "expr": e} for i, e in enumerate(filled)]}]}
    path = tmp_path / "rules.json"  # YAML is a superset of JSON
    path.write_text(json.dumps(rules))
    result = subprocess.run([promtool, "check", "rules", str(path)], capture_output=True, text=True, timeout=30)
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"SUCCESS: {len(filled)} rules found" in result.stdout + result.stderr
    # and a broken query is caught, so the check can fail
    path.write_text(json.dumps({"groups": [{"name": "d", "rules": [{"record": "dashboard:bad", "expr": "rate(x[$__rate_interval])"}]}]}))
    assert subprocess.run([promtool, "check", "rules", str(path)], capture_output=True, text=True, timeout=30).returncode != 0
