"""MOCKS of the Raspberry Pi specifics a test host lacks: the boot partition and the device-tree model.

A test host is this x86 machine in namespaces, not a Pi.  Provisioning edits the Pi's boot
partition (/boot/firmware on Raspberry Pi OS bookworm) and may look at the device-tree model to
tell a Pi from another machine, so each host gets:

- a MOCK boot partition: a directory of the lab's seeded with a small config.txt and
  cmdline.txt as Raspberry Pi OS ships them, bind-mounted on /boot/firmware in that host only;
- optionally a MOCK device-tree model at /sys/firmware/devicetree/base/model (a directory of the
  lab's bind-mounted over /sys/firmware in that host).  /proc/device-tree, which on a Pi is a
  symlink to that directory, cannot be mocked: procfs has no such entry on x86 and none can be
  added, so code should read the /sys path.
"""

from pathlib import Path

DEFAULT_MODEL = "Raspberry Pi 4 Model B Rev 1.5"

CONFIG_TXT = """\
# MOCK Raspberry Pi boot partition, written by the picluster test lab (this is not a Pi).
# Content as Raspberry Pi OS (bookworm) ships it.

# Enable audio (loads snd_bcm2835)
dtparam=audio=on

# Automatically load overlays for detected cameras
camera_auto_detect=1

# Automatically load overlays for detected DSI displays
display_auto_detect=1

# Automatically load initramfs files, if found
auto_initramfs=1

# Enable DRM VC4 V3D driver
dtoverlay=vc4-kms-v3d
max_framebuffers=2

# Don't have the firmware create an initial video= setting in cmdline.txt.
# Use the kernel's default instead.
disable_fw_kms_setup=1

# Run in 64-bit mode
arm_64bit=1

# Disable compensation for displays with overscan
disable_overscan=1

# Run as fast as firmware / board allows
arm_boost=1

[cm4]
# Enable host mode on the 2711 built-in XHCI USB controller.
otg_mode=1

[all]
"""

CMDLINE_TXT = (
    "console=serial0,115200 console=tty1 root=PARTUUID=00000000-02 rootfstype=ext4 "
    "fsck.repair=yes rootwait\n"
)

# Where the mocks are mounted inside a host.
BOOT_FIRMWARE = "/boot/firmware"
SYS_FIRMWARE = "/sys/firmware"
MODEL_PATH = "/sys/firmware/devicetree/base/model"


def seed_boot_partition(directory: Path) -> None:
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "config.txt").write_text(CONFIG_TXT)
    (directory / "cmdline.txt").write_text(CMDLINE_TXT)


def seed_device_tree(directory: Path, model: str) -> None:
    """`directory` stands for /sys/firmware; the kernel ends the model string with a NUL."""
    base = directory / "devicetree" / "base"
    base.mkdir(parents=True, exist_ok=True)
    (base / "model").write_bytes(model.encode() + b"\0")
    (base / "compatible").write_bytes(b"raspberrypi,4-model-b\0brcm,bcm2711\0")
