"""`picluster cluster status`: each task (and agent), where it listens, and whether it answers."""

from pathlib import Path

from rich.table import Table

from picluster.clusterspec import Task
from picluster.views.nodes import STATE_STYLE


def _state(state: str) -> str:
    return f"[{STATE_STYLE.get(state, 'red')}]{state}[/]"


def node_tasks_table(states: list[tuple[Task, str]]) -> Table:
    """Tasks on inventory nodes: they live on other machines, so no pid or log here."""
    table = Table("task", "node", "address", "state")
    for task, state in states:
        table.add_row(task.label, task.node, task.address, _state(state))
    return table


def local_tasks_table(rows: list[tuple[str, str, str, int | None, str, Path]]) -> Table:
    """(label, node, address, pid, state, log) per process of the local cluster."""
    table = Table("task", "node", "address", "pid", "state", "log")
    for label, node, address, pid, state, log in rows:
        table.add_row(label, node, address, str(pid or "-"), _state(state), str(log))
    return table
