"""A VM's link: a tap device on the lab's bridge, named like a namespace host's veth.

The tap takes the name a namespace host's veth would have (``pcl-<lab id>-NN``, naming.veth), so
naming.lab_of_link() maps it back to its lab and a lab's teardown, which deletes every link named
after the lab, finds it even when nothing else about the VM is left.
"""

import hashlib

from picluster.lab import commands, naming, netns


def name(lab_id: str, index: int) -> str:
    return naming.veth(lab_id, index)


def mac(tap: str) -> str:
    """A stable, locally administered MAC for the VM behind `tap` (qemu's own 52:54:00 prefix)."""
    digest = hashlib.sha256(tap.encode()).digest()
    return "52:54:00:" + ":".join(f"{b:02x}" for b in digest[:3])


def create(tap: str, bridge: str) -> None:
    """A persistent tap, enslaved to `bridge` and up; qemu opens it by name (script=no)."""
    commands.run(["ip", "tuntap", "add", "dev", tap, "mode", "tap"])
    try:
        # As on the lab's veths: no IPv6 link-local address, so nothing but the guest's IPv4.
        commands.run(["ip", "link", "set", tap, "addrgenmode", "none"])
        commands.run(["ip", "link", "set", tap, "master", bridge, "up"])
    except BaseException:
        delete(tap)
        raise


def exists(tap: str) -> bool:
    return netns.link_is_up(tap) is not None


def delete(tap: str) -> None:
    netns.delete_link(tap)
