"""VM hosts behind the lab's host-kind seam (lab/kinds.py): Debian 12 guests with their own kernel.

    Lab(3, vm=True).up()   # check (root, qemu, memory, image, accelerator), taps, disks, qemu x 3, SSH
    Lab(2, vm=True, arch="arm64").up()   # the Pi's instruction set: its own image, emulated (TCG)

Everything that can refuse does so in ``check()``, before the lab has an id, a bridge or a file:
not root, qemu missing, more VMs than memory holds, a damaged cached image.  The image is built
there too when there is none (minutes, once per machine), and the accelerator chosen (KVM only
where a kernel really boots under it, else TCG), and said once.
"""

import shutil
import time
from collections.abc import Callable
from pathlib import Path

from picluster.cluster.ssh import Unreachable, reach
from picluster.lab import naming
from picluster.lab.host import HostOptions
from picluster.lab.vm import accel as accel_mod
from picluster.lab.vm import image as image_mod
from picluster.lab.vm import support, tap, virtiofs
from picluster.lab.vm.host import Login, VMHost
from picluster.model.fanout import fan_out
from picluster.util.errors import ClusterError


class VMHosts:
    name = "vm"
    # TCG on a shared 2-core machine: ~30 s alone, minutes when other jobs run (docs/vm-hosts.md).
    default_timeout = 600.0
    # A foreign instruction set is emulated instruction by instruction: boots take several times longer.
    arm64_timeout = 1800.0

    def __init__(self, say: Callable[[str], None], arch: str = image_mod.NATIVE) -> None:
        self.say = say
        self.arch = image_mod.check_arch(arch)
        if self.arch != image_mod.NATIVE:
            self.default_timeout = self.arm64_timeout
        self.image: image_mod.Image | None = None
        self.accel: accel_mod.Accel | None = None

    def check(self, nodes: int, host_options: dict[str, HostOptions] | None = None) -> None:
        support.require_support(self.arch)
        sizes = [o.vm_memory_mib for o in (host_options or {}).values()]
        support.check_memory(nodes, guest_mib=max(sizes, default=support.GUEST_MIB))
        _, accel = self._image_and_accel()
        self.say(f"{self.arch} VMs use {accel.describe()}")

    def _image_and_accel(self) -> tuple[image_mod.Image, accel_mod.Accel]:
        cache = image_mod.cache_root()
        self.image = image = image_mod.ensure(cache, self.say, arch=self.arch)
        self.accel = accel = accel_mod.choose(image.kernel, cache, self.say, arch=self.arch)
        return image, accel

    def new_host(self, lab, index: int) -> VMHost:
        name = naming.host_name(index)
        host = VMHost(
            name=name,
            index=index,
            address=lab.plan.address(index),
            prefix=lab.subnet.prefixlen,
            tap=tap.name(lab.id, index),
            bridge=lab.bridge,
            dir=lab.run_dir / "hosts" / name,
            options=lab.host_options.get(name, HostOptions()),
            arch=self.arch,
        )
        host.cpus, host.memory_mib = host.options.vm_cpus, host.options.vm_memory_mib
        if host.options.coordinator_python:
            host.shares = virtiofs.coordinator_dirs()
        host.login = login_of(lab)
        return host

    def host_from_dict(self, data: dict, lab) -> VMHost:
        host = VMHost.from_dict(data)
        host.login = login_of(lab)
        return host

    def create(self, lab) -> None:
        for host in lab.hosts:
            tap.create(host.tap, host.bridge)

    def start(self, lab, login_line: str) -> list[str]:
        if self.image is None or self.accel is None:
            raise ClusterError("VM hosts start only after check()")
        known = [f"{h.address} {h.prepare(self.image, lab.user, login_line)}" for h in lab.hosts]
        # From this thread, one after the other (each returns at once): PDEATHSIG ties qemu to
        # the thread that forked it, so no pool threads here.
        for host in lab.hosts:
            lab.adopt(host.start(self.image, self.accel, owned=lab.owned))
            lab.save()
        return known

    def ready(self, lab) -> None:
        pass

    def reboot(self, lab, hosts: list, timeout: float) -> dict[str, float]:
        """Reboot `hosts` together; seconds each took to answer SSH again."""
        results = fan_out(lambda host: host.reboot(timeout), hosts, limit=len(hosts) or 1)
        return results.raise_failures("reboot")

    def reset(self, lab, host: VMHost, timeout: float) -> str:
        """`host` as if its SD card died and a freshly written one went in: qemu killed (the card
        pulled), its disk back to the image, a new seed with a new host key, started again; once
        its sshd answers, its new public host key.  The lab's known_hosts keeps the old key, as a
        coordinator's would: telling the two apart is provisioning's job."""
        image, accel = self.image, self.accel
        if image is None or accel is None:  # a lab loaded from its state file
            image, accel = self._image_and_accel()
        host.kill()
        shutil.rmtree(host.seed_dir, ignore_errors=True)
        for old in (host.disk, host.seed_disk):
            old.unlink(missing_ok=True)
        login = Path(f"{lab.key_path}.pub").read_text().strip()
        key = host.prepare(image, lab.user, login)
        lab.adopt(host.start(image, accel, owned=lab.owned))
        lab.save()
        deadline = time.monotonic() + timeout
        while True:
            try:
                reach(host.address, 22, 5.0).close()
                return key
            except Unreachable as exc:
                if not host.alive():
                    raise ClusterError(f"VM {host.name} stopped while starting afresh: {host.why_stopped()}") from None
                if time.monotonic() > deadline:
                    raise ClusterError(f"VM {host.name} written afresh does not answer SSH within {timeout:g} s ({exc})") from None
            time.sleep(1.0)

    def describe(self) -> str:
        what = "VMs" if self.arch == image_mod.NATIVE else f"{self.arch} VMs"
        return f"{what} ({self.accel.name.upper()})" if self.accel else what


def login_of(lab) -> Login:
    return Login(lab.user.name, lab.key_path, lab.known_hosts_path)
