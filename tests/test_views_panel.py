"""The node panel, rendered from recorded agent samples to a fixed-width console."""

import pytest

from picluster.model.nodestats import NodeRow
from picluster.monitor.scrape import cpu_use, parse, rates
from picluster.views.panel import cpu_bars, nodes_table, short_bytes, throttle_flag

from render import render

# Recorded from an agent (node_exporter's names), cut to what the panel reads; T1 two seconds later.
RECORDED_T0 = """
# TYPE node_cpu_seconds_total counter
node_cpu_seconds_total{cpu="0",mode="idle"} 100.0
node_cpu_seconds_total{cpu="0",mode="user"} 50.0
node_cpu_seconds_total{cpu="1",mode="idle"} 100.0
node_cpu_seconds_total{cpu="1",mode="system"} 50.0
node_cpu_seconds_total{cpu="2",mode="idle"} 100.0
node_cpu_seconds_total{cpu="2",mode="iowait"} 10.0
node_cpu_seconds_total{cpu="3",mode="idle"} 100.0
node_cpu_seconds_total{cpu="3",mode="user"} 20.0
node_load1 1.5
node_load5 1.0
node_load15 0.5
node_memory_MemTotal_bytes 1073741824
node_memory_MemAvailable_bytes 536870912
node_memory_MemFree_bytes 100000000
node_thermal_zone_temp{type="cpu-thermal",zone="0"} 51.5
# TYPE node_network_receive_bytes_total counter
node_network_receive_bytes_total{device="eth0"} 1000000
node_network_receive_bytes_total{device="wlan0"} 0
# TYPE node_network_transmit_bytes_total counter
node_network_transmit_bytes_total{device="eth0"} 500000
node_network_transmit_bytes_total{device="wlan0"} 0
node_time_seconds 1000.0
picluster_task_up{address="10.0.0.12:2222",node="node02",tf_job="worker",tf_task="0"} 1
"""
# Two seconds on: core 0 busy all the time, core 1 half, core 2 waiting on I/O (idle), core 3 a tenth.
RECORDED_T1 = (RECORDED_T0.replace("1000000", "3000000").replace("500000", "600000").replace("1000.0", "1002.0")
               .replace('cpu="0",mode="user"} 50.0', 'cpu="0",mode="user"} 52.0')
               .replace('cpu="1",mode="idle"} 100.0', 'cpu="1",mode="idle"} 101.0')
               .replace('cpu="1",mode="system"} 50.0', 'cpu="1",mode="system"} 51.0')
               .replace('cpu="2",mode="iowait"} 10.0', 'cpu="2",mode="iowait"} 12.0')
               .replace('cpu="3",mode="idle"} 100.0', 'cpu="3",mode="idle"} 101.8')
               .replace('cpu="3",mode="user"} 20.0', 'cpu="3",mode="user"} 20.2'))
# A test host limited to 0.05 CPU and 1 GiB: what its cgroup adds.
CGROUP = """
picluster_cgroup_cpu_limit_cores 0.05
# TYPE picluster_cgroup_cpu_seconds_total counter
picluster_cgroup_cpu_seconds_total {used}
picluster_cgroup_memory_limit_bytes 1073741824
picluster_cgroup_memory_usage_bytes 805306368
"""


def test_parse_recorded_samples():
    before, after = parse("node02", RECORDED_T0), parse("node02", RECORDED_T1)
    assert before.cpu_percent == [] and cpu_use(None, before) == []  # one scrape says nothing about use
    assert cpu_use(before, after) == pytest.approx([100.0, 50.0, 0.0, 10.0])
    assert after.load == (1.5, 1.0, 0.5)
    assert after.memory_used == 2**29 and after.memory_total == 2**30
    assert after.temperature == 51.5
    assert rates(before, after) == (1_000_000.0, 50_000.0)
    assert after.tasks == {"worker:0": "up"}


def test_a_limited_host_shows_its_cgroup_share_and_memory():
    before = parse("node02", RECORDED_T0 + CGROUP.format(used=10.0))
    after = parse("node02", RECORDED_T1 + CGROUP.format(used=10.05))
    assert cpu_use(before, after) == pytest.approx([50.0])  # 0.025 CPU of a 0.05 share
    assert (after.memory_used, after.memory_total) == (768 * 2**20, 2**30)


def test_table_shows_each_node_and_unreachable():
    before, after = parse("node02", RECORDED_T0), parse("node02", RECORDED_T1)
    after.cpu_percent = cpu_use(before, after)
    rx, tx = rates(before, after)
    rows = [
        NodeRow("node01", ["ps", "nfs"], None, tasks={"ps:0": "down"}),
        NodeRow("node02", ["worker"], after, rx, tx, tasks={"worker:0": "up"}),
    ]
    text = render(nodes_table(rows), width=120)
    node01 = next(line for line in text.splitlines() if "node01" in line)
    node02 = next(line for line in text.splitlines() if "node02" in line)
    assert "unreachable" in node01 and "ps:0 down" in node01 and "ps,nfs" in node01
    assert "█▄·▁  40%" in node02
    assert "0.5/1.0" in node02 and " 52 " in node02
    assert "1.0M/50k" in node02 and "worker:0 up" in node02
    assert max(len(line) for line in render(nodes_table(rows), width=80).splitlines()) <= 80
    assert "…" not in render(nodes_table(rows), width=80)


def test_bars_and_units():
    assert cpu_bars([0.0, 100.0]).plain == "·█  50%"
    assert cpu_bars([]).plain == "-"
    assert short_bytes(999) == "999" and short_bytes(1500) == "1.5k" and short_bytes(23e6) == "23M"


def test_many_tasks_on_one_node_are_summarised():
    stats = parse("localhost", RECORDED_T0)
    row = NodeRow("localhost", ["ps", "worker"], stats,
                  tasks={"ps:0": "up", "worker:0": "up", "worker:1": "down", "worker:2": "starting"})
    line = next(ln for ln in render(nodes_table([row]), width=160).splitlines() if "localhost" in ln)
    assert "2/4 up worker:1 down worker:2 starting" in line


def test_a_throttled_or_under_voltage_node_is_flagged_in_its_row():
    # What the agent serves from a MOCK firmware file (a Pi's get_throttled; none exists here).
    throttled = RECORDED_T1 + "# TYPE rpi_throttled_status gauge\nrpi_throttled_status 327685.0\n"  # 0x50005
    stats = parse("node03", throttled)
    assert stats.throttled == 0x50005 and parse("node02", RECORDED_T1).throttled is None
    rows = [NodeRow("node02", ["worker"], parse("node02", RECORDED_T1)), NodeRow("node03", ["worker"], stats)]
    text = render(nodes_table(rows), width=80)
    node02 = next(line for line in text.splitlines() if line.strip().startswith("node02"))
    node03 = next(line for line in text.splitlines() if line.strip().startswith("node03"))
    assert "under-voltage" in node03 and "under-voltage" not in node02
    assert ("node03: now under-voltage, throttled; since boot under-voltage, throttled "
            "(the Pi's firmware: check its power supply and cooling)") in " ".join(text.split())
    assert max(len(line) for line in text.splitlines()) <= 80 and "…" not in text
    # The row's word: the worst condition now; yellow "was throttled" for one that has passed.
    assert throttle_flag(0x4)[0].plain == " throttled" and throttle_flag(0x8)[0].plain == " hot"
    assert throttle_flag(0x40000)[0].plain == " was throttled" and throttle_flag(0x40000)[1] == "since boot throttled"
    assert throttle_flag(0) == (throttle_flag(None)[0], "") and throttle_flag(0)[0].plain == ""
