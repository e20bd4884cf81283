"""One VM test host: qemu running the image's own Debian 12 kernel, on a tap of the lab's bridge.

    vm = VM(name="node01", index=1, address="10.213.5.11", prefix=24, tap="pcl-ab12-01",
            bridge="pcl-ab12", dir=run_dir / "vms" / "node01")
    host_key = vm.prepare(image, user, authorized_key)   # disks and seed; "ssh-ed25519 AAAA..."
    vm.start(image, accel)                               # returns at once; the guest boots ~30 s

Its files, all in `dir`: disk.qcow2 (copy-on-write over the image's read-only root.img, so a VM
costs only what it writes), seed/ and seed.img (its identity, seed.py), console.log (the serial
console, appended across reboots), qemu.log (qemu's own messages).  A guest reboot resets the
machine inside the same qemu process with the same disks: qemu runs without -no-reboot.  The
lab ends a VM as it ends everything of its own (registry.sweep): qemu is found by its disks in
the run dir and killed, the tap by its name, the files with the run dir.

qemu runs with -nodefaults and exactly one NIC, the tap: no user-mode network, so the guest
reaches nothing but the lab's bridge.

An arm64 VM (arch="arm64", the Pi's instruction set) is the same but for qemu-system-aarch64's
`virt` board, a cortex-a72 emulated by TCG, and the board's PL011 serial port as the console.
"""

import os
import signal
import subprocess
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

from picluster.cluster.lifetime import die_with_parent
from picluster.lab import commands
from picluster.lab.host import HostOptions, StateFileEntry, User
from picluster.lab.vm import seed, support, tap, virtiofs
from picluster.lab.vm.accel import Accel
from picluster.lab.vm.image import Image
from picluster.util.errors import ClusterError
from picluster.util.processes import same_process, start_time

# The serial console each architecture's board has: the PC's 16550, the virt board's PL011.
CONSOLES = {"amd64": "ttyS0", "arm64": "ttyAMA0"}
# qemu's board: the default PC for amd64; `virt`, the generic board with PCI for virtio, for arm64.
MACHINES = {"amd64": [], "arm64": ["-machine", "virt"]}


def kernel_args(arch: str = "amd64") -> str:
    # net.ifnames=0: the NIC is eth0, as in a namespace host (the seed's network file matches its MAC).
    return f"root=/dev/vda rw console={CONSOLES[arch]} net.ifnames=0"


KERNEL_ARGS = kernel_args()
# TCG's translation cache defaults to 1 GiB per VM on 64-bit hosts; a boot uses a fraction.
TB_CACHE_MIB = 256


@dataclass
class VM(StateFileEntry):
    name: str
    index: int
    address: str
    prefix: int
    tap: str
    bridge: str
    dir: Path
    gateway: str | None = None  # a default route through it in the guest; None: the lab subnet only
    options: HostOptions = field(default_factory=HostOptions)
    memory_mib: int = support.GUEST_MIB
    cpus: int = 1
    pid: int | None = None
    started: float | None = None  # qemu's create time, so a reused pid is not taken for it
    accel: str | None = None  # "kvm" or "tcg", once started
    # The machine's SMBIOS UUID.  systemd makes the guest's machine id from it on first boot, so
    # without one per VM (qemu's default is the same for all) every VM would get the same id.
    uuid: str | None = None
    arch: str = "amd64"  # the guest's Debian architecture: amd64, or arm64 (emulated)
    # Directories of this machine the guest mounts read-only at the same paths (virtiofs.py).
    shares: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.dir = Path(self.dir)
        self._proc: subprocess.Popen | None = None

    # -- its files --------------------------------------------------------------------------

    @property
    def disk(self) -> Path:
        return self.dir / "disk.qcow2"

    @property
    def seed_dir(self) -> Path:
        return self.dir / "seed"

    @property
    def seed_disk(self) -> Path:
        return self.dir / "seed.img"

    @property
    def console_log(self) -> Path:
        return self.dir / "console.log"

    @property
    def qemu_log(self) -> Path:
        return self.dir / "qemu.log"

    @property
    def mac(self) -> str:
        return tap.mac(self.tap)

    # -- before it starts -------------------------------------------------------------------

    def prepare(self, image: Image, user: User, authorized_key: str) -> str:
        """Its disk and seed; returns its public host key ("ssh-ed25519 AAAA...")."""
        self.dir.mkdir(parents=True, exist_ok=True)
        self.uuid = self.uuid or str(uuid.uuid4())
        # Copy-on-write over the cached image: the VM's writes land here, the image stays as built.
        commands.run(
            [support.QEMU_IMG, "create", "-q", "-f", "qcow2", "-F", "raw", "-b", str(image.root), str(self.disk)]
        )
        identity = seed.Identity(
            name=self.name,
            mac=self.mac,
            address=f"{self.address}/{self.prefix}",
            gateway=self.gateway,
            user=user,
            authorized_key=authorized_key,
            sudo_nopasswd=self.options.sudo_nopasswd,
            pi_model=self.options.pi_model,
            virtiofs=virtiofs.seed_lines(self.shares),
        )
        host_key = seed.write_tree(identity, self.seed_dir)
        seed.make_disk(self.seed_dir, self.seed_disk)
        return host_key

    def command(self, image: Image, accel: Accel) -> list[str]:
        if image.arch != self.arch:
            raise ClusterError(f"VM {self.name} is {self.arch} but image {image.dir} is {image.arch}")
        accel_args = accel.args
        if accel.name == "tcg":
            accel_args = ["-accel", f"tcg,tb-size={TB_CACHE_MIB}", "-cpu", accel.cpu]
        return [
            support.QEMUS[self.arch],
            *MACHINES[self.arch],
            "-name", self.name,
            *(["-uuid", self.uuid] if self.uuid else []),
            *accel_args,
            "-m", str(self.memory_mib), "-smp", str(self.cpus),
            "-nodefaults", "-no-user-config", "-display", "none",
            "-kernel", str(image.kernel), "-initrd", str(image.initrd), "-append", kernel_args(self.arch),
            "-drive", f"file={self.disk},format=qcow2,if=virtio",
            "-drive", f"file={self.seed_disk},format=raw,if=virtio,readonly=on",
            "-netdev", f"tap,id=lab,ifname={self.tap},script=no,downscript=no",
            "-device", f"virtio-net-pci,netdev=lab,mac={self.mac}",
            # Without it, early boot can wait on entropy for sshd's and systemd's random numbers.
            "-device", "virtio-rng-pci",
            "-chardev", f"file,id=console,path={self.console_log},append=on",
            "-serial", "chardev:console",
            *virtiofs.qemu_args(self.shares, self.dir, self.memory_mib),
        ]  # fmt: skip

    # -- process ----------------------------------------------------------------------------

    def start(self, image: Image, accel: Accel, owned: bool = True) -> subprocess.Popen:
        """Create its tap and start qemu; returns at once (the guest boots on its own).

        owned: the kernel kills qemu when the calling *thread* exits, even by SIGKILL (prctl
        PR_SET_PDEATHSIG), so call it from a thread that outlives the VM."""
        if self.alive():
            raise ClusterError(f"VM {self.name} is running already (pid {self.pid})")
        if not tap.exists(self.tap):
            tap.create(self.tap, self.bridge)
        virtiofs.start(self.dir, self.shares, owned)
        command = self.command(image, accel)
        commands.said(command)
        with open(self.qemu_log, "ab") as log:
            proc = subprocess.Popen(
                command,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                preexec_fn=die_with_parent if owned else None,
            )
        self._proc = proc
        self.pid = proc.pid
        self.accel = accel.name
        self.started = start_time(proc.pid)
        return proc

    def alive(self) -> bool:
        return same_process(self.pid, self.started)

    def kill(self, timeout: float = 30.0) -> None:
        """qemu killed at once, as power pulled; returns once it is gone."""
        if self.pid is None or not self.alive():
            return
        os.kill(self.pid, signal.SIGKILL)
        if self._proc is not None:
            self._proc.wait(timeout)
        deadline = time.monotonic() + timeout
        while self.alive():
            if time.monotonic() > deadline:
                raise ClusterError(f"VM {self.name}: qemu (pid {self.pid}) outlived SIGKILL for {timeout:g} s")
            time.sleep(0.1)

    def why_stopped(self) -> str:
        """One line: qemu's last complaint, else the console's last line."""
        for log in (self.qemu_log, self.console_log):
            try:
                lines = [ln.strip() for ln in log.read_text(errors="replace").splitlines() if ln.strip()]
            except OSError:
                continue
            if lines:
                return f"{log.name}: {lines[-1][:200]}"
        return "no output from qemu"

    def console_tail(self, lines: int = 20) -> str:
        try:
            text = self.console_log.read_text(errors="replace")
        except OSError:
            return ""
        return "\n".join(text.splitlines()[-lines:])
