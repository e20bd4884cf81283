"""The VM image: Debian 12 built once with debootstrap, cached on this machine, checked before use.

    image = ensure(say=print)      # cached one, or built now (minutes); raises on a damaged cache
    image.kernel, image.initrd     # booted directly by qemu (-kernel/-initrd): no boot loader
    image.root                     # raw ext4, the read-only backing file of every VM's disk

Cache layout: ``<cache_dir>/vm/images/<recipe hash>/`` (paths.cache_dir(): ~/.cache/picluster)
holding vmlinuz, initrd.img, root.img and manifest.json.  The hash covers everything that decides the image's content (suite, packages, the
guest files of guest.py, disk size, and the architecture for arm64), so changing the recipe builds a new image beside the old one.

    image = ensure(arch="arm64")   # the Pi's instruction set: debootstrap --arch=arm64 through
                                   # binfmt_misc and qemu-user-static (its initramfs is made under
                                   # emulation: a build takes tens of minutes, once)
A build happens in ``.build-<hash>-<pid>`` next to it and is renamed into place as its last step:
a half-built image never has the final name, and one whose builder died is swept by the next build.

Every package provisioning installs is preinstalled (packages.py's EVERYWHERE and MASTER, the
Ansible roles' apt tasks), so nothing inside a VM needs a network: the lab has none.

Over 400 lines: an image is built, cached and checked against one recipe hash, and the three
share it and the build directory's naming (a half-built or stale image must never pass the check);
what goes inside the guest is guest.py's, the packages' list packages.py's.
"""

import contextlib
import fcntl
import hashlib
import json
import os
import shutil
import struct
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from picluster.cluster.lifetime import die_with_parent
from picluster.lab import commands
from picluster.lab.vm import aptsource, guest
from picluster.util import paths
from picluster.util.errors import ClusterError, UsageError

SUITE = "bookworm"
# Debian's names: "amd64" is this machine's own, "arm64" the Raspberry Pi's (emulated).
ARCHES = ("amd64", "arm64")
NATIVE = "amd64"
# A small kernel for VMs in each; bookworm's cloud-arm64 flavour has the virt machine's PL011
# console, PCI host and RTC built in, and virtio as modules (in the initramfs), like cloud-amd64.
KERNEL_PACKAGES = {"amd64": "linux-image-cloud-amd64", "arm64": "linux-image-cloud-arm64"}
# Why each one is there; provisioning's own lists are checked against this one by a test.
PACKAGES = (
    "linux-image-cloud-amd64",  # a small kernel for VMs; nfsd, the NFS client and sunrpc are modules
    "systemd-sysv",  # init; its systemd-networkd applies the seed's address
    "dbus",  # systemctl as a plain user (provisioning's `systemctl is-active`) talks D-Bus
    "libpam-systemd",  # logind sessions, as on a Pi (Raspberry Pi OS has them): [users] switches them off
    "udev",
    "openssh-server",
    "sudo",
    "nfs-kernel-server",  # provisioning: the NFS master
    "nfs-common",  # provisioning: every node
    "python3",  # Ansible, and picluster's own remote checks
    "python3-venv",  # provisioning: the TensorFlow venv
    "gcc",  # provisioning: the bind shim is built on the node (cluster/shim.py)
    "libc6-dev",
    "python3-apt",  # Ansible's apt module
    "python3-packaging",  # Ansible's pip module (the runtime role)
    "nftables",  # provisioning: the firewall
    "iproute2",
    "kmod",  # modprobe nfsd
    "procps",  # sysctl, pgrep
    "iputils-ping",  # people checking the lab's links by hand
    "munge",  # provisioning with [slurm]: every node
    "slurmd",
    "slurm-client",
    "libpam-slurm-adopt",  # provisioning with [slurm] and [users]: logins to a node only with a job there
    "slurmctld",  # provisioning with [slurm]: the controller
    "slurmdbd",  # provisioning with [slurm] accounting = true: the controller
    "mariadb-server",
)
# ext4 made from a directory (mkfs.ext4 -d): no loop mount, no root-only kernel features.  The file
# is sparse (unwritten inode tables stay holes), so 8 GiB costs what the files take (~0.6 GiB),
# and each VM's copy-on-write disk has room for a TensorFlow venv.
ROOT_SIZE = "8G"
FORMAT = 2  # of the build procedure and manifest, beyond what the recipe lists

KERNEL, INITRD, ROOT, MANIFEST = "vmlinuz", "initrd.img", "root.img", "manifest.json"
REBUILD_HINT = "python -m picluster.lab.vm image --rebuild"
MIN_SIZES = {KERNEL: 1 << 20, INITRD: 1 << 20}  # a real one is 7 MB and 30 MB
EXT4_MAGIC_OFFSET = 1024 + 0x38

Say = Callable[[str], None]


@dataclass(frozen=True)
class Image:
    dir: Path
    manifest: dict

    @property
    def kernel(self) -> Path:
        return self.dir / KERNEL

    @property
    def initrd(self) -> Path:
        return self.dir / INITRD

    @property
    def root(self) -> Path:
        return self.dir / ROOT

    @property
    def hash(self) -> str:
        return self.manifest["recipe_hash"]

    @property
    def kernel_release(self) -> str:
        return self.manifest["kernel_release"]

    @property
    def arch(self) -> str:
        return self.manifest.get("arch", NATIVE)  # amd64's manifests predate the field


def packages(arch: str = NATIVE) -> tuple[str, ...]:
    """PACKAGES with `arch`'s kernel in place of amd64's."""
    check_arch(arch)
    return tuple(KERNEL_PACKAGES[arch] if pkg == KERNEL_PACKAGES[NATIVE] else pkg for pkg in PACKAGES)


def check_arch(arch: str) -> str:
    if arch not in ARCHES:
        raise UsageError(f"VM architecture {arch!r}: use {' or '.join(ARCHES)}")
    return arch


def recipe(arch: str = NATIVE) -> dict:
    spec = {
        "format": FORMAT,
        "suite": SUITE,
        "variant": "minbase",
        "packages": sorted(packages(arch)),
        "root_size": ROOT_SIZE,
        "files": {path: [text, oct(mode)] for path, (text, mode) in sorted(guest.FILES.items())},
        "symlinks": dict(sorted(guest.SYMLINKS.items())),
        "enabled": list(guest.ENABLED),
        "masked": list(guest.MASKED),
    }
    # Only a foreign architecture is named: amd64's recipe, and so its hash and the images already
    # cached under it, stay what they were before there was a choice.
    if arch != NATIVE:
        spec["arch"] = arch
    return spec


def recipe_hash(spec: dict | None = None, arch: str = NATIVE) -> str:
    text = json.dumps(spec if spec is not None else recipe(arch), sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def cache_root() -> Path:
    return paths.cache_dir() / "vm"


def image_dir(cache: Path | None = None, arch: str = NATIVE) -> Path:
    return (cache or cache_root()) / "images" / recipe_hash(arch=arch)


# -- using the cache ---------------------------------------------------------------------------


def cached(cache: Path | None = None, arch: str = NATIVE) -> Image | None:
    """The current recipe's image when it was built (checked: raises if damaged), else None."""
    directory = image_dir(cache, arch)
    if not directory.exists():
        return None
    return check(directory, arch)


def rebuild_hint(arch: str = NATIVE) -> str:
    return REBUILD_HINT if arch == NATIVE else f"{REBUILD_HINT} --arch {arch}"


def check(directory: Path, arch: str = NATIVE) -> Image:
    """The image in `directory`, after checking it is whole; ClusterError in one line if not."""

    def damaged(what: str) -> ClusterError:
        return ClusterError(f"cached VM image {directory} is damaged ({what}): rebuild it with `{rebuild_hint(arch)}`")

    try:
        manifest = json.loads((directory / MANIFEST).read_text())
    except FileNotFoundError:
        raise damaged(f"no {MANIFEST}") from None
    except (OSError, ValueError) as exc:
        raise damaged(f"{MANIFEST} unreadable: {exc}") from None
    if not isinstance(manifest, dict) or manifest.get("recipe_hash") != directory.name:
        raise damaged(f"{MANIFEST} is for another recipe")
    files = manifest.get("files")
    if not isinstance(files, dict) or not all(isinstance(files.get(n), dict) for n in (KERNEL, INITRD, ROOT)):
        raise damaged(f"{MANIFEST} lists no files")
    for name in (KERNEL, INITRD, ROOT):
        path = directory / name
        try:
            size = path.stat().st_size
        except FileNotFoundError:
            raise damaged(f"{name} missing") from None
        want = files[name].get("size")
        if size != want:
            raise damaged(f"{name} is {size} bytes, built as {want}")
        if size < MIN_SIZES.get(name, 0):
            raise damaged(f"{name} is only {size} bytes")
    for name in (KERNEL, INITRD):
        if _sha256(directory / name) != files[name].get("sha256"):
            raise damaged(f"{name} differs from what was built")
    # The whole root disk is too big to hash at every start; its size and superblock are checked.
    with open(directory / ROOT, "rb") as f:
        f.seek(EXT4_MAGIC_OFFSET)
        magic = f.read(2)
    if len(magic) != 2 or struct.unpack("<H", magic)[0] != 0xEF53:
        raise damaged(f"{ROOT} holds no ext4 file system")
    return Image(directory, manifest)


def ensure(cache: Path | None = None, say: Say | None = None, rebuild: bool = False, arch: str = NATIVE) -> Image:
    """The cached image, built first if there is none (or `rebuild`).  A damaged one is refused
    (one line saying how to rebuild), not silently replaced: it may be in use by running VMs."""
    say = say or (lambda _line: None)
    cache = cache or cache_root()
    directory = image_dir(cache, arch)
    if not rebuild and directory.exists():
        return check(directory, arch)
    # Refused before the lock file (and the cache dir it lives in) exists: a refusal makes nothing.
    reason = missing_build_tools(arch)
    if reason:
        raise UsageError(reason)
    # One lock for every architecture: a builder sweeps all unfinished builds (.build-*) as dead.
    with _build_lock(cache):
        # Another process may have built it while this one waited for the lock.
        if not rebuild and directory.exists():
            return check(directory, arch)
        return build(cache, say, arch)


# -- building ----------------------------------------------------------------------------------


# binfmt_misc's entry for arm64 programs (qemu-user-static's, enabled by update-binfmts).
BINFMT_AARCH64 = Path("/proc/sys/fs/binfmt_misc/qemu-aarch64")


def missing_build_tools(arch: str = NATIVE) -> str | None:
    check_arch(arch)
    if os.geteuid() != 0:
        return "building the VM image needs root (debootstrap): run as root"
    missing = [pkg for tool, pkg in (("debootstrap", "debootstrap"), ("mkfs.ext4", "e2fsprogs")) if not shutil.which(tool)]
    if missing:
        return f"building the VM image needs {' and '.join(missing)}: apt-get install {' '.join(missing)}"
    if arch == "arm64" and not binfmt_enabled(BINFMT_AARCH64):
        # debootstrap's second stage runs the arm64 packages' scripts here, in a chroot.
        return (
            "building the arm64 VM image runs arm64 programs here: it needs qemu-user-static and binfmt-support "
            "with binfmt_misc's qemu-aarch64 enabled (run scripts/arm64-deps.sh)"
        )
    return None


def binfmt_enabled(entry: Path) -> bool:
    """Whether binfmt_misc's `entry` is enabled and its interpreter is there."""
    try:
        lines = entry.read_text().splitlines()
    except OSError:
        return False
    interpreter = next((ln.split(None, 1)[1] for ln in lines if ln.startswith("interpreter ")), "")
    return bool(lines) and lines[0] == "enabled" and os.path.exists(interpreter)


def build(cache: Path, say: Say, arch: str = NATIVE) -> Image:
    """debootstrap, add the guest files, pack the root into an ext4 image; atomically into place.

    The caller holds the build lock."""
    reason = missing_build_tools(arch)
    if reason:
        raise UsageError(reason)
    images = cache / "images"
    images.mkdir(parents=True, exist_ok=True)
    for stale in images.glob(".build-*"):  # builders that died (the lock says none is running)
        _remove_build(stale)
    spec = recipe(arch)
    digest = recipe_hash(spec)
    work = images / f".build-{digest}-{os.getpid()}"
    work.mkdir()
    started = time.monotonic()
    try:
        source = aptsource.debian_mirror(SUITE)
        took = "a few minutes" if arch == NATIVE else "tens of minutes: its programs run emulated"
        say(f"building the {arch} VM image {digest} with debootstrap from {source} ({took}, once)")
        root = work / "root"
        _debootstrap(root, source, work / "debootstrap.log", arch)
        customize(root)
        release = pack(root, work)
        shutil.rmtree(root)
        files: dict[str, dict[str, int | str]] = {name: {"size": (work / name).stat().st_size} for name in (KERNEL, INITRD, ROOT)}
        for name in (KERNEL, INITRD):
            files[name]["sha256"] = _sha256(work / name)
        manifest = {
            "recipe_hash": digest,
            "arch": arch,
            "recipe": spec,
            "mirror": source,
            "kernel_release": release,
            "built": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            "build_seconds": round(time.monotonic() - started, 1),
            "files": files,
        }
        (work / MANIFEST).write_text(json.dumps(manifest, indent=2))
        # Read-only from here on: every VM's disk is a copy-on-write layer over root.img.
        for name in (KERNEL, INITRD, ROOT, MANIFEST):
            (work / name).chmod(0o444)
        final = images / digest
        if final.exists():  # --rebuild: the old one goes only now that a new one is whole
            shutil.rmtree(final)
        os.rename(work, final)
    except BaseException:
        _remove_build(work)
        raise
    say(f"{arch} VM image {digest} built in {time.monotonic() - started:.0f} s: {final}")
    return check(final, arch)


def _debootstrap(root: Path, source: str, log: Path, arch: str = NATIVE) -> None:
    args = [
        "debootstrap",
        # Foreign (arm64): debootstrap runs its second stage in the chroot through binfmt_misc.
        f"--arch={arch}",
        "--variant=minbase",
        f"--include={','.join(packages(arch))}",
        "--components=main",
        SUITE,
        str(root),
        source,
    ]
    commands.said(args)
    with open(log, "wb") as out:
        proc = subprocess.run(
            args, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT, preexec_fn=die_with_parent
        )
    if proc.returncode != 0:
        lines = [ln for ln in log.read_text(errors="replace").splitlines() if ln.strip()]
        telling = [ln for ln in lines if ln.startswith(("E:", "W:"))] or lines
        raise ClusterError(f"debootstrap failed: {(telling or ['no output'])[-1].strip()[:300]}")


def customize(root: Path) -> None:
    """Make a debootstrapped tree a VM image: guest files, units, and nothing shared between VMs."""
    for path, (text, mode) in guest.FILES.items():
        target = root / path.lstrip("/")
        target.parent.mkdir(parents=True, exist_ok=True)
        if target.is_symlink() or target.exists():
            target.unlink()
        target.write_text(text)
        target.chmod(mode)
    for link, points_to in guest.SYMLINKS.items():
        link_path = root / link.lstrip("/")
        link_path.parent.mkdir(parents=True, exist_ok=True)
        if link_path.is_symlink() or link_path.exists():
            link_path.unlink()
        link_path.symlink_to(points_to)
    # openssh-server's postinst made host keys: every VM would share them.  Each gets its own.
    for key in (root / "etc" / "ssh").glob("ssh_host_*"):
        key.unlink()
    # Downloaded packages: 100 MB that no VM needs.
    for deb in (root / "var" / "cache" / "apt" / "archives").glob("*.deb"):
        deb.unlink()
    commands.run(["chroot", str(root), "systemctl", "enable", "--quiet", *guest.ENABLED], timeout=120)
    commands.run(["chroot", str(root), "systemctl", "mask", "--quiet", *guest.MASKED], timeout=120)


def pack(root: Path, out: Path) -> str:
    """kernel, initrd and root.img into `out`; returns the kernel release."""
    kernels = sorted((root / "boot").glob("vmlinuz-*"))
    if len(kernels) != 1:
        raise ClusterError(f"the image root has {len(kernels)} kernels in /boot, not one")
    release = kernels[0].name.removeprefix("vmlinuz-")
    initrd = root / "boot" / f"initrd.img-{release}"
    if not initrd.is_file():
        raise ClusterError(f"the image root has no initrd for kernel {release}")
    shutil.copyfile(kernels[0], out / KERNEL)
    shutil.copyfile(initrd, out / INITRD)
    commands.run(["mkfs.ext4", "-q", "-F", "-L", guest.ROOT_LABEL, "-d", str(root), str(out / ROOT), ROOT_SIZE], timeout=600)
    return release


def _remove_build(path: Path) -> None:
    """Delete a build dir, after unmounting what a killed debootstrap left mounted in it (/proc,
    /sys): rmtree descends into mount points, and must never reach this machine's own files."""
    for target in sorted(_mounts_under(path), reverse=True):
        subprocess.run(["umount", "-l", target], capture_output=True)
    left = _mounts_under(path)
    if left:
        raise ClusterError(f"cannot remove the unfinished VM image {path}: {left[0]} is still mounted")
    shutil.rmtree(path, ignore_errors=True)


def _mounts_under(path: Path) -> list[str]:
    real = os.path.realpath(path)
    with open("/proc/self/mountinfo") as f:
        targets = [line.split()[4].encode().decode("unicode_escape") for line in f]
    return [t for t in targets if t == real or t.startswith(real + "/")]


def _sha256(path: Path) -> str:
    with open(path, "rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


@contextlib.contextmanager
def _build_lock(cache: Path):
    # One build at a time per cache (a second `lab up --vm` waits, then finds the image built).
    cache.mkdir(parents=True, exist_ok=True)
    with open(cache / ".build.lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)
