"""SSH client side of the lab: logins that trust exactly the lab's host keys (picluster.remote.connect)."""

from pathlib import Path

from picluster.cluster.ssh import connect


def remote_hostname(
    address: str, user: str, key: Path, known_hosts: Path | None, timeout: float = 10.0
) -> str:
    """Log in for real and return what `hostname` prints there."""
    with connect(address, user, key, known_hosts, timeout) as conn:
        return conn.run("hostname", hide=True, timeout=timeout).stdout.strip()
