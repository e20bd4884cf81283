"""SSH client side of the lab: logins that trust exactly the lab's host keys (picluster.cluster.ssh.connect)."""

import time
from collections.abc import Callable
from pathlib import Path

from picluster.cluster import hostkeys
from picluster.cluster.ssh import connect
from picluster.lab import commands
from picluster.model.fanout import fan_out
from picluster.util.errors import ClusterError

# paramiko's log (a traceback per failed banner read while a host boots) is kept off stderr by
# picluster.cluster.ssh, imported above.


def remote_hostname(
    address: str, user: str, key: Path, known_hosts: Path, timeout: float = 10.0
) -> str:
    """Log in for real and return what `hostname` prints there (trusting the lab's keys only)."""
    commands.said(["hostname"], address)
    with connect(address, user, key, timeout, hostkeys.strict(known_hosts)) as conn:
        return conn.run("hostname", hide=True, timeout=timeout).stdout.strip()


def wait_for_logins(hosts: list, user: str, key: Path, known_hosts: Path, timeout: float, what: str,
                    on_ready: Callable[[list[str]], None] | None = None) -> None:
    """Until every host takes a real login with the key and says its own name; a host whose
    sshd died, or one that answers as another host, fails at once.  ``on_ready(names)`` each time
    some hosts have just taken their login (a VM boots for a while: a sign of life)."""
    deadline = time.monotonic() + timeout
    pending = {host.name: host for host in hosts}
    last_error: dict[str, str] = {}

    def attempt(host) -> str | None:
        try:
            seen = remote_hostname(host.address, user, key, known_hosts, timeout=3.0)
        except Exception as exc:  # any failure to log in means "not yet": keep the reason for the end
            return f"{type(exc).__name__}: {' '.join(str(exc).split())[:200]}"
        if seen != host.name:
            raise ClusterError(f"test host {host.name} ({host.address}) answers as {seen!r}")
        return None

    while pending:
        for host in pending.values():
            if not host.alive():
                raise ClusterError(f"test host {host.name} did not start: {host.log_tail()}")
        tried = fan_out(attempt, list(pending.values()), limit=8).raise_failures(what)
        for name, error in tried.items():
            if error is None:
                del pending[name]
            else:
                last_error[name] = error
        ready = [name for name, error in tried.items() if error is None]
        if ready and on_ready is not None:
            on_ready(ready)
        if not pending:
            break
        if time.monotonic() > deadline:
            first = sorted(pending)[0]
            raise ClusterError(
                f"{what}: {', '.join(sorted(pending))} did not answer SSH within {timeout:g}s "
                f"({first}: {last_error.get(first, 'no answer')})"
            )
        time.sleep(0.1)


def config_entry(host, user: str, key: Path, known_hosts: Path) -> str:
    """One host in an OpenSSH client config: `ssh -F <file> node01` for people."""
    return (
        f"Host {host.name} {host.address}\n"
        f"    HostName {host.address}\n"
        f"    User {user}\n"
        f"    IdentityFile {key}\n"
        f"    IdentitiesOnly yes\n"
        f"    UserKnownHostsFile {known_hosts}\n"
        f"    StrictHostKeyChecking yes\n"
        f"    ConnectTimeout 10\n"
    )
