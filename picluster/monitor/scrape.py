"""Reading node agents: one scrape becomes a NodeStats; two give CPU use and network rates.

The agent speaks node_exporter's names (agent.py), so CPU use, like any node_exporter
consumer computes it, is the change of ``node_cpu_seconds_total`` between two scrapes.  A node
whose cgroup has limits (a test host) reports them as ``picluster_cgroup_*``: its CPU is then
shown against its share of a core and its memory against its limit, as the board would show it.
"""

import urllib.error
import urllib.request

from prometheus_client.parser import text_string_to_metric_families

from picluster.model.nodestats import NodeStats

MAX_BYTES = 1 << 20  # an agent's page is a few tens of kB; anything larger is not ours
IDLE_MODES = ("idle", "iowait")


def parse(node: str, text: str) -> NodeStats:
    stats = NodeStats(node)
    memory: dict[str, float] = {}
    cgroup_memory: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            name, labels, value = sample.name, sample.labels, sample.value
            if name == "node_cpu_seconds_total":
                core = int(labels["cpu"])
                busy, total = stats.cpu_seconds.get(core, (0.0, 0.0))
                stats.cpu_seconds[core] = (busy + (0.0 if labels["mode"] in IDLE_MODES else value), total + value)
            elif name in ("node_load1", "node_load5", "node_load15"):
                load = list(stats.load)
                load[("node_load1", "node_load5", "node_load15").index(name)] = value
                stats.load = (load[0], load[1], load[2])
            elif name in ("node_memory_MemTotal_bytes", "node_memory_MemAvailable_bytes"):
                memory[name] = value
            elif name in ("node_thermal_zone_temp", "picluster_soc_temperature_celsius"):
                stats.temperature = max(value, stats.temperature or value)
            elif name == "node_network_receive_bytes_total":
                stats.net_rx += value
            elif name == "node_network_transmit_bytes_total":
                stats.net_tx += value
            elif name == "node_time_seconds":
                stats.taken = value
            elif name == "picluster_task_up":
                stats.tasks[f"{labels['tf_job']}:{labels['tf_task']}"] = "up" if value else "down"
            elif name == "rpi_throttled_status":
                stats.throttled = int(value)
            elif name == "picluster_cgroup_cpu_limit_cores":
                stats.cgroup_cpu_limit = value
            elif name == "picluster_cgroup_cpu_seconds_total":
                stats.cgroup_cpu_seconds = value
            elif name in ("picluster_cgroup_memory_limit_bytes", "picluster_cgroup_memory_usage_bytes"):
                cgroup_memory[name] = value
    stats.memory_total = memory.get("node_memory_MemTotal_bytes", 0.0)
    stats.memory_used = stats.memory_total - memory.get("node_memory_MemAvailable_bytes", stats.memory_total)
    if "picluster_cgroup_memory_limit_bytes" in cgroup_memory:
        stats.memory_total = min(stats.memory_total or float("inf"), cgroup_memory["picluster_cgroup_memory_limit_bytes"])
        stats.memory_used = cgroup_memory.get("picluster_cgroup_memory_usage_bytes", 0.0)
    return stats


def scrape(node: str, host: str, port: int, timeout: float = 1.0) -> NodeStats | None:
    """The node's stats, or None when its agent does not answer."""
    try:
        with urllib.request.urlopen(f"http://{host}:{port}/metrics", timeout=timeout) as reply:
            return parse(node, reply.read(MAX_BYTES).decode("utf-8", "replace"))
    except (urllib.error.URLError, OSError, ValueError):
        return None


def cpu_use(before: NodeStats | None, after: NodeStats) -> list[float]:
    """Busy percent per core between two scrapes; with a cgroup CPU limit, one value: the
    percentage of the host's share used (a 0.05-CPU host busy all the time shows 100 %)."""
    if before is None or after.taken <= before.taken:
        return []
    if after.cgroup_cpu_limit and after.cgroup_cpu_seconds is not None and before.cgroup_cpu_seconds is not None:
        used = (after.cgroup_cpu_seconds - before.cgroup_cpu_seconds) / (after.taken - before.taken)
        return [min(100.0, max(0.0, 100.0 * used / after.cgroup_cpu_limit))]
    out = []
    for core in sorted(after.cpu_seconds):
        busy1, all1 = after.cpu_seconds[core]
        busy0, all0 = before.cpu_seconds.get(core, (busy1, all1))
        out.append(min(100.0, max(0.0, 100.0 * (busy1 - busy0) / (all1 - all0))) if all1 > all0 else 0.0)
    return out


def rates(before: NodeStats | None, after: NodeStats | None) -> tuple[float, float]:
    """Network receive and transmit rates in bytes/s between two scrapes of one node."""
    if before is None or after is None or after.taken <= before.taken:
        return 0.0, 0.0
    dt = after.taken - before.taken
    return max(0.0, (after.net_rx - before.net_rx) / dt), max(0.0, (after.net_tx - before.net_tx) / dt)
