"""The node panel, rendered from recorded agent samples to a fixed-width console."""

from picluster.monitor.scrape import parse, rates
from picluster.views.nodes import NodeRow, cpu_bars, nodes_table, short_bytes

from render import render

RECORDED_T0 = """
picluster_cpu_percent{core="0",node="node02"} 100.0
picluster_cpu_percent{core="1",node="node02"} 50.0
picluster_cpu_percent{core="2",node="node02"} 0.0
picluster_cpu_percent{core="3",node="node02"} 10.0
picluster_load{minutes="1",node="node02"} 1.5
picluster_load{minutes="5",node="node02"} 1.0
picluster_load{minutes="15",node="node02"} 0.5
picluster_memory_used_bytes{node="node02"} 536870912
picluster_memory_total_bytes{node="node02"} 1073741824
picluster_temperature_celsius{node="node02",sensor="cpu-thermal"} 51.5
# TYPE picluster_network_bytes counter
picluster_network_bytes_total{direction="rx",node="node02"} 1000000
picluster_network_bytes_total{direction="tx",node="node02"} 500000
picluster_sample_time_seconds{node="node02"} 1000.0
"""
RECORDED_T1 = (RECORDED_T0.replace("1000000", "3000000").replace("500000", "600000")
               .replace("1000.0", "1002.0"))


def test_parse_recorded_sample():
    s = parse("node02", RECORDED_T0)
    assert s.cpu_percent == [100.0, 50.0, 0.0, 10.0]
    assert s.load == (1.5, 1.0, 0.5)
    assert s.memory_used == 2**29 and s.memory_total == 2**30
    assert s.temperature == 51.5
    assert rates(s, parse("node02", RECORDED_T1)) == (1_000_000.0, 50_000.0)


def test_table_shows_each_node_and_unreachable():
    before, after = parse("node02", RECORDED_T0), parse("node02", RECORDED_T1)
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
    assert short_bytes(999) == "999" and short_bytes(1500) == "1.5k" and short_bytes(23e6) == "23M"


def test_many_tasks_on_one_node_are_summarised():
    stats = parse("localhost", RECORDED_T0)
    row = NodeRow("localhost", ["ps", "worker"], stats,
                  tasks={"ps:0": "up", "worker:0": "up", "worker:1": "down", "worker:2": "starting"})
    line = next(ln for ln in render(nodes_table([row]), width=160).splitlines() if "localhost" in ln)
    assert "2/4 up worker:1 down worker:2 starting" in line
