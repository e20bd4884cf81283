"""What the live views show: every node's agent scraped, with rates and TensorFlow task states."""

from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from picluster.cluster.base import Agent, Cluster
from picluster.model.fanout import fan_out
from picluster.model.nodestats import NodeRow, NodeStats
from picluster.monitor.scrape import cpu_use, rates, scrape


@dataclass
class Monitor:
    """Some nodes' agents, polled for the views: ``poll()`` gives one row per node."""

    agents: list[Agent]
    title: str
    task_states: Callable[[], dict[str, dict[str, str]]] | None = None  # node -> {"worker:0": "up", ...}
    _last: dict[str, NodeStats | None] = field(default_factory=dict)

    @classmethod
    def of(cls, cluster: Cluster | None) -> "Monitor":
        """A cluster's nodes and tasks; None: this machine alone, no cluster running."""
        if cluster is None:
            return cls([Agent("localhost", (), "127.0.0.1", None)], "localhost (no local cluster running)")
        return cls(cluster.agents(), cluster.title, cluster.task_states)

    def poll(self) -> list[NodeRow]:
        # The task checks (a TCP connect per task) overlap the scrapes instead of following them.
        states: dict[str, dict[str, str]] = {}
        with ThreadPoolExecutor(max_workers=1) as side:
            pending = side.submit(self.task_states) if self.task_states else None
            fresh = fan_out(self._scrape, self.agents, name=lambda a: a.node)
            if pending is not None:
                states = pending.result()
        rows = []
        for agent, stats in zip(self.agents, fresh.values()):
            before = self._last.get(agent.node)
            rx, tx = rates(before, stats)
            if stats is not None:
                stats.cpu_percent = cpu_use(before, stats)
            self._last[agent.node] = stats
            rows.append(NodeRow(agent.node, list(agent.roles), stats, rx, tx, states.get(agent.node, {})))
        return rows

    @staticmethod
    def _scrape(agent: Agent) -> NodeStats | None:
        if agent.port is None:
            return None
        return scrape(agent.node, agent.host, agent.port)
