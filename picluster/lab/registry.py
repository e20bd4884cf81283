"""The labs on this machine: which exist (state dirs and kernel objects named after them), who owns
each, the lock that keeps two new labs apart, and sweeping away everything named after one.

It knows labs by id, not as ``Lab`` objects: labs.py opens and ends them (lab.py builds on this
module, so this one must not build on lab.py)."""

import contextlib
import fcntl
import os
import shutil
from collections.abc import Callable, Iterator
from functools import partial
from pathlib import Path

from picluster.lab import cgroups, commands, kinds, links, naming, netns, procs
from picluster.util import paths
from picluster.util.errors import ClusterError
from picluster.util.processes import same_process, start_time

_LOCK = Path("/run/lock/picluster-lab.lock")


def state_root() -> Path:
    return paths.state_dir() / "lab"


def known_ids(root: Path | None = None) -> list[str]:
    """Labs with a state dir under `root`, plus any whose kernel objects exist on this machine."""
    root = Path(root) if root else state_root()
    ids = set()
    if root.is_dir():
        ids |= {p.name for p in root.iterdir() if naming.ID_PATTERN.match(p.name) and p.is_dir()}
    ids |= {i for i in map(naming.lab_of_netns, netns.netns_names()) if i}
    ids |= {i for i in map(naming.lab_of_link, netns.link_names()) if i}
    if shutil.which("nft"):
        ids |= {i for i in map(naming.lab_of_link, links.tables()) if i}
    ids |= {i for i in cgroups.lab_groups() if naming.ID_PATTERN.match(i)}
    return sorted(ids)


def this_owner() -> dict:
    """This process, as a lab's state file names its owner (the start time tells a reused pid)."""
    return {"pid": os.getpid(), "started": start_time(os.getpid())}


def owner_alive(owner: dict) -> bool:
    return isinstance(owner, dict) and same_process(owner.get("pid"), owner.get("started"))


@contextlib.contextmanager
def lock() -> Iterator[None]:
    """Two labs starting at once must not pick the same id or subnet."""
    _LOCK.parent.mkdir(parents=True, exist_ok=True)
    with open(_LOCK, "a") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(held, fcntl.LOCK_UN)


def sweep(lab_id: str, run_dir: Path, hosts: list, children: list) -> list[str]:
    """End everything of lab ``lab_id``: the hosts' processes (sshds in its namespaces, qemus of
    its VMs), then every kernel object named after it (a VM's tap is named like a veth), mounts
    into its run dir and the run dir (a VM's disks).  What could not be removed, as messages."""
    problems = []
    namespaces = {host.netns for host in hosts if host.netns} | {
        name for name in netns.netns_names() if naming.lab_of_netns(name) == lab_id
    }
    net = {procs.netns_inode(name) for name in namespaces} | {h.net_inode for h in hosts}
    mnt = {h.mnt_inode for h in hosts}
    groups = {h.cgroup for h in hosts if h.cgroup}
    groups |= {cgroups.cgroup_name(lab_id, name) for name in cgroups.lab_groups().get(lab_id, [])}
    held = [cgroups.Cgroup(name) for name in sorted(groups)]
    pids = set(procs.in_namespaces(net, mnt))
    pids |= {h.pid for h in hosts if h.alive()}
    for group in held:  # a host's cgroup holds all it ever started, wherever that went
        pids |= set(group.pids())
    pids |= set(kinds.sweep_leftovers(run_dir))  # VMs: qemu, found by its disks
    left = procs.kill_all(sorted(pids))
    if left:
        problems.append(f"processes {left} would not die")
    for child in children:
        with contextlib.suppress(Exception):
            child.wait(timeout=5)

    steps: list[Callable[[], object]] = [lambda: links.delete_table(naming.nft_table(lab_id))]
    steps += [partial(netns.delete_netns, name) for name in sorted(namespaces)]
    lab_links = {h.veth for h in hosts} | {naming.bridge(lab_id)}
    lab_links |= {name for name in netns.link_names() if naming.lab_of_link(name) == lab_id}
    steps += [partial(netns.delete_link, name) for name in sorted(lab_links, reverse=True)]
    steps += [group.remove for group in held]
    steps.append(lambda: cgroups.Cgroup(f"{cgroups.PARENT}/{lab_id}").remove())  # a lab level left without hosts
    steps.append(lambda: _unmount_under(run_dir))
    steps.append(lambda: shutil.rmtree(run_dir) if run_dir.exists() else None)
    for step in steps:
        try:
            step()
        except (ClusterError, OSError) as exc:
            problems.append(str(exc))
    return problems


def _unmount_under(run_dir: Path) -> None:
    # The hosts' mounts live in their own mount namespaces and vanish with their processes;
    # this only catches someone having mounted something into the run dir by hand.
    real = os.path.realpath(run_dir)
    with open("/proc/self/mountinfo") as f:
        targets = [line.split()[4].encode().decode("unicode_escape") for line in f]
    for target in reversed(targets):
        if target == real or target.startswith(real + "/"):
            commands.run(["umount", "-l", target])

