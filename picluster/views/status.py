"""`picluster cluster status`: each task (and agent), where it listens, and whether it answers."""

from rich.table import Table

from picluster.cluster.base import TaskState
from picluster.views.panel import STATE_STYLE


def _state(state: str) -> str:
    return f"[{STATE_STYLE.get(state, 'red')}]{state}[/]"


def tasks_table(states: list[TaskState]) -> Table:
    """Each task (and agent): where it listens and whether it answers; pid and log where this
    machine runs it (tasks on inventory nodes live elsewhere: no such columns)."""
    here = any(s.pid is not None or s.log is not None for s in states)
    table = Table("task", "node", "address", *(("pid",) if here else ()), "state", *(("log",) if here else ()))
    for s in states:
        local = (str(s.pid or "-"),) if here else ()
        table.add_row(s.label, s.node, s.address, *local, _state(s.state), *((str(s.log or "-"),) if here else ()))
    return table
