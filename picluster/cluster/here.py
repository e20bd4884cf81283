"""This machine as one of the inventory's nodes: a person logged in on Slurm's controller queues,
lists and cancels jobs there as themself, in a local shell, not over SSH as the inventory's user
(whose key they do not hold).  ``Here`` answers the few calls the queue makes of a ``Remote``."""

import errno
import ipaddress
import logging
import socket
import subprocess
from dataclasses import dataclass

from picluster.cluster.ssh import CommandFailed, Unreachable
from picluster.util import verbosity

log = logging.getLogger(__name__)


def holds(address: str) -> bool:
    """Whether `address` is one of this machine's own: binding to it succeeds only then.  Not a
    loopback address: every machine has those, so one in an inventory says "over SSH to localhost"."""
    if ipaddress.ip_address(address).is_loopback:
        return False
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
            probe.bind((address, 0))
    except OSError as exc:
        if exc.errno == errno.EADDRNOTAVAIL:
            return False
        raise
    return True


@dataclass
class Done:
    """What Remote.run returns (Invoke's Result), for a local command."""

    stdout: str
    stderr: str
    exited: int


class Here:
    def __init__(self, name: str, timeout: float = 60.0) -> None:
        self.name = name
        self.timeout = timeout

    def run(self, command: str, *, check: bool = True, timeout: float | None = None) -> Done:
        started = verbosity.command(log, "local", command)
        try:
            proc = subprocess.run(["/bin/sh", "-c", command], capture_output=True, text=True, stdin=subprocess.DEVNULL,
                                  timeout=timeout or self.timeout, errors="replace")
        except subprocess.TimeoutExpired:
            raise Unreachable(f"no answer within {timeout or self.timeout:.0f} s") from None
        done = Done(proc.stdout, proc.stderr, proc.returncode)
        verbosity.ended(log, "local", started, done.exited, (done.stderr.strip() or done.stdout.strip()).rsplit("\n", 1)[-1])
        if check and done.exited != 0:
            lines = (done.stderr.strip() or done.stdout.strip()).splitlines()
            raise CommandFailed(f"{command[:60]}: {lines[-1] if lines else f'exit code {done.exited}'}")
        return done

    def close(self) -> None:
        pass
