"""Names of everything a lab creates on the machine, so that labs coexist and leftovers can be found.

Every kernel object of lab <id> starts with ``pcl-<id>`` and the dash after the id is part of
the match, so lab ``a1`` never claims lab ``a12``'s objects.  Interface names are limited to 15
characters by the kernel, hence the short ids.
"""

import re
import secrets

from picluster.util.errors import UsageError

PREFIX = "pcl-"
ID_PATTERN = re.compile(r"^[a-z0-9]{1,6}$")
MAX_NODES = 99
HOST_PREFIX = "node"

_NETNS = re.compile(r"^pcl-([a-z0-9]{1,6})-(.+)$")
_LINK = re.compile(r"^pcl-([a-z0-9]{1,6})(?:-\d{2})?$")


def check_id(lab_id: str) -> str:
    if not ID_PATTERN.match(lab_id or ""):
        raise UsageError(f"lab name {lab_id!r} must be 1-6 lowercase letters or digits")
    return lab_id


def new_id(taken: set[str]) -> str:
    while True:
        candidate = secrets.token_hex(2)
        if candidate not in taken:
            return candidate


def host_name(index: int) -> str:
    """node01, node02, ... (index counts from 1)."""
    return f"{HOST_PREFIX}{index:02d}"


def bridge(lab_id: str) -> str:
    return f"{PREFIX}{lab_id}"


def netns(lab_id: str, host: str) -> str:
    return f"{PREFIX}{lab_id}-{host}"


def veth(lab_id: str, index: int) -> str:
    """Root-namespace end of a host's link; the host's end is called eth0."""
    return f"{PREFIX}{lab_id}-{index:02d}"


def nft_table(lab_id: str) -> str:
    return f"{PREFIX}{lab_id}"


def lab_of_netns(name: str) -> str | None:
    match = _NETNS.match(name)
    return match.group(1) if match else None


def lab_of_link(name: str) -> str | None:
    match = _LINK.match(name)
    return match.group(1) if match else None
