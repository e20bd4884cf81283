"""The node agent: this node's CPU, load, memory, temperature and network, in Prometheus text format.

``python -m picluster.monitor.agent --addr 10.0.0.11 --port 9100`` serves ``/metrics`` on the cluster
address only, so an existing Prometheus or Grafana can scrape the same endpoint that
``picluster top`` reads.  A sampler thread measures once a second; a scrape only reads the
last sample, so scraping often costs nothing extra.
"""

import argparse
import shutil
import subprocess
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import psutil
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import CollectorRegistry

from picluster import atomic

THERMAL = Path("/sys/class/thermal")
VCGENCMD = shutil.which("vcgencmd")  # looked up once, not on every sample


@dataclass
class Sample:
    cpu_percent: list[float]
    load: tuple[float, float, float]
    memory_used: int
    memory_total: int
    temperatures: dict[str, float]
    net_rx: int
    net_tx: int
    taken: float = field(default_factory=time.time)


def read_temperatures(thermal: Path = THERMAL) -> dict[str, float]:
    """Thermal zones in degrees Celsius (the Pi's SoC is thermal_zone0); vcgencmd when it exists."""
    temps = {}
    for zone in sorted(thermal.glob("thermal_zone*")):
        try:
            kind = (zone / "type").read_text().strip() or zone.name
            temps[kind] = int((zone / "temp").read_text().strip()) / 1000.0
        except (OSError, ValueError):
            continue
    if not temps and VCGENCMD:
        out = subprocess.run([VCGENCMD, "measure_temp"], capture_output=True, text=True, timeout=2).stdout
        if out.startswith("temp="):
            try:
                temps["soc"] = float(out[5:].split("'")[0])
            except ValueError:
                pass
    return temps


def take_sample() -> Sample:
    memory = psutil.virtual_memory()
    net = psutil.net_io_counters()
    return Sample(
        cpu_percent=psutil.cpu_percent(percpu=True),
        load=psutil.getloadavg(),
        memory_used=memory.total - memory.available,
        memory_total=memory.total,
        temperatures=read_temperatures(),
        net_rx=net.bytes_recv,
        net_tx=net.bytes_sent,
    )


class NodeCollector:
    """A prometheus_client collector over the sampler's latest Sample."""

    def __init__(self, node: str, period: float = 1.0) -> None:
        self.node = node
        self.period = period
        psutil.cpu_percent(percpu=True)  # the first call only sets the reference point
        self._latest = take_sample()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="agent-sampler", daemon=True)

    def start(self) -> "NodeCollector":
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()

    def _loop(self) -> None:
        while not self._stop.wait(self.period):
            sample = take_sample()
            with self._lock:
                self._latest = sample

    def collect(self):
        with self._lock:
            s = self._latest
        node = [self.node]
        cpu = GaugeMetricFamily("picluster_cpu_percent", "CPU busy percent per core over the last period", labels=["node", "core"])
        for core, value in enumerate(s.cpu_percent):
            cpu.add_metric(node + [str(core)], value)
        yield cpu
        load = GaugeMetricFamily("picluster_load", "Load average", labels=["node", "minutes"])
        for minutes, value in zip(("1", "5", "15"), s.load):
            load.add_metric(node + [minutes], value)
        yield load
        yield _gauge("picluster_memory_used_bytes", "Memory in use (total - available)", node, s.memory_used)
        yield _gauge("picluster_memory_total_bytes", "Physical memory", node, s.memory_total)
        temp = GaugeMetricFamily("picluster_temperature_celsius", "Thermal zone temperature", labels=["node", "sensor"])
        for sensor, value in s.temperatures.items():
            temp.add_metric(node + [sensor], value)
        yield temp
        net = CounterMetricFamily("picluster_network_bytes", "Bytes over all interfaces", labels=["node", "direction"])
        net.add_metric(node + ["rx"], s.net_rx)
        net.add_metric(node + ["tx"], s.net_tx)
        yield net
        yield _gauge("picluster_sample_time_seconds", "When the sample was taken (Unix time)", node, s.taken)


def _gauge(name: str, documentation: str, node: list[str], value: float) -> GaugeMetricFamily:
    family = GaugeMetricFamily(name, documentation, labels=["node"])
    family.add_metric(node, value)
    return family


def registry_for(node: str, period: float = 1.0) -> tuple[CollectorRegistry, NodeCollector]:
    registry = CollectorRegistry(auto_describe=False)
    collector = NodeCollector(node, period).start()
    registry.register(collector)
    return registry, collector


def main(argv: list[str] | None = None) -> int:
    from prometheus_client import start_http_server

    parser = argparse.ArgumentParser(prog="python -m picluster.monitor.agent")
    parser.add_argument("--addr", required=True, help="address to listen on: the node's cluster address")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--node", required=True, help="node name for the labels")
    parser.add_argument("--ready-file", type=Path)
    parser.add_argument("--parent", type=int, help="exit when this pid (the coordinator) exits")
    args = parser.parse_args(argv)
    if args.parent:
        from picluster.cluster.lifetime import die_with_parent

        die_with_parent(args.parent)
    registry, _ = registry_for(args.node)
    server, thread = start_http_server(args.port, addr=args.addr, registry=registry)
    if args.ready_file:
        atomic.write_text(args.ready_file, str(server.server_port))
    thread.join()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
