"""What a lab's hosts are: network namespaces on this machine's kernel, or VMs with their own.

``Lab`` (lab.py) owns what every lab has whatever its hosts: the plan, the bridge, the login key,
known_hosts, the state file, the inventory, status and teardown.  What differs between the two
kinds of host sits behind this seam, one object per lab:

- ``check(nodes)``    refuse in one line before anything exists (support, memory, the VM image)
- ``new_host(lab, i)``  the host object for node i of the lab's plan (``Host`` or ``VMHost``)
- ``create(lab)``     each host's link on the bridge (a namespace and its veth; a tap)
- ``start(lab, key)`` each host's files, then start it; returns the known_hosts lines
- ``ready(lab)``      after every host answered SSH
- ``reboot(lab, hosts, timeout)``  restart hosts that have a kernel of their own
- ``reset(lab, host, timeout)``  a host as a freshly written card (VMs only)

Both kinds give their hosts the same attributes the lab's life cycle reads: name, index, address,
veth (the link on the bridge: a veth or a tap), netns (None for a VM), net_inode/mnt_inode,
pid, cgroup (None for a VM), alive(), log_tail(), to_dict(), and run/read_file/write_file as root
inside the host.
"""

import ipaddress
import sys
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

from picluster.lab import cgroups, commands, netns
from picluster.lab.host import Host, HostOptions, shared_under_tmp, untraversable_dirs
from picluster.util import verbosity
from picluster.util.errors import UsageError

NETNS, VM = "netns", "vm"
# This machine's own Debian architecture; a VM lab may also have the Pi's (lab/vm/image.py's ARCHES).
NATIVE_ARCH = "amd64"


def say_stderr(line: str) -> None:
    verbosity.say(f"picluster: {line}")  # a progress line: not under -q


class NamespaceHosts:
    """Hosts in network, UTS and mount namespaces of this machine, each running its own sshd."""

    name = NETNS
    default_timeout = 60.0

    def check(self, nodes: int, host_options: dict[str, HostOptions] | None = None) -> None:
        commands.require_support()

    def new_host(self, lab, index: int) -> Host:
        from picluster.lab import naming

        name = naming.host_name(index)
        options = lab.host_options.get(name, HostOptions())
        if not options.limits and lab.limits:  # the lab's limits, unless the host has its own
            options = replace(options, limits=lab.limits)
        return Host(
            name=name,
            index=index,
            address=lab.plan.address(index),
            netns=naming.netns(lab.id, name),
            veth=naming.veth(lab.id, index),
            dir=lab.run_dir / "hosts" / name,
            options=options,
        )

    def host_from_dict(self, data: dict, lab) -> Host:
        return Host.from_dict(data)

    def create(self, lab) -> None:
        prefix = lab.subnet.prefixlen
        for host in lab.hosts:
            netns.create_netns(host.netns)
            netns.create_host_link(host.netns, host.veth, lab.bridge, ipaddress.IPv4Interface(f"{host.address}/{prefix}"))

    def start(self, lab, login_line: str) -> list[str]:
        traversable = untraversable_dirs([Path(sys.executable).resolve(), Path(sys.executable).parent])
        label, keep = f"lab {lab.id}", shared_under_tmp()
        known = [f"{h.address} {h.prepare(lab.user, login_line, traversable, label, keep)}" for h in lab.hosts]
        for host in lab.hosts:
            if host.options.limits:
                host.cgroup = cgroups.cgroup_name(lab.id, host.name)
                lab.save()  # before it exists: a teardown after a crash here must find it
                cgroups.Cgroup(host.cgroup).create(host.options.limits)
            lab.adopt(host.start(lab.owned))
            lab.save()
        return known

    def ready(self, lab) -> None:
        for host in lab.hosts:
            host.record_namespaces()
            host.save_baseline()

    def reboot(self, lab, hosts: list, timeout: float) -> dict[str, float]:
        raise UsageError("namespace hosts run on this machine's kernel and cannot reboot: use a VM lab (lab up --vm)")

    def reset(self, lab, host, timeout: float) -> str:
        raise UsageError("namespace hosts share this machine's files and cannot be written afresh: use a VM lab (lab up --vm)")

    def describe(self) -> str:
        return "network namespaces"


def make(kind: str, say: Callable[[str], None] | None = None, arch: str = NATIVE_ARCH):
    """The host kind named `kind` ("netns" or "vm"); VMs of Debian architecture `arch`."""
    if kind == NETNS:
        if arch != NATIVE_ARCH:
            raise UsageError(f"--arch {arch} needs --vm: namespace hosts run this machine's own {NATIVE_ARCH} programs")
        return NamespaceHosts()
    if kind == VM:
        from picluster.lab.vm.kind import VMHosts

        return VMHosts(say or say_stderr, arch)
    raise UsageError(f"unknown kind of lab host {kind!r}: use {NETNS} or {VM}")


def sweep_leftovers(run_dir: Path) -> list[int]:
    """Processes of a lab that no namespace gives away: a VM's qemu, found by its disks in the
    run dir (also when the lab's state file is gone)."""
    from picluster.lab import procs

    return procs.naming_path(run_dir)
