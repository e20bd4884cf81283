"""This machine's Python, venv and picluster, seen by a VM at their own paths (read-only virtiofs).

A namespace host shares this machine's files, so it runs the coordinator's own runtime: a test
points the inventory's `venv` at `sys.prefix` and TensorFlow is not installed again.  A VM has its
own disk; with HostOptions.coordinator_python it gets the same view through virtiofs:

    dirs = coordinator_dirs()                 # ["/root/.pyenv/versions/3.11.7", "/work/main"]
    daemons = start(vm_dir, dirs, owned)      # one virtiofsd per directory, its socket in vm_dir
    qemu += qemu_args(dirs, vm_dir, mib)      # shared guest memory + one vhost-user-fs device each
    seed_lines(dirs)                          # the guest's seed script mounts them, read-only

Only for the runtime (ro): a VM writes nothing of this machine's.  Debian's cloud kernel has
virtiofs (no 9p), and qemu 7.2 ships virtiofsd; vhost-user needs the guest's memory shared with
the daemon, hence a memfd memory backend.  A virtiofsd exits when its qemu goes; the lab's sweep
finds any left by its socket path in the run dir, as it finds qemu by its disks.
"""

import subprocess
import sys
import time
from pathlib import Path

from picluster.cluster.lifetime import die_with_parent
from picluster.lab import commands
from picluster.lab.host import outermost, runtime_paths
from picluster.util.errors import ClusterError

VIRTIOFSD = "/usr/lib/qemu/virtiofsd"  # Debian 12's qemu-system-common
SOCKET_WAIT = 10.0


def coordinator_dirs() -> list[str]:
    """The directories a VM needs to run this process's Python and picluster: the venv and
    picluster's source tree (host.runtime_paths), and the Python the venv was made from unless
    that is the system's own /usr, which the image has; one directory covers those inside it."""
    base = Path(sys.base_prefix).resolve()
    return outermost(runtime_paths() | ({base} if base != Path("/usr") else set()))


def tag(index: int) -> str:
    return f"pclfs{index}"


def socket(vm_dir: Path, index: int) -> Path:
    return vm_dir / f"virtiofs{index}.sock"


def start(vm_dir: Path, dirs: list[str], owned: bool) -> list[subprocess.Popen]:
    """One virtiofsd per directory, each once its socket is there for qemu to connect to."""
    if dirs and not Path(VIRTIOFSD).is_file():
        raise ClusterError(f"{VIRTIOFSD} is missing: apt-get install qemu-system-common")
    daemons = []
    for index, directory in enumerate(dirs):
        path = socket(vm_dir, index)
        path.unlink(missing_ok=True)
        # cache=always: the files do not change under a running VM, and a TCG guest re-reading
        # TensorFlow's thousands of files through the daemon costs minutes.  sandbox=chroot: one
        # process (namespace mode forks a second), which dies with its owner like qemu does.
        args = [VIRTIOFSD, f"--socket-path={path}", "-o", f"source={directory}", "-o", "cache=always", "-o", "sandbox=chroot"]
        commands.said(args)
        with open(vm_dir / f"virtiofsd{index}.log", "ab") as log:
            daemons.append(subprocess.Popen(
                args,
                stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
                preexec_fn=die_with_parent if owned else None,
            ))  # fmt: skip
    deadline = time.monotonic() + SOCKET_WAIT
    for index, daemon in enumerate(daemons):
        while not socket(vm_dir, index).exists():
            if daemon.poll() is not None or time.monotonic() > deadline:
                for other in daemons:
                    other.kill()
                said = (vm_dir / f"virtiofsd{index}.log").read_text(errors="replace").strip().splitlines()
                raise ClusterError(f"virtiofsd for {dirs[index]} did not start: {said[-1] if said else 'no output'}")
            time.sleep(0.05)
    return daemons


def qemu_args(dirs: list[str], vm_dir: Path, memory_mib: int) -> list[str]:
    if not dirs:
        return []
    args = ["-object", f"memory-backend-memfd,id=mem,size={memory_mib}M,share=on", "-numa", "node,memdev=mem"]
    for index in range(len(dirs)):
        args += ["-chardev", f"socket,id=fs{index},path={socket(vm_dir, index)}",
                 "-device", f"vhost-user-fs-pci,chardev=fs{index},tag={tag(index)}"]  # fmt: skip
    return args


def seed_lines(dirs: list[str]) -> str:
    """The seed's `virtiofs` file: one "TAG PATH" line per directory (paths have no newline)."""
    for directory in dirs:
        if "\n" in directory or " " in directory:
            raise ClusterError(f"cannot share {directory!r} with a VM: the path has a space or a newline")
    return "".join(f"{tag(i)} {d}\n" for i, d in enumerate(dirs))
