"""SSH client side of the lab: Fabric connections that trust exactly the lab's host keys."""

from pathlib import Path

import fabric
import paramiko


def connect(
    address: str,
    user: str,
    key: Path,
    known_hosts: Path | None,
    timeout: float = 10.0,
) -> fabric.Connection:
    """A Fabric connection using only `key` (no agent, no ~/.ssh keys).

    With `known_hosts` the server must present the host key recorded there; the lab writes one
    per run, since every run has new host keys on the same addresses.
    """
    conn = fabric.Connection(
        host=address,
        user=user,
        # Never forward our own stdin (a terminal, or pytest's closed one) to remote commands.
        config=fabric.Config(overrides={"run": {"in_stream": False}}),
        connect_timeout=timeout,
        connect_kwargs={
            "key_filename": [str(key)],
            "look_for_keys": False,
            "allow_agent": False,
            "banner_timeout": timeout,
            "auth_timeout": timeout,
        },
    )
    if known_hosts is not None:
        conn.client.load_host_keys(str(known_hosts))
        conn.client.set_missing_host_key_policy(paramiko.RejectPolicy())
    return conn


def remote_hostname(
    address: str, user: str, key: Path, known_hosts: Path | None, timeout: float = 10.0
) -> str:
    """Log in for real and return what `hostname` prints there."""
    with connect(address, user, key, known_hosts, timeout) as conn:
        return conn.run("hostname", hide=True, timeout=timeout).stdout.strip()
