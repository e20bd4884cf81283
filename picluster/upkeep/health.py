"""Whether a node is back: a new boot, SSH, and what answered before it went answering again.

    before = look(inv, node)                 # its boot id and what answers now (tasks, agent)
    ...                                      # the node reboots
    back = wait_back(inv, node, before, 600) # raises ClusterError naming what did not come back
    wait_gone([node], 120)                   # after a shutdown: the host itself no longer answers

"What answered before" is the check, not "every task of the layout": a node whose cluster was
down before its reboot has nothing to bring back (its start script is gone, cluster/nodes.py).
"""

import errno
import socket
import time
from dataclasses import dataclass
from shlex import quote as q

from picluster.cluster.nodecluster import open_node
from picluster.cluster.probe import answers
from picluster.model import nodeset
from picluster.model.clusterspec import from_inventory
from picluster.model.inventory import Inventory, Node
from picluster.util.errors import ClusterError

SSH_PORT = 22
SHARE = "share"  # the label of the NFS share among what answered
POLL_S = 2.0
AGENT = "agent"


@dataclass(frozen=True)
class Before:
    boot_id: str
    answering: tuple[str, ...]  # labels: "ps:0", "worker:1", "agent", "share"
    share: str = ""  # what was mounted on the inventory's data_dir (findmnt's SOURCE), "" if nothing


@dataclass(frozen=True)
class Back:
    ssh_s: float  # from the chore's command until SSH answered from the new boot
    ready_s: float  # until everything in `answering` answered too
    answering: tuple[str, ...]

    def describe(self) -> str:
        what = ", ".join(self.answering) if self.answering else "nothing was running"
        return f"back in {self.ready_s:.0f} s (SSH after {self.ssh_s:.0f} s; {what})"


def endpoints(inv: Inventory, node: Node) -> dict[str, tuple[str, int]]:
    """label -> (address, port): the node's tasks, then its agent."""
    tasks = {t.label: (t.host, t.port) for t in from_inventory(inv).tasks if t.node == node.name}
    return tasks | {AGENT: (node.address, inv.agent_port)}


def boot_id(inv: Inventory, node: Node, timeout: float = 10.0) -> str:
    remote = open_node(inv, node, timeout)
    try:
        return remote.out("cat /proc/sys/kernel/random/boot_id")
    finally:
        remote.close()


def mounted(inv: Inventory, node: Node, timeout: float = 10.0) -> str:
    """The source mounted on the node's data_dir (the NFS share), "" if none."""
    remote = open_node(inv, node, timeout)
    try:
        return remote.run(f"findmnt -n -o SOURCE --mountpoint {q(str(inv.data_dir))}", check=False).stdout.strip()
    finally:
        remote.close()


def look(inv: Inventory, node: Node) -> Before:
    answering = tuple(label for label, (host, port) in endpoints(inv, node).items() if answers(host, port, 2.0))
    remote = open_node(inv, node)  # the boot id and the share over one connection
    try:
        boot = remote.out("cat /proc/sys/kernel/random/boot_id")
        share = remote.run(f"findmnt -n -o SOURCE --mountpoint {q(str(inv.data_dir))}", check=False).stdout.strip()
    finally:
        remote.close()
    return Before(boot, answering + ((SHARE,) if share else ()), share)


def _answers(inv: Inventory, node: Node, label: str, before: Before, wanted: dict[str, tuple[str, int]]) -> bool:
    if label == SHARE:
        try:
            return mounted(inv, node) == before.share
        except ClusterError:
            return False
    return answers(*wanted[label], 2.0)


def wait_back(inv: Inventory, node: Node, before: Before, timeout: float, started: float | None = None) -> Back:
    """Once the node answers SSH from a boot other than ``before``'s and everything that answered
    then answers again; ClusterError after ``timeout`` s naming what is still missing."""
    started = time.monotonic() if started is None else started
    deadline = started + timeout
    ssh_s = None
    while ssh_s is None:
        try:
            if boot_id(inv, node, timeout=min(10.0, timeout)) != before.boot_id:
                ssh_s = time.monotonic() - started
                break
            seen = "still its old boot"
        except ClusterError as exc:
            seen = f"SSH: {exc}"
        if time.monotonic() > deadline:
            raise ClusterError(f"did not come back within {timeout:.0f} s ({seen})")
        time.sleep(POLL_S)
    wanted = endpoints(inv, node)
    missing = list(before.answering)
    while missing:
        missing = [label for label in missing if not _answers(inv, node, label, before, wanted)]
        if SHARE in missing and time.monotonic() > deadline:
            raise ClusterError(f"back (SSH after {ssh_s:.0f} s) but the share ({before.share}) is not mounted on "
                               f"{inv.data_dir} after {timeout:.0f} s: see 'systemctl status {_mount_unit(inv)}' there")
        if missing and time.monotonic() > deadline:
            raise ClusterError(f"back (SSH after {ssh_s:.0f} s) but {', '.join(missing)} did not answer "
                               f"within {timeout:.0f} s: see ~/.local/state/picluster/node/*.log and "
                               "'systemctl status picluster-node' there")
        if missing:
            time.sleep(POLL_S)
    return Back(ssh_s, time.monotonic() - started, before.answering)


def still_answering(inv: Inventory, node: Node, before: Before) -> None:
    """After a chore that did not reboot: what answered before still answers."""
    wanted = endpoints(inv, node)
    missing = [label for label in before.answering if not _answers(inv, node, label, before, wanted)]
    if missing:
        raise ClusterError(f"{', '.join(missing)} stopped answering")


def _mount_unit(inv: Inventory) -> str:
    """systemd's mount unit for data_dir (/mnt/picluster -> mnt-picluster.mount)."""
    return str(inv.data_dir).strip("/").replace("-", "\\x2d").replace("/", "-") + ".mount"


def silent(address: str, port: int = SSH_PORT, timeout: float = 3.0) -> bool:
    """Whether nothing at ``address`` answers at all: no SSH, and no kernel refusing the port.

    A refused connection means the machine is still up with its sshd stopped (a shutdown under
    way); only a timeout or an unreachable host means it is off."""
    try:
        with socket.create_connection((address, port), timeout=timeout):
            return False
    except ConnectionRefusedError:
        return False
    except TimeoutError:
        return True
    except OSError as exc:
        return exc.errno in (errno.EHOSTUNREACH, errno.ENETUNREACH, errno.EHOSTDOWN)


def wait_gone(nodes: list[Node], timeout: float, started: float | None = None) -> float:
    """Seconds until every node is silent twice in a row; ClusterError naming those that are not."""
    started = time.monotonic() if started is None else started
    pending = {n.name: n for n in nodes}
    once: set[str] = set()
    while pending:
        for name, node in list(pending.items()):
            if silent(node.address):
                if name in once:
                    del pending[name]
                once.add(name)
            else:
                once.discard(name)
        if pending and time.monotonic() - started > timeout:
            raise ClusterError(f"{nodeset.fold(pending)} still answer{'s' if len(pending) == 1 else ''} "
                               f"{timeout:.0f} s after the shutdown was asked for")
        if pending:
            time.sleep(POLL_S)
    return time.monotonic() - started
