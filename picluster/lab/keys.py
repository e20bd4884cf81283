"""Ed25519 key pairs in OpenSSH format: the run's login key and each test host's host key.

Made with `cryptography` (a paramiko dependency), so no ssh-keygen run and no passphrase.
"""

import os
from dataclasses import dataclass
from pathlib import Path

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey


@dataclass(frozen=True)
class KeyPair:
    private_path: Path
    public_line: str  # "ssh-ed25519 AAAA... comment"

    @property
    def public_path(self) -> Path:
        return self.private_path.with_name(self.private_path.name + ".pub")

    @property
    def public_key(self) -> str:
        """"ssh-ed25519 AAAA..." without the comment, as known_hosts wants it."""
        return " ".join(self.public_line.split()[:2])


def make_keypair(private_path: Path, comment: str) -> KeyPair:
    key = Ed25519PrivateKey.generate()
    private = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.OpenSSH,
        serialization.NoEncryption(),
    )
    public = key.public_key().public_bytes(
        serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH
    ).decode()
    line = f"{public} {comment}"
    private_path.parent.mkdir(parents=True, exist_ok=True)
    # Created 0600 from the start: ssh and sshd refuse keys others could ever read.
    fd = os.open(private_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as out:
        out.write(private)
    pair = KeyPair(private_path, line)
    pair.public_path.write_text(line + "\n")
    return pair


def load_keypair(private_path: Path) -> KeyPair:
    line = private_path.with_name(private_path.name + ".pub").read_text().strip()
    return KeyPair(private_path, line)

