"""A VM as a lab host: what tests and the lab do inside it goes over SSH with the lab's key, as
root through the cluster user's password-less sudo (a namespace host is entered with nsenter).

It has the attributes a lab reads from any host (lab/kinds.py): ``veth`` is its tap, and there
are no namespaces of this machine's to note.  There is no overlay either, so ``changes()`` and
``path()`` (a namespace host's view from this machine) do not exist here: read files with
``read_file``.
"""

import io
import shlex
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

from picluster.cluster import hostkeys
from picluster.cluster.ssh import connect
from picluster.lab import commands
from picluster.lab.vm.machine import VM
from picluster.util.errors import ClusterError


@dataclass(frozen=True)
class Login:
    user: str
    key: Path
    known_hosts: Path


@dataclass
class VMHost(VM):
    kind = "vm"

    def __post_init__(self) -> None:
        super().__post_init__()
        self.login: Login | None = None  # set by the lab; not part of the state file

    # -- what a lab reads from every host ---------------------------------------------------

    @property
    def veth(self) -> str:
        return self.tap

    @property
    def netns(self) -> None:
        return None

    @property
    def cgroup(self) -> None:
        return None  # a VM's size is its own (qemu -m, -smp), not a cgroup of this machine

    @property
    def net_inode(self) -> None:
        return None

    @property
    def mnt_inode(self) -> None:
        return None

    def log_tail(self) -> str:
        return self.why_stopped()

    def describe(self) -> str:
        what = "vm" if self.arch == "amd64" else f"vm {self.arch}"
        return f"{what}, qemu pid {self.pid} ({self.accel or '?'})" if self.pid else what

    # -- acting inside it -------------------------------------------------------------------

    def connect(self, timeout: float = 10.0):
        if self.login is None:
            raise ClusterError(f"VM {self.name} has no login: it belongs to no lab")
        return connect(self.address, self.login.user, self.login.key, timeout, hostkeys.strict(self.login.known_hosts))

    def run(
        self,
        args: list[str],
        *,
        input: str | None = None,
        check: bool = True,
        timeout: float = 120.0,
    ) -> subprocess.CompletedProcess:
        """Run a command as root in the guest (sudo -n over SSH); like lab.commands.run."""
        if not self.alive():
            raise ClusterError(f"VM {self.name} is not running ({self.why_stopped()})")
        command = "sudo -n -- " + shlex.join(args)
        started = commands.said(args, self.name, "sudo")
        try:
            with self.connect() as conn:
                result = conn.run(
                    command, hide=True, warn=True, timeout=timeout,
                    in_stream=io.StringIO(input) if input is not None else False,
                )  # fmt: skip
        except Exception as exc:  # paramiko, socket, invoke: all mean the command did not run
            raise ClusterError(f"{self.name}: {shlex.join(args)}: {type(exc).__name__}: {exc}") from None
        commands.ended(started, result.exited, self.name)
        if check and result.exited != 0:
            last = [ln for ln in (result.stderr or result.stdout).splitlines() if ln.strip()]
            raise ClusterError(f"{self.name}: {shlex.join(args)} failed: {last[-1] if last else result.exited}")
        return subprocess.CompletedProcess(args, result.exited, result.stdout, result.stderr)

    def read_file(self, inside: str) -> str:
        return self.run(["cat", "--", inside]).stdout

    def write_file(self, inside: str, text: str) -> None:
        self.run(["sh", "-c", 'cat > "$1"', "sh", inside], input=text)

    def boot_id(self, timeout: float = 30.0) -> str:
        return self.run(["cat", "/proc/sys/kernel/random/boot_id"], timeout=timeout).stdout.strip()

    def reboot(self, timeout: float) -> float:
        """`reboot` in the guest; seconds until it answers SSH from its next boot (a new boot id)."""
        before = self.boot_id()
        started = time.monotonic()
        try:
            self.run(["systemctl", "reboot"], check=False, timeout=30)
        except ClusterError:
            pass  # the guest may drop the session before the command returns
        deadline = started + timeout
        while True:
            if not self.alive():
                raise ClusterError(f"VM {self.name} stopped instead of rebooting: {self.why_stopped()}")
            try:
                if self.boot_id(timeout=10) != before:
                    return time.monotonic() - started
            except ClusterError:
                pass  # still going down, or not up yet
            if time.monotonic() > deadline:
                raise ClusterError(f"VM {self.name} did not come back within {timeout:g} s of its reboot")
            time.sleep(1.0)

    def path(self, inside: str) -> Path:
        raise ClusterError(f"VM {self.name} has no view from this machine: use read_file({inside!r})")

    def changes(self, *args, **kwargs):
        raise ClusterError(f"VM {self.name} keeps no overlay to compare: namespace hosts only")
