"""Readiness: whether a task's server (or an agent) accepts TCP connections, and waiting for it."""

import socket
import time
from collections.abc import Iterable

from picluster.model import nodeset
from picluster.model.clusterspec import Task
from picluster.util.errors import ClusterError


def answers(host: str, port: int, timeout: float = 0.5) -> bool:
    """Whether something accepts TCP connections there (a task's server, an agent)."""
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False


def unanswered(tasks: Iterable[Task], tries: int = 1, timeout: float = 2.0, pause: float = 0.5) -> list[Task]:
    """The tasks whose server accepted no connection in ``tries`` attempts (a busy one may be slow)."""
    pending = list(tasks)
    for attempt in range(tries):
        if attempt:
            time.sleep(pause)
        pending = [t for t in pending if not answers(t.host, t.port, timeout)]
        if not pending:
            break
    return pending


def wait_answering(tasks: Iterable[Task], timeout: float) -> None:
    """Return once every task answers; after ``timeout`` seconds name the nodes that do not."""
    deadline = time.monotonic() + timeout
    pending = list(tasks)
    while pending:
        pending = [t for t in pending if not answers(t.host, t.port)]
        if pending and time.monotonic() > deadline:
            labels = ", ".join(t.label for t in pending)
            raise ClusterError(f"{nodeset.fold(t.node for t in pending)}: not answering after {timeout:.0f} s ({labels})")
        if pending:
            time.sleep(0.2)
