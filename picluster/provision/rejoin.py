"""A node written afresh, once provisioned, rejoins a running cluster: its tasks and agent are
started as `cluster up` would (only what is missing), when any other node's task answers.  A
cluster that is down stays down: `picluster cluster up` is the owner's to run."""

from picluster.cluster.nodecluster import NodeCluster, up
from picluster.model.inventory import Inventory

START_TIMEOUT = 600.0  # TensorFlow loads in seconds on a Pi 4, minutes on an emulated VM


def start_tasks(inv: Inventory, names: list[str], timeout: float = START_TIMEOUT) -> dict[str, list[str]] | None:
    """Per node of ``names``, what was started there; None when the rest of the cluster is not up."""
    states = NodeCluster(inv).status()
    if not any(s.state == "up" for s in states if s.node not in names):
        return None
    started = up(inv, timeout)
    return {name: list(started.get(name, [])) for name in names}
