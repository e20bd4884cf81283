"""What a node's agent reports (NodeStats) and what the node panel draws of it (NodeRow).

Shared vocabulary below the monitor that fills them and the views that draw them, so neither
imports the other.
"""

from dataclasses import dataclass, field

# The firmware's throttled bits (vcgencmd get_throttled): bit N is happening now, bit 16 + N has
# happened since boot.  Names as node_exporter-style Pi exporters label them.
THROTTLE_CONDITIONS = ("under_voltage", "freq_capped", "throttled", "soft_temp_limit")
SINCE_BOOT_SHIFT = 16


def throttle_flags(bits: int) -> tuple[list[str], list[str]]:
    """(conditions now, conditions since boot) of the firmware's throttled bits."""
    now = [name for i, name in enumerate(THROTTLE_CONDITIONS) if bits >> i & 1]
    since_boot = [name for i, name in enumerate(THROTTLE_CONDITIONS) if bits >> (SINCE_BOOT_SHIFT + i) & 1]
    return now, since_boot


@dataclass
class NodeStats:
    node: str
    cpu_seconds: dict[int, tuple[float, float]] = field(default_factory=dict)  # core -> (busy, all) seconds
    cpu_percent: list[float] = field(default_factory=list)  # from two scrapes (cpu_use); empty after one
    load: tuple[float, float, float] = (0.0, 0.0, 0.0)
    memory_used: float = 0.0  # MemTotal - MemAvailable, or the cgroup's usage
    memory_total: float = 0.0  # MemTotal, or the cgroup's limit
    temperature: float | None = None
    net_rx: float = 0.0
    net_tx: float = 0.0
    taken: float = 0.0  # node_time_seconds: the node's clock when it was scraped
    cgroup_cpu_limit: float | None = None  # cores
    cgroup_cpu_seconds: float | None = None
    tasks: dict[str, str] = field(default_factory=dict)  # "worker:0" -> "up" | "down", from picluster_task_up
    throttled: int | None = None  # the firmware's throttled bits; None where there is no Pi firmware


@dataclass
class NodeRow:
    name: str
    roles: list[str]
    stats: NodeStats | None  # None: the agent did not answer
    rx_rate: float = 0.0
    tx_rate: float = 0.0
    tasks: dict[str, str] = field(default_factory=dict)  # "worker:0" -> "up" | "starting" | "down"
