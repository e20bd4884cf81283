"""`picluster cluster status` (and `cluster up`'s table): each task (and agent), where it listens,
and whether it answers, as a listing (``picluster.cluster/1``)."""

from rich.text import Text

from picluster.cluster.base import TaskState
from picluster.views.listing import Column, Fitted, Listing, Row, dash
from picluster.views.panel import STATE_STYLE

STATUS_FIELDS = ("task", "node", "address", "pid", "state", "log")


def _state(state: str) -> Text:
    return Text(state, style=STATE_STYLE.get(state, "red"))


def status_listing(states: list[TaskState], cluster: str | None) -> Listing:
    """Each task (and agent): where it listens and whether it answers; pid and log where this
    machine runs it (tasks on inventory nodes live elsewhere: no such columns for people).
    ``cluster``: what it is (``local``, the inventory file); None when none runs."""
    rows: list[Row] = [{"task": s.label, "node": s.node, "address": s.address, "pid": s.pid, "state": s.state,
                        "log": None if s.log is None else str(s.log)} for s in states]
    here = any(s.pid is not None or s.log is not None for s in states)
    columns = [Column("task", lambda r: r["task"]), Column("node", lambda r: r["node"]), Column("address", lambda r: r["address"])]
    if here:
        columns.append(Column("pid", lambda r: dash(r["pid"]), right=True, drop=2))
    columns.append(Column("state", lambda r: _state(r["state"])))
    if here:
        columns.append(Column("log", lambda r: dash(r["log"]), wrap=True, drop=1))
    up = cluster is not None and all(s.state == "up" for s in states if s.task is not None)
    return Listing("cluster/1", "tasks", STATUS_FIELDS, rows, [Fitted(columns, rows)], {"cluster": cluster, "up": up})
