"""N VMs of one lab: started together, ready when each answers SSH with the lab's key, deleted together.

    fleet = Fleet(vms, user, key_path, known_hosts_path)
    fleet.up(timeout=600)       # image (built once), accelerator, disks, qemu x N, SSH; or nothing
    fleet.reboot("node02")      # `sudo reboot` in the guest, back with the same identity
    fleet.down()                # no qemu, tap, disk or seed left

Checks come first and refuse in one line (not root, no qemu, not enough memory, a damaged
cached image) before anything exists; any failure after that deletes whatever was made.
"""

import atexit
import sys
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from picluster.errors import ClusterError, UsageError
from picluster.lab import keys, ssh
from picluster.lab.host import User
from picluster.lab.vm import accel as accel_mod
from picluster.lab.vm import image as image_mod
from picluster.lab.vm import support
from picluster.lab.vm.machine import VM
from picluster.cluster.ssh import connect

Say = Callable[[str], None]


def say_stderr(line: str) -> None:
    print(f"picluster: {line}", file=sys.stderr, flush=True)


class Fleet:
    def __init__(
        self,
        vms: list[VM],
        user: User,
        key_path: Path,
        known_hosts_path: Path,
        *,
        owned: bool = True,
        cache: Path | None = None,
        say: Say = say_stderr,
    ) -> None:
        """owned: the VMs die with this process (atexit, and the kernel kills qemu if it dies,
        tied to the thread calling up()); False lets them outlive it (a CLI's `lab up`)."""
        if not vms:
            raise UsageError("a fleet needs at least one VM")
        names = [vm.name for vm in vms]
        if len(set(names)) != len(names) or len({vm.tap for vm in vms}) != len(vms):
            raise UsageError("VM names and taps must be unique")
        self.vms = list(vms)
        self.user = user
        self.key_path = Path(key_path)
        self.known_hosts_path = Path(known_hosts_path)
        self.owned = owned
        self.cache = Path(cache) if cache else image_mod.cache_root()
        self.say = say
        self.image: image_mod.Image | None = None
        self.accel: accel_mod.Accel | None = None
        self.timings: dict[str, float] = {}  # seconds: "image", "accel", "prepare", "<vm name>"
        self._atexit = False

    def vm(self, which: "str | int | VM") -> VM:
        if isinstance(which, VM):
            return which
        for vm in self.vms:
            if which in (vm.name, vm.index):
                return vm
        raise UsageError(f"no VM {which!r}")

    # -- up ------------------------------------------------------------------------------------

    def up(self, timeout: float = 600.0) -> "Fleet":
        support.require_support()
        support.check_memory(len(self.vms), guest_mib=max(vm.memory_mib for vm in self.vms))
        try:
            if self.owned:
                atexit.register(self._down_at_exit)
                self._atexit = True
            started = time.monotonic()
            self.image = image_mod.ensure(self.cache, self.say)
            self.timings["image"] = time.monotonic() - started

            started = time.monotonic()
            self.accel = accel_mod.choose(self.image.kernel, self.cache, self.say)
            self.timings["accel"] = time.monotonic() - started
            self.say(f"VMs use {self.accel.describe()}")

            started = time.monotonic()
            login = keys.load_keypair(self.key_path).public_line
            known = [f"{vm.address} {vm.prepare(self.image, self.user, login)}" for vm in self.vms]
            self.known_hosts_path.write_text("\n".join(known) + "\n")
            self.timings["prepare"] = time.monotonic() - started

            # Started from this thread, one after the other (each returns at once): PDEATHSIG
            # ties qemu to the thread that forked it, so no pool threads here.
            started = time.monotonic()
            for vm in self.vms:
                vm.start(self.image, self.accel, owned=self.owned)
            self.wait_ready(self.vms, timeout, started)
            if not self.owned:
                self._unregister()
        except BaseException as exc:
            try:
                self.down()
            except ClusterError as teardown:
                exc.add_note(f"and then: {teardown}")
            raise
        return self

    def wait_ready(self, vms: list[VM], timeout: float, started: float | None = None) -> None:
        """Until each VM answers SSH as itself with the key; timings[name] = seconds since `started`."""
        started = started if started is not None else time.monotonic()
        deadline = started + timeout
        pending = {vm.name: vm for vm in vms}
        last_error: dict[str, str] = {}

        def attempt(vm: VM) -> tuple[str, str | None]:
            try:
                seen = ssh.remote_hostname(vm.address, self.user.name, self.key_path, self.known_hosts_path, 5.0)
            except Exception as exc:
                return vm.name, f"{type(exc).__name__}: {' '.join(str(exc).split())[:200]}"
            if seen != vm.name:
                return vm.name, f"answers as {seen!r}"
            return vm.name, None

        with ThreadPoolExecutor(max_workers=min(8, len(pending))) as pool:
            while pending:
                for vm in pending.values():
                    if not vm.alive():
                        raise ClusterError(f"VM {vm.name} stopped while booting: {vm.why_stopped()}")
                for name, error in pool.map(attempt, list(pending.values())):
                    if error is None:
                        self.timings[name] = time.monotonic() - started
                        del pending[name]
                    else:
                        last_error[name] = error
                if not pending:
                    break
                if time.monotonic() > deadline:
                    first = sorted(pending)[0]
                    raise ClusterError(
                        f"VMs {', '.join(sorted(pending))} did not answer SSH within {timeout:g} s "
                        f"({first}: {last_error.get(first, 'no answer')}; console: {self.vm(first).console_log})"
                    )
                time.sleep(1.0)

    # -- in use --------------------------------------------------------------------------------

    def connect(self, which: "str | int | VM", timeout: float = 10.0):
        """A fabric.Connection to a VM as the lab user, trusting exactly its recorded host key."""
        vm = self.vm(which)
        return connect(vm.address, self.user.name, self.key_path, self.known_hosts_path, timeout)

    def run(self, which: "str | int | VM", command: str, timeout: float = 120.0) -> str:
        with self.connect(which) as conn:
            return conn.run(command, hide=True, timeout=timeout).stdout

    def reboot(self, which: "str | int | VM", timeout: float = 600.0) -> float:
        """`sudo reboot` in the guest; returns seconds until it answers SSH from its next boot."""
        vm = self.vm(which)
        before = self.run(vm, "cat /proc/sys/kernel/random/boot_id").strip()
        started = time.monotonic()
        try:
            with self.connect(vm) as conn:
                conn.run("sudo -n reboot", hide=True, warn=True, timeout=30)
        except Exception:
            pass  # the guest may drop the session before the command returns
        deadline = started + timeout
        while True:
            if not vm.alive():
                raise ClusterError(f"VM {vm.name} stopped instead of rebooting: {vm.why_stopped()}")
            try:
                now = self.run(vm, "cat /proc/sys/kernel/random/boot_id", timeout=10).strip()
                if now != before:
                    return time.monotonic() - started
            except Exception:
                pass  # still going down, or not up yet
            if time.monotonic() > deadline:
                raise ClusterError(f"VM {vm.name} did not come back within {timeout:g} s of `reboot`")
            time.sleep(1.0)

    def memory(self) -> dict[str, int]:
        """Resident memory of each VM's qemu, in bytes."""
        import psutil

        result = {}
        for vm in self.vms:
            if vm.alive():
                result[vm.name] = psutil.Process(vm.pid).memory_info().rss
        return result

    # -- down ----------------------------------------------------------------------------------

    def down(self) -> None:
        """Delete every VM: qemu, tap, disks, seed.  Idempotent; works on a half-started fleet."""
        self._unregister()
        problems = []
        for vm in self.vms:
            try:
                vm.delete()
            except ClusterError as exc:
                problems.append(str(exc))
        if problems:
            raise ClusterError(f"VM teardown incomplete: {'; '.join(problems)}")

    def _unregister(self) -> None:
        if self._atexit:
            atexit.unregister(self._down_at_exit)
            self._atexit = False

    def _down_at_exit(self) -> None:
        try:
            self.down()
        except Exception as exc:
            print(f"picluster: {exc}", file=sys.stderr)

    def __enter__(self) -> "Fleet":
        return self.up()

    def __exit__(self, *exc) -> None:
        self.down()
