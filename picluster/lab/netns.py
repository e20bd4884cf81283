"""Network plumbing of a lab, through `ip`: a bridge in the root namespace, one namespace per host,
a veth pair between them, and a free private subnet.

No forwarding and no NAT are set up: a host has a route to the lab subnet and nothing else.
IPv6 address generation is off on every lab link, so hosts send nothing (not even router
solicitations) beyond their IPv4 subnet.
"""

import ipaddress
import json
from collections.abc import Iterable

from picluster.lab import commands
from picluster.util.errors import ClusterError

# /24s are taken from these, first free one wins; both are rarely used by real networks.
SUBNET_POOLS = (ipaddress.IPv4Network("10.213.0.0/16"), ipaddress.IPv4Network("172.31.0.0/16"))

HOST_IFACE = "eth0"


def _ip_json(*args: str) -> list:
    out = commands.run(["ip", "-j", *args]).stdout.strip()
    return json.loads(out) if out else []


def netns_names() -> list[str]:
    return [entry["name"] for entry in _ip_json("netns", "list")]


def link_names() -> list[str]:
    return [entry["ifname"] for entry in _ip_json("link", "show")]


def used_networks() -> list[ipaddress.IPv4Network]:
    """Every IPv4 network this machine already routes to or has an address in."""
    nets: list[ipaddress.IPv4Network] = []
    for route in _ip_json("-4", "route", "show", "table", "all"):
        dst = route.get("dst", "")
        if dst and dst != "default":
            nets.append(ipaddress.IPv4Network(dst, strict=False))
    for link in _ip_json("-4", "addr", "show"):
        for info in link.get("addr_info", []):
            nets.append(ipaddress.IPv4Network(f"{info['local']}/{info['prefixlen']}", strict=False))
    return nets


def pick_subnet(
    used: Iterable[ipaddress.IPv4Network],
    pools: Iterable[ipaddress.IPv4Network] = SUBNET_POOLS,
) -> ipaddress.IPv4Network:
    used = list(used)
    for pool in pools:
        for candidate in pool.subnets(new_prefix=24):
            # .0 of each pool looks like the pool itself to people reading routes; skip it.
            if candidate.network_address == pool.network_address:
                continue
            if not any(candidate.overlaps(net) for net in used):
                return candidate
    raise ClusterError("no free /24 left in 10.213.0.0/16 or 172.31.0.0/16 for a test lab")


def create_bridge(name: str, address: ipaddress.IPv4Interface) -> None:
    commands.run(["ip", "link", "add", name, "type", "bridge"])
    commands.run(["ip", "link", "set", name, "addrgenmode", "none"])
    commands.run(["ip", "addr", "add", str(address), "dev", name])
    commands.run(["ip", "link", "set", name, "up"])


def create_netns(name: str) -> None:
    commands.run(["ip", "netns", "add", name])
    commands.run(["ip", "-n", name, "link", "set", "lo", "up"])


def create_host_link(netns: str, veth: str, bridge: str, address: ipaddress.IPv4Interface) -> None:
    """A veth pair: `veth` on the bridge in the root namespace, eth0 with `address` in `netns`."""
    commands.run(
        ["ip", "link", "add", veth, "type", "veth", "peer", "name", HOST_IFACE, "netns", netns]
    )
    commands.run(["ip", "link", "set", veth, "addrgenmode", "none"])
    commands.run(["ip", "link", "set", veth, "master", bridge, "up"])
    commands.run(["ip", "-n", netns, "link", "set", HOST_IFACE, "addrgenmode", "none"])
    commands.run(["ip", "-n", netns, "addr", "add", str(address), "dev", HOST_IFACE])
    commands.run(["ip", "-n", netns, "link", "set", HOST_IFACE, "up"])


def set_link(name: str, up: bool) -> None:
    commands.run(["ip", "link", "set", name, "up" if up else "down"])


def link_is_up(name: str) -> bool | None:
    """Administrative state of a root-namespace link; None when it does not exist."""
    proc = commands.run(["ip", "-j", "link", "show", "dev", name], check=False)
    if proc.returncode != 0 or not proc.stdout.strip():
        return None
    return "UP" in json.loads(proc.stdout)[0].get("flags", [])


def delete_netns(name: str) -> None:
    if name in netns_names():
        commands.run(["ip", "netns", "delete", name])


def delete_link(name: str) -> None:
    proc = commands.run(["ip", "link", "delete", name], check=False)
    if proc.returncode != 0 and name in link_names():
        raise ClusterError(f"cannot delete link {name}: {commands.last_line(proc.stderr)}")
