"""Whether VMs can run here, and how many fit in memory: each refusal is one line saying what to do.

Checked before anything is created, so a refusal leaves nothing behind.
"""

import os
import shutil

import psutil

from picluster.util.errors import UsageError

QEMU = "qemu-system-x86_64"
# Per Debian architecture of the guest: arm64 guests run on qemu's Arm system emulator.
QEMUS = {"amd64": QEMU, "arm64": "qemu-system-aarch64"}
QEMU_IMG = "qemu-img"
GUEST_MIB = 1024  # a Raspberry Pi 3B+'s memory
# qemu's own memory beside the guest's: device emulation plus TCG's translation cache, which is
# capped at TB_CACHE_MIB (machine.py); measured RSS is in docs/vm-hosts.md.
OVERHEAD_MIB = 384
# What the coordinator itself needs while its VMs run (tests, TensorFlow on this side).
MARGIN_MIB = 1024

# tool -> Debian package, for the one-line hint
TOOLS = {QEMU: "qemu-system-x86", QEMU_IMG: "qemu-utils", "mkfs.ext4": "e2fsprogs", "ip": "iproute2"}
ARM64_TOOLS = {**{tool: pkg for tool, pkg in TOOLS.items() if tool != QEMU}, QEMUS["arm64"]: "qemu-system-arm"}


def tools(arch: str = "amd64") -> dict[str, str]:
    return ARM64_TOOLS if arch == "arm64" else TOOLS


def missing_support(arch: str = "amd64") -> str | None:
    """Why VMs cannot run here, in one line, or None when they can."""
    if os.geteuid() != 0:
        return "VM test hosts need root (tap devices on the lab's bridge): run as root"
    missing = sorted({pkg for tool, pkg in tools(arch).items() if shutil.which(tool) is None})
    if missing:
        return (
            f"VM test hosts need Debian packages {', '.join(missing)}: "
            f"apt-get install {' '.join(missing)} (or run scripts/lab-deps.sh)"
        )
    if not os.path.exists("/dev/net/tun"):
        return "VM test hosts need /dev/net/tun for their taps: modprobe tun"
    return None


def require_support(arch: str = "amd64") -> None:
    reason = missing_support(arch)
    if reason:
        raise UsageError(reason)


def mib_per_vm(guest_mib: int = GUEST_MIB) -> int:
    return guest_mib + OVERHEAD_MIB


def fitting(available_bytes: int | None = None, guest_mib: int = GUEST_MIB) -> int:
    """How many VMs this machine's available memory holds, keeping MARGIN_MIB for itself."""
    if available_bytes is None:
        available_bytes = psutil.virtual_memory().available
    return max(0, (available_bytes // (1 << 20) - MARGIN_MIB) // mib_per_vm(guest_mib))


def check_memory(count: int, available_bytes: int | None = None, guest_mib: int = GUEST_MIB) -> None:
    """Refuse (one line) when `count` VMs would not fit in available memory.

    Counted at their full size: guests touch all of their memory sooner or later (page cache),
    and a machine that starts swapping or OOM-killing mid-test is worse than a refusal."""
    if available_bytes is None:
        available_bytes = psutil.virtual_memory().available
    need = count * mib_per_vm(guest_mib) + MARGIN_MIB
    have = available_bytes // (1 << 20)
    if need > have:
        most = fitting(available_bytes, guest_mib)
        raise UsageError(
            f"{count} VMs need {need / 1024:.1f} GiB of memory ({guest_mib} MiB each, {OVERHEAD_MIB} MiB for "
            f"qemu, {MARGIN_MIB} MiB kept free) but {have / 1024:.1f} GiB is available: "
            f"start at most {most}, or free memory"
        )
