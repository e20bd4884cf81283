"""The node agent: this node's CPU, memory, load, temperature, throttling and network, in Prometheus text format.

``python -m picluster.monitor.agent --addr 10.0.0.11 --port 19100 --node node01 --cluster-file F``
serves ``/metrics`` on the cluster address only, so an existing Prometheus or Grafana can scrape
the same endpoint that ``picluster top`` reads.

Where its metrics overlap node_exporter's they carry node_exporter's names, types and labels
(``node_cpu_seconds_total{cpu,mode}``, ``node_load1``, ``node_memory_MemAvailable_bytes``,
``node_network_receive_bytes_total{device}``, ``node_uname_info``, ...), so the stock "Node
Exporter Full" Grafana dashboard (grafana.com 1860) works against it; like node_exporter, no
sample carries the node's name (Prometheus adds ``instance``; ``node_uname_info`` has the
``nodename``).  What node_exporter does not know is ``picluster_*``: the TensorFlow tasks of
this node (``picluster_task_up``), its inventory name, and, on a test host with limits, the
host's cgroup.  A Pi's firmware flags (under-voltage, frequency capped, throttled, soft
temperature limit; now and since boot) are ``rpi_throttled{condition,period}`` and the raw bits
``rpi_throttled_status``, as Pi exporters name them; a machine without the firmware has neither.
Its default port is not node_exporter's 9100, so both can run on one Pi.

Counters are read when scraped, as node_exporter does: rates come from two scrapes.  Only
``vcgencmd`` (a subprocess, on a Pi without the sysfs files) is cached for a second.
"""

import argparse
import json
import os
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import CollectorRegistry

from picluster.model.nodestats import SINCE_BOOT_SHIFT, THROTTLE_CONDITIONS
from picluster.monitor import cgroup
from picluster.util import atomic

THERMAL = Path("/sys/class/thermal")
PRESSURE = Path("/proc/pressure")
MEMINFO = Path("/proc/meminfo")
VCGENCMD = shutil.which("vcgencmd")  # looked up once, not on every scrape
CPU_MODES = ("user", "nice", "system", "idle", "iowait", "irq", "softirq", "steal")
# The firmware driver's file: the throttled bits in hex ("50005"), as vcgencmd get_throttled
# prints them after "throttled=0x".  Newer kernels warn once that it is deprecated, and still serve it.
THROTTLED = Path("/sys/devices/platform/soc/soc:firmware/get_throttled")
THROTTLED_ENV = "PICLUSTER_THROTTLED_FILE"  # another file in its place: tests give a MOCK firmware file
TASK_PROBE_S = 0.2  # the node's own tasks, on its own address: a refused connection is instant


def read_temperatures(thermal: Path = THERMAL) -> list[tuple[str, str, float]]:
    """(zone number, type, degrees Celsius) per thermal zone; the Pi's SoC is thermal_zone0 "cpu-thermal"."""
    temps = []
    for zone in sorted(thermal.glob("thermal_zone*")):
        try:
            kind = (zone / "type").read_text().strip() or zone.name
            temps.append((zone.name.removeprefix("thermal_zone"), kind, int((zone / "temp").read_text().strip()) / 1000.0))
        except (OSError, ValueError):
            continue
    return temps


def read_vcgencmd() -> float | None:
    if not VCGENCMD:
        return None
    out = subprocess.run([VCGENCMD, "measure_temp"], capture_output=True, text=True, timeout=2).stdout
    try:
        return float(out[5:].split("'")[0]) if out.startswith("temp=") else None
    except ValueError:
        return None


def read_throttled(path: Path = THROTTLED) -> int | None:
    """The firmware's throttled bits, or None where the file is missing or unreadable."""
    try:
        text = path.read_text().strip()
        return int(text, 16) if text else None
    except (OSError, ValueError):
        return None


def read_vcgencmd_throttled() -> int | None:
    if not VCGENCMD:
        return None
    out = subprocess.run([VCGENCMD, "get_throttled"], capture_output=True, text=True, timeout=2).stdout.strip()
    try:
        return int(out.removeprefix("throttled="), 16) if out.startswith("throttled=") else None
    except ValueError:
        return None


def read_meminfo(path: Path = MEMINFO) -> dict[str, int]:
    """/proc/meminfo as node_exporter names it: "Active(anon)" -> "Active_anon", kB -> bytes."""
    out = {}
    for line in path.read_text().splitlines():
        key, _, rest = line.partition(":")
        parts = rest.split()
        if not parts:
            continue
        key = key.replace("(", "_").replace(")", "")
        out[key] = int(parts[0]) * (1024 if len(parts) > 1 and parts[1] == "kB" else 1)
    return out


def read_pressure(root: Path = PRESSURE) -> dict[tuple[str, str], float]:
    """(resource, "some"|"full") -> seconds stalled, from the kernel's PSI files (absent on old kernels)."""
    out = {}
    for resource in ("cpu", "memory", "io"):
        try:
            text = (root / resource).read_text()
        except OSError:
            continue
        for line in text.splitlines():
            kind, *fields = line.split()
            for field in fields:
                if field.startswith("total="):
                    out[(resource, kind)] = int(field[6:]) / 1e6
    return out


def node_tasks(cluster_file: Path | None, node: str) -> list[dict]:
    """The TensorFlow tasks the cluster file places on this node (all of them for "localhost")."""
    if cluster_file is None:
        return []
    try:
        rows = json.loads(cluster_file.read_text())["layout"]
    except (OSError, ValueError, KeyError, TypeError):
        return []
    return [r for r in rows if isinstance(r, dict) and r.get("node") == node]


def _answers(host: str, port: int) -> bool:
    from picluster.cluster.probe import answers

    return answers(host, port, TASK_PROBE_S)


class NodeCollector:
    """A prometheus_client collector reading the node when scraped."""

    def __init__(self, node: str, cluster_file: Path | None = None, thermal: Path = THERMAL,
                 throttled: Path = THROTTLED) -> None:
        self.node = node
        self.cluster_file = cluster_file
        self.thermal = thermal
        self.throttled = throttled
        self._vcgencmd: dict[str, tuple[float, float | int | None]] = {}

    def _cached(self, what: str, read):
        """vcgencmd's answer, asked at most once a second (a subprocess per scrape is too dear on a Pi)."""
        taken, value = self._vcgencmd.get(what, (0.0, None))
        if time.monotonic() - taken > 1.0:
            value = read()
            self._vcgencmd[what] = (time.monotonic(), value)
        return value

    def collect(self) -> Iterator[Metric]:
        yield from self._system()
        yield from self._cpu()
        yield from self._memory()
        yield from self._network()
        yield from self._temperature()
        yield from self._throttling()
        yield from self._pressure()
        yield from self._picluster()

    def _system(self) -> Iterator[Metric]:
        u = os.uname()
        info = GaugeMetricFamily("node_uname_info", "Labeled system information as provided by the uname system call.",
                                 labels=["sysname", "release", "version", "machine", "nodename", "domainname"])
        info.add_metric([u.sysname, u.release, u.version, u.machine, u.nodename, "(none)"], 1)
        yield info
        yield GaugeMetricFamily("node_boot_time_seconds", "Node boot time, in unixtime.", value=psutil.boot_time())
        yield GaugeMetricFamily("node_time_seconds", "System time in seconds since epoch (1970).", value=time.time())
        for minutes, value in zip((1, 5, 15), psutil.getloadavg()):
            yield GaugeMetricFamily(f"node_load{minutes}", f"{minutes}m load average.", value=value)

    def _cpu(self) -> Iterator[Metric]:
        cpu = CounterMetricFamily("node_cpu_seconds_total", "Seconds the CPUs spent in each mode.", labels=["cpu", "mode"])
        for core, times in enumerate(psutil.cpu_times(percpu=True)):
            for mode in CPU_MODES:
                cpu.add_metric([str(core), mode], getattr(times, mode, 0.0))
        yield cpu

    def _memory(self) -> Iterator[Metric]:
        for key, value in read_meminfo().items():
            yield GaugeMetricFamily(f"node_memory_{key}_bytes", f"Memory information field {key}_bytes.", value=value)

    def _network(self) -> Iterator[Metric]:
        rx = CounterMetricFamily("node_network_receive_bytes_total", "Network device statistic receive_bytes.", labels=["device"])
        tx = CounterMetricFamily("node_network_transmit_bytes_total", "Network device statistic transmit_bytes.", labels=["device"])
        for device, counters in sorted(psutil.net_io_counters(pernic=True).items()):
            if device == "lo":  # traffic with itself says nothing about the cluster
                continue
            rx.add_metric([device], counters.bytes_recv)
            tx.add_metric([device], counters.bytes_sent)
        yield rx
        yield tx
        labels = ["device", "fstype", "mountpoint", "device_error"]
        size = GaugeMetricFamily("node_filesystem_size_bytes", "Filesystem size in bytes.", labels=labels)
        avail = GaugeMetricFamily("node_filesystem_avail_bytes", "Filesystem space available to non-root users in bytes.", labels=labels)
        free = GaugeMetricFamily("node_filesystem_free_bytes", "Filesystem free space in bytes.", labels=labels)
        root = next((p for p in psutil.disk_partitions(all=True) if p.mountpoint == "/"), None)
        try:
            st = os.statvfs("/")
            key = [root.device if root else "rootfs", root.fstype if root else "", "/", ""]
            size.add_metric(key, st.f_blocks * st.f_frsize)
            avail.add_metric(key, st.f_bavail * st.f_frsize)
            free.add_metric(key, st.f_bfree * st.f_frsize)
        except OSError:
            pass
        yield size
        yield avail
        yield free

    def _temperature(self) -> Iterator[Metric]:
        zones = read_temperatures(self.thermal)
        temp = GaugeMetricFamily("node_thermal_zone_temp", "Zone temperature in Celsius", labels=["zone", "type"])
        for zone, kind, celsius in zones:
            temp.add_metric([zone, kind], celsius)
        yield temp
        if not zones and VCGENCMD:
            value = self._cached("measure_temp", read_vcgencmd)
            if value is not None:
                yield GaugeMetricFamily("picluster_soc_temperature_celsius", "SoC temperature from vcgencmd (no thermal zone).", value=value)

    def _throttling(self) -> Iterator[Metric]:
        bits = read_throttled(self.throttled)
        if bits is None and VCGENCMD:
            bits = self._cached("get_throttled", read_vcgencmd_throttled)
        if bits is None:  # no Pi firmware here: say nothing rather than "not throttled"
            return
        yield GaugeMetricFamily("rpi_throttled_status", "The firmware's throttled bits (vcgencmd get_throttled).", value=bits)
        flags = GaugeMetricFamily("rpi_throttled", "A firmware throttling condition, now or since boot (1) or not (0).",
                                  labels=["condition", "period"])
        for i, condition in enumerate(THROTTLE_CONDITIONS):
            flags.add_metric([condition, "now"], float(bits >> i & 1))
            flags.add_metric([condition, "since_boot"], float(bits >> (SINCE_BOOT_SHIFT + i) & 1))
        yield flags

    def _pressure(self) -> Iterator[Metric]:
        names = {("cpu", "some"): "node_pressure_cpu_waiting_seconds_total",
                 ("memory", "some"): "node_pressure_memory_waiting_seconds_total",
                 ("memory", "full"): "node_pressure_memory_stalled_seconds_total",
                 ("io", "some"): "node_pressure_io_waiting_seconds_total",
                 ("io", "full"): "node_pressure_io_stalled_seconds_total"}
        for key, seconds in read_pressure().items():
            if key in names:
                yield CounterMetricFamily(names[key].removesuffix("_total"), f"Pressure stall seconds ({key[0]} {key[1]}).",
                                          value=seconds)

    def _picluster(self) -> Iterator[Metric]:
        info = GaugeMetricFamily("picluster_node_info", "This node's name in the picluster inventory.", labels=["node"])
        info.add_metric([self.node], 1)
        yield info
        up = GaugeMetricFamily("picluster_task_up", "Whether this node's TensorFlow task accepts connections (1) or not (0).",
                               labels=["node", "tf_job", "tf_task", "address"])
        for task in node_tasks(self.cluster_file, self.node):
            try:
                host, port = str(task["host"]), int(task["port"])
                up.add_metric([self.node, str(task["job"]), str(task["index"]), f"{host}:{port}"], 1.0 if _answers(host, port) else 0.0)
            except (KeyError, TypeError, ValueError):
                continue
        yield up
        usage = cgroup.read_usage()
        if usage is None:
            return
        if usage.cpu_limit is not None:
            yield GaugeMetricFamily("picluster_cgroup_cpu_limit_cores", "CPU time per second this node's cgroup may use.",
                                    value=usage.cpu_limit)
        if usage.cpu_seconds is not None:
            yield CounterMetricFamily("picluster_cgroup_cpu_seconds", "CPU seconds used by this node's cgroup.", value=usage.cpu_seconds)
        if usage.memory_limit is not None:
            yield GaugeMetricFamily("picluster_cgroup_memory_limit_bytes", "Memory this node's cgroup may use.", value=usage.memory_limit)
        if usage.memory_used is not None:
            yield GaugeMetricFamily("picluster_cgroup_memory_usage_bytes", "Memory this node's cgroup uses.", value=usage.memory_used)
        if usage.oom_kills is not None:
            yield CounterMetricFamily("picluster_cgroup_oom_kills", "Processes of this node's cgroup killed for memory.",
                                      value=usage.oom_kills)


def registry_for(node: str, cluster_file: Path | None = None, throttled: Path = THROTTLED) -> CollectorRegistry:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(NodeCollector(node, cluster_file, throttled=throttled))
    return registry


def main(argv: list[str] | None = None) -> int:
    from prometheus_client import start_http_server

    from picluster.model.inventory import AGENT_PORT

    parser = argparse.ArgumentParser(prog="python -m picluster.monitor.agent")
    parser.add_argument("--addr", required=True, help="address to listen on: the node's cluster address")
    parser.add_argument("--port", type=int, default=AGENT_PORT, help=f"default {AGENT_PORT} (node_exporter has 9100)")
    parser.add_argument("--node", required=True, help="the node's inventory name (picluster_node_info, its tasks)")
    parser.add_argument("--cluster-file", type=Path, help="the cluster's layout (cluster.json): this node's tasks")
    parser.add_argument("--ready-file", type=Path)
    parser.add_argument("--parent", type=int, help="exit when this pid (the coordinator) exits")
    args = parser.parse_args(argv)
    if args.parent:
        from picluster.cluster.lifetime import die_with_parent

        die_with_parent(args.parent)
    registry = registry_for(args.node, args.cluster_file, Path(os.environ.get(THROTTLED_ENV) or THROTTLED))
    server, thread = start_http_server(args.port, addr=args.addr, registry=registry)
    if args.ready_file:
        atomic.write_text(args.ready_file, str(server.server_port))
    thread.join()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
