"""Reboot, upgrade and shut down an inventory's nodes, wave by wave (order.py), each node checked
back (health.py) before the next wave starts; the first wave with a node that is not back ends
the chore, naming that node and the nodes left untouched.

    done = reboot(inv, plan, timeout=600, say=print)     # node -> its line, said as each ends
    done = upgrade(inv, plan, timeout=600, say=print)    # apt-get dist-upgrade; reboot if required
    shutdown(inv, plan, timeout=300, say=print)          # each wave off before the next is asked

The commands are the node's own: ``systemctl reboot`` and ``poweroff``, apt-get.  Packages keep
the configuration files provisioning wrote (--force-confold).
"""

import re
import time
from collections.abc import Callable

from picluster import nodeset
from picluster.cluster.nodes import open_node
from picluster.cluster.ssh import Unreachable
from picluster.errors import ClusterError
from picluster.fanout import fan_out, fold
from picluster.inventory import Inventory, Node
from picluster.upkeep import health
from picluster.upkeep.order import RANKS, Wave

Say = Callable[[str], None]
APT = "DEBIAN_FRONTEND=noninteractive apt-get -q"
KEEP_CONFIG = "-o Dpkg::Options::=--force-confdef -o Dpkg::Options::=--force-confold"
REBOOT_REQUIRED = "/var/run/reboot-required"  # written by the packages that hook it (unattended-upgrades, for a kernel)
# apt-get update exits 0 when a source cannot be fetched: its warnings say so.
FETCH_FAILED = re.compile(r"^(W|E): (Failed to fetch|Some index files failed)", re.MULTILINE)
UPGRADED = re.compile(r"^(\d+) upgraded, (\d+) newly installed", re.MULTILINE)
APT_TIMEOUT = 3600.0
THIS_MACHINE = RANKS[-1]


def reboot(inv: Inventory, plan: list[Wave], timeout: float, say: Say) -> dict[str, str]:
    return _by_waves(inv, plan, "rebooted", lambda node: _reboot(inv, node, timeout), say)


def upgrade(inv: Inventory, plan: list[Wave], timeout: float, say: Say) -> dict[str, str]:
    return _by_waves(inv, plan, "upgraded", lambda node: _upgrade(inv, node, timeout), say)


def shutdown(inv: Inventory, plan: list[Wave], timeout: float, say: Say) -> dict[str, str]:
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
        for node in nodes:
            done[node.name] = line
        say(f"{nodeset.fold(n.name for n in nodes)}: {line}")
    return done


# -- one node -------------------------------------------------------------------------------------


def _reboot(inv: Inventory, node: Node, timeout: float) -> str:
    before = health.look(inv, node)
    started = time.monotonic()
    _ask(inv, node, "systemctl reboot")
    return f"rebooted, {health.wait_back(inv, node, before, timeout, started).describe()}"


def _upgrade(inv: Inventory, node: Node, timeout: float) -> str:
    before = health.look(inv, node)
    remote = open_node(inv, node)
    try:
        update = remote.run(f"{APT} update", sudo=True, check=False, timeout=APT_TIMEOUT)
        said = f"{update.stdout}\n{update.stderr}"
        if update.exited != 0 or FETCH_FAILED.search(said):
            raise ClusterError(f"apt-get update failed ({_apt_line(said)}); nothing was upgraded there")
        result = remote.run(f"{APT} -y {KEEP_CONFIG} dist-upgrade", sudo=True, check=False, timeout=APT_TIMEOUT)
        if result.exited != 0:
            raise ClusterError(f"apt-get dist-upgrade failed: {_apt_line(result.stdout + result.stderr)}")
        counts = UPGRADED.search(result.stdout)
        upgraded = f"{counts.group(1)} upgraded, {counts.group(2)} newly installed" if counts else "apt said nothing"
        needs_reboot = remote.ok(f"test -f {REBOOT_REQUIRED}")
    finally:
        remote.close()
    if not needs_reboot:
        health.still_answering(inv, node, before)
        return f"{upgraded}; no reboot required"
    started = time.monotonic()
    _ask(inv, node, "systemctl reboot")
    return f"{upgraded}; reboot required: rebooted, {health.wait_back(inv, node, before, timeout, started).describe()}"


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
