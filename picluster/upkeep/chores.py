"""Reboot, upgrade and shut down an inventory's nodes, wave by wave (order.py), each node checked
back (health.py) before the next wave starts; the first wave with a node that is not back ends
the chore, naming that node and the nodes left untouched.

    done = reboot(inv, plan, timeout=600, say=print)     # node -> its line, said as each ends
    done = upgrade(inv, plan, timeout=600, say=print)    # apt-get dist-upgrade; reboot if required
    shutdown(inv, plan, timeout=300, say=print)          # each wave off before the next is asked

The commands are the node's own: ``systemctl reboot`` and ``poweroff``, apt-get.  Packages keep
the configuration files provisioning wrote (--force-confold).  With [slurm], each node is drained
and its jobs end (or are requeued) before it goes, and it is resumed once slurmd is back
(drain.py); a node shut down stays drained until a reboot brings it back.
"""

import re
import time
from collections.abc import Callable

from picluster.cluster.nodecluster import open_node
from picluster.cluster.ssh import Unreachable
from picluster.model import nodeset
from picluster.model.fanout import fan_out, fold
from picluster.model.inventory import Inventory, Node
from picluster.upkeep import health
from picluster.upkeep.drain import NoQueue, Queue
from picluster.upkeep.order import RANKS, Wave
from picluster.util.errors import ClusterError

Say = Callable[[str], None]
APT = "DEBIAN_FRONTEND=noninteractive apt-get -q"
KEEP_CONFIG = "-o Dpkg::Options::=--force-confdef -o Dpkg::Options::=--force-confold"
REBOOT_REQUIRED = "/var/run/reboot-required"  # written by the packages that hook it (unattended-upgrades, for a kernel)
# apt-get update exits 0 when a source cannot be fetched: its warnings say so.
FETCH_FAILED = re.compile(r"^(W|E): (Failed to fetch|Some index files failed)", re.MULTILINE)
UPGRADED = re.compile(r"^(\d+) upgraded, (\d+) newly installed", re.MULTILINE)
APT_TIMEOUT = 3600.0
# apt 2.6: "E: Could not get lock /var/lib/dpkg/lock-frontend. It is held by process 1234 (unattended-upgr)";
# apt-get update's lists lock is not covered by DPkg::Lock::Timeout, so picluster waits itself.
LOCKED = re.compile(r"Could not get lock (?P<path>/[^\s]+?)\.?(?:\s|$)(?:It is held by process (?P<pid>\d+)(?: \((?P<name>[^)]*)\))?)?")
LOCK_POLL_S = 5.0
THIS_MACHINE = RANKS[-1]


def reboot(inv: Inventory, plan: list[Wave], timeout: float, say: Say, requeue: bool = False) -> dict[str, str]:
    queue = Queue.of(inv)
    return _by_waves(inv, plan, "rebooted", lambda node: _reboot(inv, queue, node, timeout, requeue, say), say)


def upgrade(inv: Inventory, plan: list[Wave], timeout: float, say: Say, requeue: bool = False) -> dict[str, str]:
    queue = Queue.of(inv)
    return _by_waves(inv, plan, "upgraded", lambda node: _upgrade(inv, queue, node, timeout, requeue, say), say)


def shutdown(inv: Inventory, plan: list[Wave], timeout: float, say: Say, requeue: bool = False) -> dict[str, str]:
    queue = Queue.of(inv)
    done: dict[str, str] = {}
    for index, wave in enumerate(plan):
        nodes = [inv.node(name) for name in wave.nodes]
        started = time.monotonic()
        # A node already off (nothing answers at its address) is what was asked for: not a failure.
        off = {node.name for node in nodes if health.silent(node.address)}
        for name in sorted(off):
            done[name] = "already off"
            say(f"{name}: already off")
        nodes = [node for node in nodes if node.name not in off]
        if not nodes:
            continue
        held = fan_out(lambda node: queue.hold(node, "shutdown", requeue, say), nodes)
        if held.failed:
            for h in held.succeeded.values():
                queue.undo(h)
            raise ClusterError(_stopped("shut down", held.failed, plan[index:]))
        asked = fan_out(lambda node: _ask(inv, node, "systemctl poweroff"), nodes)
        if asked.failed:
            raise ClusterError(_stopped("shut down", asked.failed, plan[index + 1:]))
        if wave.rank == THIS_MACHINE:  # nothing is left to wait with
            line = "asked to power off: this machine goes down now"
        else:
            try:
                line = f"off after {health.wait_gone(nodes, timeout, started):.0f} s"
            except ClusterError as exc:
                raise ClusterError(f"{exc}; not shut down: {_names(plan[index + 1:])}") from None
        if any(h.ours for h in held.succeeded.values()):
            line += "; drained in Slurm until 'picluster nodes reboot' brings it back"
        for node in nodes:
            done[node.name] = line
        say(f"{nodeset.fold(n.name for n in nodes)}: {line}")
    return done


# -- one node -------------------------------------------------------------------------------------


def _reboot(inv: Inventory, queue: Queue | NoQueue, node: Node, timeout: float, requeue: bool, say: Say) -> str:
    held = queue.hold(node, "reboot", requeue, say)
    try:
        before = health.look(inv, node)
        started = time.monotonic()
        _ask(inv, node, "systemctl reboot")
    except BaseException:
        queue.undo(held)  # it did not go: serve again
        raise
    back = health.wait_back(inv, node, before, timeout, started)
    return _served(f"rebooted, {back.describe()}", queue.release(held, rebooted=True, timeout=timeout))


def _upgrade(inv: Inventory, queue: Queue | NoQueue, node: Node, timeout: float, requeue: bool, say: Say) -> str:
    held = queue.hold(node, "upgrade", requeue, say)
    remote = None
    try:
        before = health.look(inv, node)
        remote = open_node(inv, node)
        update = _apt(remote, node, "update", timeout, say)
        said = f"{update.stdout}\n{update.stderr}"
        if update.exited != 0 or FETCH_FAILED.search(said):
            raise ClusterError(f"apt-get update failed ({_apt_line(said)}); nothing was upgraded there")
    except BaseException:
        queue.undo(held)  # nothing was changed on it
        if remote is not None:
            remote.close()
        raise
    try:
        result = _apt(remote, node, f"-y {KEEP_CONFIG} dist-upgrade", timeout, say)
        if result.exited != 0:
            stuck = "; left drained in Slurm" if held.ours else ""
            raise ClusterError(f"apt-get dist-upgrade failed: {_apt_line(result.stdout + result.stderr)}{stuck}")
        counts = UPGRADED.search(result.stdout)
        upgraded = f"{counts.group(1)} upgraded, {counts.group(2)} newly installed" if counts else "apt said nothing"
        needs_reboot = remote.ok(f"test -f {REBOOT_REQUIRED}")
    finally:
        remote.close()
    if not needs_reboot:
        health.still_answering(inv, node, before)
        return _served(f"{upgraded}; no reboot required", queue.release(held, rebooted=False, timeout=timeout))
    started = time.monotonic()
    _ask(inv, node, "systemctl reboot")
    back = health.wait_back(inv, node, before, timeout, started)
    return _served(f"{upgraded}; reboot required: rebooted, {back.describe()}", queue.release(held, rebooted=True, timeout=timeout))


def _apt(remote, node: Node, args: str, wait: float, say: Say):
    """apt-get ``args`` as root; while another apt or dpkg holds its lock (unattended-upgrades at
    boot, a user's apt), try again every few seconds for ``wait`` s, saying once who holds it."""
    deadline = time.monotonic() + wait
    told = ""
    while True:
        result = remote.run(f"{APT} {args}", sudo=True, check=False, timeout=APT_TIMEOUT)
        locked = LOCKED.search(f"{result.stdout}\n{result.stderr}") if result.exited != 0 else None
        if locked is None:
            return result
        holder = _holder(locked)
        if time.monotonic() > deadline:
            raise ClusterError(f"apt's lock {locked.group('path')} still held{holder} after {wait:.0f} s; nothing was upgraded there")
        if holder != told:
            say(f"{node.name}: waiting for apt's lock {locked.group('path')}{holder}")
            told = holder
        time.sleep(LOCK_POLL_S)


def _holder(locked: re.Match) -> str:
    if not locked.group("pid"):
        return ""
    return f" by process {locked.group('pid')}" + (f" ({locked.group('name')})" if locked.group("name") else "")


def _served(line: str, queue_said: str) -> str:
    return f"{line}; {queue_said}" if queue_said else line


def _ask(inv: Inventory, node: Node, command: str) -> None:
    """Run ``command`` as root; a connection that drops under it counts as done (the node is going)."""
    remote = open_node(inv, node)
    try:
        result = remote.run(command, sudo=True, check=False, timeout=30)
    except Unreachable:
        return
    finally:
        remote.close()
    if result.exited not in (0, -1):
        why = (result.stderr or result.stdout).strip().splitlines()
        raise ClusterError(f"{command} failed: {why[-1] if why else f'exit code {result.exited}'}")


# -- waves ----------------------------------------------------------------------------------------


def _by_waves(inv: Inventory, plan: list[Wave], past: str, work: Callable[[Node], str], say: Say) -> dict[str, str]:
    done: dict[str, str] = {}
    for index, wave in enumerate(plan):
        results = fan_out(work, [inv.node(name) for name in wave.nodes])
        for name, line in results.succeeded.items():
            done[name] = line
            say(f"{name}: {line}")
        if results.failed:
            raise ClusterError(_stopped(past, results.failed, plan[index + 1:]))
    return done


def _stopped(past: str, failed: dict, rest: list[Wave]) -> str:
    left = f"; not {past}: {_names(rest)}" if rest else ""
    return f"{'; '.join(fold(failed))}{left}"


def _names(waves: list[Wave]) -> str:
    names = [name for wave in waves for name in wave.nodes]
    return nodeset.fold(names) if names else "none"


def _apt_line(text: str) -> str:
    lines = [ln.strip() for ln in text.splitlines() if ln.strip().startswith(("E:", "W:"))] or [ln.strip() for ln in text.splitlines() if ln.strip()]
    return lines[-1][:200] if lines else "no output"
