"""What the live views show: every node's agent scraped, with rates and TensorFlow task states."""

from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from picluster.fanout import fan_out
from picluster.monitor.scrape import NodeStats, cpu_use, rates, scrape
from picluster.views.nodes import NodeRow


@dataclass
class Target:
    node: str
    roles: list[str]
    host: str
    port: int | None  # the agent's port; None: no agent known


@dataclass
class Monitor:
    targets: list[Target]
    title: str
    task_states: Callable[[], dict[str, dict[str, str]]] | None = None  # node -> {"worker:0": "up", ...}
    _last: dict[str, NodeStats | None] = field(default_factory=dict)

    @classmethod
    def for_cluster(cls, inventory: Path | None) -> "Monitor":
        if inventory is not None:
            from picluster.inventory import load_inventory

            return cls.for_inventory(load_inventory(inventory))
        from picluster.cluster.local import LocalCluster

        cluster = LocalCluster.open()
        if cluster is None:
            return cls([Target("localhost", [], "127.0.0.1", None)], "localhost (no local cluster running)")
        return cls.for_local(cluster)

    @classmethod
    def for_inventory(cls, inv) -> "Monitor":
        from picluster.cluster import nodes

        targets = [Target(n.name, inv.roles_of(n.name), n.address, inv.agent_port) for n in inv.nodes]

        def states():
            out: dict[str, dict[str, str]] = {}
            for task, state in nodes.status(inv):
                out.setdefault(task.node, {})[task.label] = state
            return out
        return cls(targets, f"{inv.name}: {len(inv.nodes)} nodes", states)

    @classmethod
    def for_local(cls, cluster) -> "Monitor":
        roles = sorted({t.job for t in cluster.layout.tasks})

        def local_states():
            return {"localhost": {s.task.label: s.state for s in cluster.status()}}
        return cls([Target("localhost", roles, "127.0.0.1", cluster.agent_port)], "local cluster", local_states)

    def poll(self) -> list[NodeRow]:
        # The task checks (a TCP connect per task) overlap the scrapes instead of following them.
        states: dict[str, dict[str, str]] = {}
        with ThreadPoolExecutor(max_workers=1) as side:
            pending = side.submit(self.task_states) if self.task_states else None
            fresh = fan_out(self._scrape, self.targets, name=lambda t: t.node)
            if pending is not None:
                states = pending.result()
        rows = []
        for target, stats in zip(self.targets, fresh.values()):
            before = self._last.get(target.node)
            rx, tx = rates(before, stats)
            if stats is not None:
                stats.cpu_percent = cpu_use(before, stats)
            self._last[target.node] = stats
            rows.append(NodeRow(target.node, target.roles, stats, rx, tx, states.get(target.node, {})))
        return rows

    @staticmethod
    def _scrape(target: Target) -> NodeStats | None:
        if target.port is None:
            return None
        return scrape(target.node, target.host, target.port)
