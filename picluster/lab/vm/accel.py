"""Which accelerator VMs use: KVM only where a kernel actually boots under it, else TCG.

/dev/kvm existing proves little: on this (nested) machine `-cpu host` aborts ("failed to set MSR
0x10a") and other CPU models hang right after "Probing EDD" in early boot.  So KVM is probed for
real: the image's kernel, without initrd or root disk, booted with `panic=-1` and `-no-reboot`,
must reach its "cannot mount root" panic and qemu must exit by itself within PROBE_SECONDS.
That is the whole kernel's early boot, done in about a second under working KVM.

The verdict is cached (accel.json beside the images), keyed by what could change it: this
machine's kernel and CPU, qemu's version, the image's kernel.  TCG with `-cpu max` always works
(about 30 s to multi-user for Debian 12's cloud kernel on a 2-core machine).

PICLUSTER_VM_ACCEL=tcg or =kvm skips the probe.

arm64 guests (the Pi's instruction set) are always TCG with `-cpu cortex-a72` (a Pi 4's core):
KVM runs only this machine's own instruction set, so there is nothing to probe.
"""

import hashlib
import json
import os
import platform
import subprocess
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from picluster.cluster.lifetime import die_with_parent
from picluster.lab.vm import support
from picluster.util.errors import UsageError

PROBE_SECONDS = 20.0
ENV = "PICLUSTER_VM_ACCEL"
# In the order tried; the first that boots wins.  Here the first aborts and the second hangs.
KVM_CPUS = ("host", "qemu64")
# What the kernel prints once it has run its whole early boot and found no root to mount.
BOOTED = "VFS:"
NATIVE = "amd64"  # this machine's own Debian architecture, the only one KVM can run
ARM64_CPU = "cortex-a72"  # a Raspberry Pi 4's core (a 3B+ has cortex-a53)


@dataclass(frozen=True)
class Accel:
    name: str  # "kvm" or "tcg"
    cpu: str
    why: str  # one line: how it was chosen

    @property
    def args(self) -> list[str]:
        return ["-accel", self.name, "-cpu", self.cpu]

    def describe(self) -> str:
        return f"{self.name.upper()} (-cpu {self.cpu}): {self.why}"


def choose(kernel: Path, cache: Path, say: Callable[[str], None] | None = None, arch: str = NATIVE) -> Accel:
    """KVM if it boots here (probed once, verdict cached), else TCG; `say` hears a probe run.
    A foreign `arch` is emulated: TCG, no probe."""
    forced = os.environ.get(ENV, "").strip().lower()
    if arch != NATIVE:
        if forced == "kvm":
            raise UsageError(f"{ENV}=kvm: {arch} guests are emulated on this {NATIVE} machine (TCG only)")
        return Accel("tcg", ARM64_CPU, f"{arch} guests on this {NATIVE} machine are emulated")
    if forced == "tcg":
        return Accel("tcg", "max", f"{ENV}=tcg")
    if forced == "kvm":
        return Accel("kvm", "host", f"{ENV}=kvm")
    if forced:
        raise UsageError(f"{ENV}={forced!r}: use tcg or kvm")
    if not os.access("/dev/kvm", os.R_OK | os.W_OK):
        return Accel("tcg", "max", "no usable /dev/kvm")

    key = _key(kernel)
    verdicts = _load(cache)
    if key in verdicts:
        found = verdicts[key]
        return Accel(found["name"], found["cpu"], f"{found['why']} (cached probe)")
    if say:
        say(f"probing whether KVM boots a kernel here (at most {len(KVM_CPUS) * PROBE_SECONDS:.0f} s, once)")
    failures = []
    chosen = None
    for cpu in KVM_CPUS:
        ok, detail = probe(kernel, ["-accel", "kvm", "-cpu", cpu])
        if ok:
            chosen = Accel("kvm", cpu, f"KVM probe booted with -cpu {cpu} ({detail})")
            break
        failures.append(f"-cpu {cpu}: {detail}")
    if chosen is None:
        chosen = Accel("tcg", "max", f"KVM probe failed ({'; '.join(failures)})")
    verdicts[key] = {"name": chosen.name, "cpu": chosen.cpu, "why": chosen.why, "when": time.strftime("%Y-%m-%d %H:%M")}
    _save(cache, verdicts)
    return chosen


def probe(kernel: Path, accel_args: list[str], timeout: float = PROBE_SECONDS) -> tuple[bool, str]:
    """Boot `kernel` with no root until its panic; (booted, one-line detail)."""
    with tempfile.TemporaryDirectory(prefix="picluster-accel-") as tmp:
        log = Path(tmp) / "console.log"
        args = [
            support.QEMU, *accel_args, "-m", "256", "-smp", "1",
            "-nodefaults", "-no-user-config", "-display", "none", "-no-reboot",
            "-serial", f"file:{log}",
            "-kernel", str(kernel),
            "-append", "console=ttyS0 earlyprintk=ttyS0 panic=-1 root=/dev/picluster-no-root",
        ]  # fmt: skip
        started = time.monotonic()
        proc = subprocess.Popen(
            args, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, preexec_fn=die_with_parent
        )
        try:
            out, _ = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.communicate()
            return False, f"hung after {_last(log)!r}, killed after {timeout:g} s"
        elapsed = time.monotonic() - started
        console = log.read_text(errors="replace") if log.exists() else ""
        if BOOTED in console:
            return True, f"{elapsed:.1f} s to the kernel's root panic"
        qemu_says = _tail(out.decode(errors="replace"))
        return False, f"qemu exited {proc.returncode}: {qemu_says or _last(log)}"


def _key(kernel: Path) -> str:
    try:
        version = subprocess.run(
            [support.QEMU, "--version"], capture_output=True, text=True, timeout=10
        ).stdout.splitlines()[0]
    except (OSError, IndexError, subprocess.TimeoutExpired):
        version = "?"
    model = ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    digest = hashlib.sha256(kernel.read_bytes()).hexdigest()[:16]
    return f"{platform.release()} | {model} | {version} | kernel {digest} | cpus {','.join(KVM_CPUS)}"


def _load(cache: Path) -> dict:
    try:
        data = json.loads((cache / "accel.json").read_text())
        return data if isinstance(data, dict) else {}
    except (OSError, ValueError):
        return {}


def _save(cache: Path, verdicts: dict) -> None:
    cache.mkdir(parents=True, exist_ok=True)
    tmp = cache / f"accel.json.{os.getpid()}"
    tmp.write_text(json.dumps(verdicts, indent=2))
    tmp.replace(cache / "accel.json")


def _last(log: Path) -> str:
    try:
        return _tail(log.read_text(errors="replace")) or "no console output"
    except OSError:
        return "no console output"


def _tail(text: str) -> str:
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return lines[-1][:200] if lines else ""
