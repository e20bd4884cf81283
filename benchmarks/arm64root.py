"""A cached Debian 12 arm64 root with picluster installed, and running commands in it under qemu-user.

Imported by benchmarks/arm64_memory.py; not a benchmark itself.  Root only (debootstrap, chroot,
mounts).  The root is built once with debootstrap (minbase, no kernel package: a kernel's
initramfs built under emulation is what makes an arm64 debootstrap take a quarter of an hour)
and reused; picluster is reinstalled into its venv when its source changed, its dependencies
(TensorFlow's aarch64 wheel first) only when pyproject.toml did.
"""

import contextlib
import hashlib
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_ROOT = Path("/var/cache/picluster/arm64-bookworm")
VENV = "/opt/picluster-venv"
SRC = "/opt/picluster-src"
PACKAGES = "python3,python3-venv,gcc,libc6-dev,ca-certificates"  # gcc: the bind shim is built on the node
MOUNTS = ("proc", "sys", "dev")


def mirror() -> str:
    """The Debian mirror this machine's apt uses (the only registry we may reach)."""
    for path in sorted(Path("/etc/apt/sources.list.d").glob("*")) + [Path("/etc/apt/sources.list")]:
        try:
            text = path.read_text()
        except OSError:
            continue
        found = re.search(r"^URIs:\s*(\S+)", text, re.M) or re.search(r"^deb\s+(?:\[[^]]*\]\s+)?(\S+)", text, re.M)
        if found:
            return found.group(1)
    return "http://deb.debian.org/debian"


def log(message: str) -> None:
    print(f"arm64: {message}", file=sys.stderr, flush=True)


def ensure_root(root: Path) -> None:
    """debootstrap the arm64 root once (a marker file says it finished)."""
    subprocess.run(["bash", str(ROOT / "scripts" / "arm64-deps.sh")], check=True, stdout=subprocess.DEVNULL)
    marker = root / ".picluster-root-ready"
    if marker.exists():
        return
    if root.exists():
        shutil.rmtree(root)  # an interrupted debootstrap: start over
    root.parent.mkdir(parents=True, exist_ok=True)
    log(f"debootstrap --arch=arm64 bookworm {root} (once; cached)")
    subprocess.run(["debootstrap", "--arch=arm64", "--variant=minbase", f"--include={PACKAGES}", "bookworm", str(root), mirror()],
                   check=True, stdout=subprocess.DEVNULL)
    marker.write_text("ok\n")


@contextlib.contextmanager
def mounted(root: Path) -> Iterator[None]:
    """/proc, /sys and /dev of this machine inside the root (psutil and TensorFlow read them)."""
    done = []
    try:
        for name in MOUNTS:
            target = root / name
            target.mkdir(exist_ok=True)
            subprocess.run(["mount", "--rbind", f"/{name}", str(target)], check=True)
            subprocess.run(["mount", "--make-rslave", str(target)], check=True)
            done.append(target)
        yield
    finally:
        for target in reversed(done):
            subprocess.run(["umount", "-R", "-l", str(target)], check=False)


def _digest(paths: list[Path]) -> str:
    h = hashlib.sha256()
    for path in paths:
        h.update(str(path.relative_to(ROOT)).encode())
        h.update(path.read_bytes())
    return h.hexdigest()[:16]


def ensure_picluster(root: Path) -> None:
    """picluster from this checkout in the root's venv, with its aarch64 dependencies."""
    sources = sorted(p for p in (ROOT / "picluster").rglob("*") if p.is_file() and "__pycache__" not in p.parts)
    sources += [ROOT / "pyproject.toml", ROOT / "README.md"]
    want_deps, want_src = _digest([ROOT / "pyproject.toml"]), _digest(sources)
    deps_marker, src_marker = root / "opt" / ".picluster-deps", root / "opt" / ".picluster-src"
    if deps_marker.exists() and deps_marker.read_text() == want_deps and src_marker.exists() and src_marker.read_text() == want_src:
        return
    target = root / SRC.lstrip("/")
    shutil.rmtree(target, ignore_errors=True)
    for path in sources:
        dest = target / path.relative_to(ROOT)
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(path, dest)
    # pip inside the root reaches the registry with this machine's CA bundle and pip settings.
    for conf in ("/etc/pip.conf", "/etc/ssl/certs/ca-certificates.crt"):
        if Path(conf).exists():
            (root / conf.lstrip("/")).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(conf, root / conf.lstrip("/"))
    with mounted(root):
        if not (root / VENV.lstrip("/") / "bin" / "python").exists():
            run_in(root, ["python3", "-m", "venv", VENV])
        if not (deps_marker.exists() and deps_marker.read_text() == want_deps):
            log("pip install picluster and its aarch64 dependencies (TensorFlow) into the root's venv")
            run_in(root, [f"{VENV}/bin/python", "-m", "pip", "install", "-q", SRC])
            deps_marker.write_text(want_deps)
        else:
            run_in(root, [f"{VENV}/bin/python", "-m", "pip", "install", "-q", "--no-deps", "--force-reinstall", SRC])
    src_marker.write_text(want_src)


def env(cpu: str, extra: dict[str, str] | None = None) -> dict[str, str]:
    """The environment of a command in the root: qemu's CPU model, pip's settings, a state dir."""
    out = {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": "/root", "LANG": "C.UTF-8", "QEMU_CPU": cpu,
           "PICLUSTER_STATE_DIR": "/tmp/picluster-state", "TF_CPP_MIN_LOG_LEVEL": "2"}
    out.update({k: v for k, v in os.environ.items() if k.startswith("PIP_")})
    out.update(extra or {})
    return out


def command(root: Path, args: list[str], cpu: str = "cortex-a53", extra: dict[str, str] | None = None) -> list[str]:
    """``args`` run inside the root (chroot, then env): exec all the way, so the pid is the program's."""
    return ["chroot", str(root), "/usr/bin/env", "-i", *(f"{k}={v}" for k, v in env(cpu, extra).items()), *args]


def run_in(root: Path, args: list[str], cpu: str = "cortex-a53") -> subprocess.CompletedProcess:
    return subprocess.run(command(root, args, cpu), check=True)
