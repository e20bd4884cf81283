"""What a lab will be, decided once before anything is made: its id, subnet, user and addresses.

A ``Plan`` is frozen: everything derived from it (the bridge's address, a host's address, the
inventory) is computed, never stored twice.  It is made under the lab lock, so two labs starting
at once never pick the same id or subnet.
"""

import ipaddress
import os
import re
from dataclasses import dataclass
from pathlib import Path

from picluster.lab import naming
from picluster.lab.host import OVERLAID, User
from picluster.util.errors import UsageError

FIRST_HOST_OCTET = 11  # node01 is .11, node02 .12, ...; .1 is the bridge (the coordinator)
USER_NAME = re.compile(r"^[a-z_][a-z0-9_-]{0,31}$")


@dataclass(frozen=True)
class Plan:
    id: str
    nodes: int
    subnet: ipaddress.IPv4Network
    user: User

    @property
    def gateway(self) -> str:
        """The bridge's address: the coordinator as the hosts see it."""
        return str(self.subnet.network_address + 1)

    def address(self, index: int) -> str:
        """Host ``index``'s address (index counts from 1)."""
        return str(self.subnet.network_address + FIRST_HOST_OCTET - 1 + index)

    def host_names(self) -> list[str]:
        return [naming.host_name(i) for i in range(1, self.nodes + 1)]


def check_subnet(text: str, nodes: int) -> ipaddress.IPv4Network:
    try:
        subnet = ipaddress.IPv4Network(text)
    except ValueError as exc:
        raise UsageError(f"subnet {text!r}: {exc}") from None
    if subnet.num_addresses < FIRST_HOST_OCTET + nodes + 1:
        raise UsageError(f"subnet {subnet} is too small for {nodes} hosts from .{FIRST_HOST_OCTET} on")
    return subnet


def check_user_name(name: str) -> str:
    if not USER_NAME.match(name):
        raise UsageError(f"user name {name!r} is not a valid Linux user name")
    return name


def pick_user(name: str) -> User:
    """The cluster user, with a uid (= gid) that this machine's own users and groups do not hold."""
    passwd = read_db("/etc/passwd")
    if name in passwd:
        raise UsageError(f"user {name} exists on this machine; give the lab another user name")
    uids = {int(fields[2]) for fields in passwd.values()}
    gids = {int(fields[2]) for fields in read_db("/etc/group").values()}
    number = next(n for n in range(1000, 60000) if n not in uids and n not in gids)
    return User(name, number, number)


def read_db(path: str) -> dict[str, list[str]]:
    """name -> all fields, for /etc/passwd and /etc/group."""
    entries = {}
    with open(path) as f:
        for line in f:
            fields = line.rstrip("\n").split(":")
            if len(fields) >= 3 and not line.startswith("#"):
                entries[fields[0]] = fields
    return entries


def check_run_dir(path: Path) -> None:
    """The lab's state dir must stay visible, unchanged, inside every host, and fit in mount options."""
    run_dir = os.path.realpath(path)
    for target in (*OVERLAID, "/run"):
        if run_dir == target or run_dir.startswith(target + "/"):
            raise UsageError(
                f"lab state dir {run_dir} lies under {target}, which every test host replaces; "
                "set PICLUSTER_STATE_DIR elsewhere"
            )
    if re.search(r"[\s,:\\]", run_dir):
        raise UsageError(
            f"lab state dir {run_dir} holds a space, comma, colon or backslash, "
            "which overlay mount options cannot take"
        )
