"""A VM's seed disk: its identity (hostname, address, host key, user, MOCK Pi files) on a tiny ext4 image.

Made with `mkfs.ext4 -d` from a directory, so no loop mount and no cloud-init: the image's
picluster-seed unit (guest.py) mounts it read-only by its label and applies it at every boot.
The directory is kept beside the image: what the seed says can be read without booting.
"""

import secrets
import shlex
from dataclasses import dataclass
from pathlib import Path

from picluster.lab import commands, keys, mockpi
from picluster.lab.host import DATA_DIR, SHARE_DIR, User, hosts_file
from picluster.lab.vm import guest

SIZE = "4M"


@dataclass(frozen=True)
class Identity:
    name: str
    mac: str
    address: str  # "10.213.5.11/24"
    gateway: str | None  # a default route through it; None: the lab subnet only
    user: User
    authorized_key: str  # one authorized_keys line
    sudo_nopasswd: bool = True
    pi_model: str | None = mockpi.DEFAULT_MODEL
    virtiofs: str = ""  # "TAG PATH" lines: this machine's directories to mount (virtiofs.py)


def settings_text(identity: Identity, seed_id: str) -> str:
    """Shell assignments the guest's seed script sources (values quoted for sh)."""
    values = {
        "SEED_ID": seed_id,
        "NAME": identity.name,
        "MAC": identity.mac,
        "ADDRESS": identity.address,
        "GATEWAY": identity.gateway or "",
        "USER_NAME": identity.user.name,
        "USER_UID": str(identity.user.uid),
        "USER_GID": str(identity.user.gid),
        "SUDO_NOPASSWD": "yes" if identity.sudo_nopasswd else "no",
        # As the namespace hosts have them: the share and the data mount point.
        "MKDIRS": f"{SHARE_DIR} {DATA_DIR}",
    }
    return "".join(f"{key}={shlex.quote(value)}\n" for key, value in values.items())


def write_tree(identity: Identity, directory: Path) -> str:
    """The seed's files in `directory`; returns the VM's public host key for known_hosts."""
    directory.mkdir(parents=True, exist_ok=True)
    host_key = keys.make_keypair(directory / "ssh_host_ed25519_key", f"root@{identity.name}")
    (directory / "settings").write_text(settings_text(identity, secrets.token_hex(8)))
    (directory / "authorized_keys").write_text(identity.authorized_key.rstrip("\n") + "\n")
    (directory / "hosts").write_text(hosts_file(identity.name))
    if identity.virtiofs:
        (directory / "virtiofs").write_text(identity.virtiofs)
    # The same MOCK boot partition and device-tree model as a namespace host's (mockpi.py).
    mockpi.seed_boot_partition(directory / "boot-firmware")
    if identity.pi_model:
        mockpi.seed_device_tree(directory / "sys-firmware", identity.pi_model)
    return host_key.public_key


def make_disk(directory: Path, disk: Path) -> None:
    if disk.exists():
        disk.unlink()
    commands.run(["mkfs.ext4", "-q", "-F", "-L", guest.SEED_LABEL, "-O", "^has_journal", "-d", str(directory), str(disk), SIZE])
