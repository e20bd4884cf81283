"""Fan the steps out over every node: one step at a time on all nodes in parallel (bounded), so
the NFS master exports before any client mounts.  A node that fails to connect, stops answering,
rejects the key or wants a sudo password stops there; every other node goes on."""

import logging
import shutil
import socket
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path
from typing import Protocol

import paramiko

from picluster.cluster import hostkeys
from picluster.cluster.knownhosts import fingerprint
from picluster.cluster.ssh import AuthFailed, Remote, SudoPasswordRequired, Unreachable, connect, presented
from picluster.model import tokens
from picluster.model.fanout import fan_out
from picluster.model.inventory import Inventory, Node
from picluster.provision import facts as facts_mod
from picluster.provision.result import Item, NodeReport, Status, StepResult
from picluster.provision.steps import Context, Options, Shared, firewall, hostname, nfs, packages, raspi, runtime, slurm, ssh, users
from picluster.util.errors import ClusterError, UsageError

# -v: each step as it starts on a node, above the commands it runs there (cluster/ssh.py logs those).
log = logging.getLogger(__name__)

STEPS: dict[str, Callable] = {
    "hostname": hostname.run,
    "raspi": raspi.run,
    "packages": packages.run,
    "nfs-server": nfs.server,
    "nfs-client": nfs.client,
    "ssh": ssh.run,
    "users": users.run,
    "runtime": runtime.run,
    "firewall": firewall.run,
    "slurm": slurm.run,
    "queue": slurm.queue,
}
# What a step needs decided once for all nodes before it runs on any (in this thread, between steps).
PREPARE: dict[str, Callable[[list[Context]], None]] = {"users": users.prepare, "slurm": slurm.prepare}
STEP_NAMES = ("facts", *STEPS)
SLURM_STEPS = ("slurm", "queue")  # only for an inventory with [slurm]: nothing to skip otherwise


def parse_only(text: str | None) -> tuple[str, ...] | None:
    if text is None:
        return None
    names = [n.strip() for n in text.split(",") if n.strip()]
    unknown = [n for n in names if n not in STEP_NAMES]
    if unknown or not names:
        raise UsageError(f"--only {text!r}: unknown step {unknown[0] if unknown else '(none)'} (steps: {', '.join(STEP_NAMES)})")
    return tuple(n for n in STEP_NAMES if n in names)


def run_order(only: tuple[str, ...] | None, slurm: bool, users: bool = False) -> tuple[str, ...]:
    """The steps a run goes through: facts first, always; Slurm's when the inventory has [slurm],
    the users step when it has [users]."""
    if not slurm and only and set(only) & set(SLURM_STEPS):
        raise UsageError(f"--only {','.join(s for s in only if s in SLURM_STEPS)}: the inventory has no [slurm] table "
                         "(add one to make Slurm the cluster's queue)")
    if not users and only and "users" in only:
        raise UsageError("--only users: the inventory has no [users] table (add one to give people accounts; see docs/slurm.md)")
    return ("facts", *[s for s in (only or STEP_NAMES) if s != "facts" and (slurm or s not in SLURM_STEPS) and (users or s != "users")])


def public_key(key: Path | None) -> str | None:
    """The coordinator's public key line: KEY.pub, else derived from the private key."""
    if key is None:
        return None
    pub = Path(f"{key}.pub")
    if pub.is_file():
        try:
            text = pub.read_text(errors="replace").strip()
        except OSError as exc:
            raise UsageError(f"{pub}: cannot read: {exc.strerror}") from None
        if len(text.split()) >= 2:  # written into every node's authorized_keys: one plain key line
            return tokens.public_key_line(text, str(pub))
    try:
        pkey = paramiko.PKey.from_path(str(key))
    except FileNotFoundError:
        raise UsageError(f"cluster.ssh_key {key}: no such file") from None
    except (paramiko.SSHException, OSError, ValueError) as exc:
        raise UsageError(f"cluster.ssh_key {key}: not a usable private key ({exc})") from None
    return tokens.public_key_line(f"{pkey.get_name()} {pkey.get_base64()} picluster@{socket.gethostname()}", str(key))


class Watch(Protocol):
    """Told of progress as it happens (picluster.views.steps.StepProgress is one); ``node_finished``
    is called from the worker threads, ``status`` is a Status value ("ok", "changed", ...)."""

    def step_started(self, step: str, nodes: list[str]) -> None: ...

    def node_finished(self, node: str, step: str, status: str, seconds: float) -> None: ...


class _Node:
    def __init__(self, node: Node, remote: Remote, report: NodeReport, pinned: Item | None = None):
        self.node, self.remote, self.report = node, remote, report
        self.ctx: Context | None = None
        self.pinned = pinned  # its new host key, for a node written afresh (reported under facts)


def pin_new_key(node: Node, options: Options, policy: hostkeys.Policy) -> Item:
    """The host key ``node`` presents now (read without logging in), pinned in place of the old one."""
    try:
        key = presented(node.address, options.connect_timeout)
    except Unreachable as exc:
        return Item("host_key", Status.FAILED, f"unreachable: {exc}")
    pinned, old = hostkeys.replace(node.address, key, policy, dry_run=options.dry_run)
    was = f"was {', '.join(old)}" if old else "none was known"
    verb = "would pin" if options.dry_run else "pinned"
    where = " and ".join(map(str, pinned))
    return Item("host_key", Status.CHANGED, f"new host key {key.get_name()} {fingerprint(key)} {verb} in {where} ({was})")


def host_key_policy(options: Options) -> hostkeys.Policy:
    """--known-hosts: that file's keys only; else the process's policy (accept-new)."""
    return hostkeys.strict(options.known_hosts) if options.known_hosts is not None else hostkeys.current()


def provision(
    inv: Inventory,
    options: Options | None = None,
    on_step: Callable[[str, list[NodeReport]], None] | None = None,
    watch: Watch | None = None,
) -> list[NodeReport]:
    """Run the steps on every node; returns one report per node, in inventory order.

    ``on_step(step, reports)`` once a step has ended on every node; ``watch`` as each starts and ends."""
    options = options or Options()
    if inv.ssh_key is not None and not inv.ssh_key.is_file():
        raise UsageError(f"cluster.ssh_key {inv.ssh_key}: no such file")
    steps = run_order(options.only, inv.slurm is not None, bool(inv.users))
    shared = Shared(public_key=public_key(inv.ssh_key) if "ssh" in steps else None)
    policy = host_key_policy(options)  # a malformed file is refused here, before any connection
    # Before any connection checks a key: a replaced node's new key must be pinned.
    pinned = {node.name: pin_new_key(node, options, policy) for node in inv.nodes if node.name in options.replaced}
    nodes = []
    for node in inv.nodes:
        conn = connect(node.address, inv.user, inv.ssh_key, options.connect_timeout, policy)
        remote = Remote(
            conn, inv.user, dry_run=options.dry_run, timeout=options.timeout, open_timeout=options.connect_timeout, name=node.name,
        )
        nodes.append(_Node(node, remote, NodeReport(node.name), pinned.get(node.name)))
    reports = [n.report for n in nodes]
    try:
        for step in steps:
            # One step at a time on every node that has not stopped: the master exports first.
            live = [n for n in nodes if n.report.failure is None]
            if watch is not None:
                watch.step_started(step, [n.node.name for n in live])
            contexts = [n.ctx for n in live if n.ctx is not None]
            if step in PREPARE and contexts:
                PREPARE[step](contexts)
            fan_out(partial(_run_step, step=step, inv=inv, options=options, shared=shared, watch=watch), live,
                    name=lambda n: n.node.name, limit=options.fanout)
            if on_step is not None:
                on_step(step, reports)
    finally:
        for n in nodes:
            n.remote.close()
        if shared.wheel is not None:
            shutil.rmtree(shared.wheel.parent, ignore_errors=True)  # build_wheel's own mkdtemp
    return reports


def _run_step(n: _Node, step: str, inv: Inventory, options: Options, shared: Shared, watch: Watch | None = None) -> None:
    started = time.perf_counter()
    result = StepResult(step)
    n.report.steps.append(result)
    log.info("[%s] step: %s%s", n.node.name, step, " (dry run: nothing is changed)" if options.dry_run else "")
    try:
        if step == "facts" and n.pinned is not None:
            if n.pinned.status is Status.FAILED:
                raise Unreachable(n.pinned.detail.removeprefix("unreachable: "))
            result.items.append(n.pinned)
        if step == "facts":
            node_facts, items = facts_mod.gather(n.remote)
            result.items.extend(items)
            n.ctx = Context(inv, n.node, n.remote, node_facts, options, shared)
            with shared.lock:
                shared.facts[n.node.name] = node_facts
        else:
            for item in STEPS[step](n.ctx):
                result.items.append(item)
    except Unreachable as exc:
        n.report.unreachable = True
        n.report.failure = f"unreachable: {exc}"
        result.items.append(Item("error", Status.FAILED, n.report.failure))
    except (AuthFailed, SudoPasswordRequired, hostkeys.HostKeyRefused) as exc:
        n.report.failure = str(exc)
        result.items.append(Item("error", Status.FAILED, str(exc)))
    except ClusterError as exc:
        result.items.append(Item("error", Status.FAILED, str(exc)))
        if step == "facts":
            n.report.failure = str(exc)
    except Exception as exc:  # a bug or an unforeseen remote answer: this node only
        result.items.append(Item("error", Status.FAILED, f"{type(exc).__name__}: {exc}"))
    finally:
        took = time.perf_counter() - started
        n.report.seconds += took
    if result.status is Status.FAILED and n.report.failure is None:
        # Later steps build on this one (packages before NFS, NFS before mounts): stop here.
        n.report.failure = n.report.first_failure()
    if watch is not None:
        watch.node_finished(n.node.name, step, result.status.value, took)
