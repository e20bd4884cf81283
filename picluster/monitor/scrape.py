"""Reading node agents: one scrape becomes a NodeStats; two give network rates."""

import urllib.error
import urllib.request
from dataclasses import dataclass, field

from prometheus_client.parser import text_string_to_metric_families

MAX_BYTES = 1 << 20  # an agent's page is a few kB; anything larger is not ours


@dataclass
class NodeStats:
    node: str
    cpu_percent: list[float] = field(default_factory=list)
    load: tuple[float, float, float] = (0.0, 0.0, 0.0)
    memory_used: float = 0.0
    memory_total: float = 0.0
    temperature: float | None = None
    net_rx: float = 0.0
    net_tx: float = 0.0
    taken: float = 0.0


def parse(node: str, text: str) -> NodeStats:
    stats = NodeStats(node)
    cores: dict[int, float] = {}
    load = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            labels, value = sample.labels, sample.value
            if sample.name == "picluster_cpu_percent":
                cores[int(labels["core"])] = value
            elif sample.name == "picluster_load":
                load[labels["minutes"]] = value
            elif sample.name == "picluster_memory_used_bytes":
                stats.memory_used = value
            elif sample.name == "picluster_memory_total_bytes":
                stats.memory_total = value
            elif sample.name == "picluster_temperature_celsius":
                stats.temperature = max(value, stats.temperature or value)
            elif sample.name == "picluster_network_bytes_total":
                if labels["direction"] == "rx":
                    stats.net_rx = value
                else:
                    stats.net_tx = value
            elif sample.name == "picluster_sample_time_seconds":
                stats.taken = value
    stats.cpu_percent = [cores[c] for c in sorted(cores)]
    stats.load = (load.get("1", 0.0), load.get("5", 0.0), load.get("15", 0.0))
    return stats


def scrape(node: str, host: str, port: int, timeout: float = 1.0) -> NodeStats | None:
    """The node's stats, or None when its agent does not answer."""
    try:
        with urllib.request.urlopen(f"http://{host}:{port}/metrics", timeout=timeout) as reply:
            return parse(node, reply.read(MAX_BYTES).decode("utf-8", "replace"))
    except (urllib.error.URLError, OSError, ValueError):
        return None


def rates(before: NodeStats | None, after: NodeStats | None) -> tuple[float, float]:
    """Network receive and transmit rates in bytes/s between two scrapes of one node."""
    if before is None or after is None or after.taken <= before.taken:
        return 0.0, 0.0
    dt = after.taken - before.taken
    return max(0.0, (after.net_rx - before.net_rx) / dt), max(0.0, (after.net_tx - before.net_tx) / dt)
