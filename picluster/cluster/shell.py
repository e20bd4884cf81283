"""One shell command on a set of the inventory's nodes at once, as ClusterShell's clush runs it:
each node's output and exit code, or why the node could not be asked; each node's as it ends.

The nodes are reached as every other command reaches them (the inventory's user and key, the
process's host-key policy: cluster/nodecluster.open_node), at most ``fanout`` at a time.  A node that
cannot be reached, refuses the key or asks sudo for a password is that node's failure; the others
run on.
"""

from collections.abc import Callable
from dataclasses import dataclass

from picluster.cluster.nodecluster import open_node
from picluster.model.fanout import FANOUT, Results, fan_out
from picluster.model.inventory import Inventory


@dataclass(frozen=True)
class Ran:
    stdout: str
    stderr: str
    code: int

    @property
    def output(self) -> str:
        """Its stdout, then its stderr."""
        return self.stdout + self.stderr


def run_on(inv: Inventory, names: list[str], command: str, *, sudo: bool = False, timeout: float = 60.0,
           fanout: int = FANOUT, on_done: Callable[[str, Ran], None] | None = None) -> "Results[Ran]":
    """``command`` (a line for the node's shell, as ssh passes it) on each node of ``names``; as
    root through ``sudo -n`` with ``sudo``.  ``timeout``: seconds each node's command may run.
    ``on_done(name, ran)`` is called as each node's command ends (from that node's thread)."""

    def one(name: str) -> Ran:
        remote = open_node(inv, inv.node(name))
        try:
            done = remote.run(command, sudo=sudo, check=False, timeout=timeout)
        finally:
            remote.close()
        ran = Ran(done.stdout, done.stderr, done.exited)
        if on_done is not None:
            on_done(name, ran)
        return ran

    return fan_out(one, names, limit=fanout)
