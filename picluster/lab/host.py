"""One test host: a network namespace, a private view of part of the filesystem, and a real sshd.

Inside the host (see hostinit.py for the order of mounts):
- /etc, /var, /home, /srv, /mnt and /boot are overlays: the machine's directory below, an upper
  directory in the lab's run dir on top, so whatever provisioning writes there lands in the run
  dir and nowhere else.  /usr, /opt, /work, ... are the machine's own, shared and writable:
  a host is no sandbox for package installs (an apt-get install in a host would write the
  machine's /usr, and its dpkg database in the host's /var);
- /boot/firmware is a MOCK Raspberry Pi boot partition and, optionally, /sys/firmware holds a
  MOCK device-tree model (mockpi.py);
- /run and /tmp are private tmpfs;
- /mnt/picluster is, with HostOptions.share, one directory of this machine that every host of
  the lab sees (a bind mount standing in for the NFS share: these hosts cannot mount NFS);
- directories the cluster user could not traverse on the way to this machine's Python (/root,
  when the venv links to a pyenv install there) are shown with o+x, through an overlay whose
  upper is in the host's /run, so the user can run the venv's Python over SSH.
"""

import json
import os
import stat
import subprocess
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Self

from picluster.cluster.lifetime import die_with_parent
from picluster.lab import commands, keys, mockpi, procs
from picluster.lab.cgroups import Cgroup, host_mounts
from picluster.lab.changes import Changes
from picluster.lab.limits import Limits
from picluster.util.errors import ClusterError
from picluster.util.processes import same_process, start_time

OVERLAID = ("/etc", "/var", "/home", "/srv", "/mnt", "/boot")
SHARE_DIR = "/srv/picluster"
DATA_DIR = "/mnt/picluster"

HOSTINIT = Path(__file__).with_name("hostinit.py")
SSHD_DIR_INSIDE = "/run/picluster-lab"  # where hostinit binds the host's sshd/ dir


@dataclass
class HostOptions:
    """What differs between hosts of one lab."""

    sudo_nopasswd: bool = True  # False: the user's sudo asks for a password (which it has not)
    pi_model: str | None = mockpi.DEFAULT_MODEL  # None: no MOCK device-tree model
    limits: Limits = field(default_factory=Limits)  # CPU and memory of this machine the host may use (limits.py, cgroups.py)
    # A directory of this machine the host sees at /mnt/picluster (the inventory's data_dir): in
    # place of the NFS share, which namespace hosts cannot mount.  None: the host's own, empty.
    share: str | None = None
    # True: that directory is also this host's /srv/picluster (cluster.share_dir), as the NFS
    # master's export and its own mount are the same files: what provision makes in the export
    # (the people's work folders) every host sees.
    exports_share: bool = False
    # True: the host runs this machine's Python, venv and picluster at their own paths, so a test's
    # inventory can name sys.prefix as its venv.  A namespace host always can (it shares the
    # files); a VM mounts them read-only through virtiofs (lab/vm/virtiofs.py).
    coordinator_python: bool = False
    # A VM host's size (qemu -smp, -m): a Raspberry Pi 3B+'s memory by default, and one CPU so that
    # TCG's VMs share this machine's cores fairly.  Two CPUs let jobs share a node in Slurm; a job
    # that imports TensorFlow beside another needs more than 1 GiB.  Namespace hosts: limits.
    vm_cpus: int = 1
    vm_memory_mib: int = 1024  # lab/vm/support.py's GUEST_MIB (lab/vm imports this module)

    @classmethod
    def from_dict(cls, data: dict | None) -> "HostOptions":
        """From a state file (both kinds of host keep their options this way)."""
        options = dict(data or {})
        options["limits"] = Limits.from_dict(options.get("limits"))
        return cls(**options)


@dataclass(frozen=True)
class User:
    name: str
    uid: int
    gid: int

    @property
    def home(self) -> str:
        return f"/home/{self.name}"


class StateFileEntry:
    """A host as the lab's state.json keeps it (both kinds of host: this one and lab/vm's)."""

    def to_dict(self) -> dict:
        data = asdict(self)  # type: ignore[call-overload]  # the subclasses are dataclasses
        data["dir"] = str(data["dir"])
        return data

    @classmethod
    def from_dict(cls, data: dict) -> Self:
        data = dict(data)
        data["dir"] = Path(data["dir"])
        data["options"] = HostOptions.from_dict(data.get("options"))
        return cls(**data)


@dataclass
class Host(StateFileEntry, Changes):
    name: str
    index: int
    address: str
    netns: str
    veth: str
    dir: Path
    options: HostOptions = field(default_factory=HostOptions)
    pid: int | None = None
    started: float | None = None  # the sshd's create time, so a reused pid is not taken for it
    net_inode: int | None = None
    mnt_inode: int | None = None
    cgroup: str | None = None  # the host's cgroup (cgroups.cgroup_name), once made

    kind = "netns"

    def describe(self) -> str:
        return f"netns {self.netns}"

    # -- files of the host in the run dir ---------------------------------------------------

    @property
    def sshd_dir(self) -> Path:
        return self.dir / "sshd"

    @property
    def log_path(self) -> Path:
        return self.dir / "sshd.log"

    @property
    def boot_firmware_dir(self) -> Path:
        """The MOCK boot partition, seen as /boot/firmware inside the host."""
        return self.dir / "mock-boot-firmware"

    @property
    def sys_firmware_dir(self) -> Path:
        return self.dir / "mock-sys-firmware"

    def upper_dir(self, target: str) -> Path:
        return self.dir / "layers" / target.strip("/") / "upper"

    def layers(self) -> list[tuple[str, Path]]:
        """(path inside the host, directory holding what was written there)."""
        pairs = [(target, self.upper_dir(target)) for target in OVERLAID]
        pairs.append((mockpi.BOOT_FIRMWARE, self.boot_firmware_dir))
        return pairs

    def prepare(
        self, user: User, authorized_key: str, traversable: list[str], label: str, keep_under_tmp: tuple[str, ...] | list[str] = ()
    ) -> str:
        """Write everything the host needs before it starts; returns its public host key."""
        self.dir.mkdir(parents=True, exist_ok=True)
        overlays = []
        for target in OVERLAID:
            upper = self.upper_dir(target)
            work = upper.with_name("work")
            upper.mkdir(parents=True, exist_ok=True)
            work.mkdir(parents=True, exist_ok=True)
            overlays.append({"target": target, "upper": str(upper), "work": str(work)})
        mockpi.seed_boot_partition(self.boot_firmware_dir)
        binds = [{"source": str(self.boot_firmware_dir), "target": mockpi.BOOT_FIRMWARE}]
        if self.options.pi_model:
            mockpi.seed_device_tree(self.sys_firmware_dir, self.options.pi_model)
            binds.append({"source": str(self.sys_firmware_dir), "target": mockpi.SYS_FIRMWARE})
        if self.options.share:
            binds.append({"source": self.options.share, "target": DATA_DIR})
            if self.options.exports_share:
                binds.append({"source": self.options.share, "target": SHARE_DIR})

        self.sshd_dir.mkdir(exist_ok=True)
        host_key = keys.make_keypair(self.sshd_dir / "ssh_host_ed25519_key", f"root@{self.name}")
        (self.sshd_dir / "sshd_config").write_text(self._sshd_config(label))

        spec = {
            "hostname": self.name,
            "sshd_dir": str(self.sshd_dir),
            "overlays": overlays,
            "mkdirs": [SHARE_DIR, DATA_DIR],
            "binds": binds,
            "traversable": traversable,
            "keep_under_tmp": list(keep_under_tmp),
            "hosts_file": hosts_file(self.name),
            "cgroup_mounts": host_mounts() if self.options.limits else [],
            "user": {
                "name": user.name,
                "uid": user.uid,
                "gid": user.gid,
                "home": user.home,
                "authorized_keys": authorized_key + "\n",
                "sudo_nopasswd": self.options.sudo_nopasswd,
            },
            "sshd": [commands.SSHD, "-D", "-e", "-f", f"{SSHD_DIR_INSIDE}/sshd_config"],
        }
        (self.dir / "spec.json").write_text(json.dumps(spec, indent=2))
        return host_key.public_key

    def _sshd_config(self, label: str) -> str:
        # The host's own /etc/ssh/sshd_config is left for provisioning to edit: this one lives
        # in the run dir, so nothing done inside the host can lock the harness out.
        return f"""\
# sshd of test host {self.name} ({label}), written by picluster's test lab.
ListenAddress {self.address}:22
HostKey {SSHD_DIR_INSIDE}/ssh_host_ed25519_key
PidFile {SSHD_DIR_INSIDE}/sshd.pid
AuthenticationMethods publickey
PubkeyAuthentication yes
PasswordAuthentication no
KbdInteractiveAuthentication no
PermitRootLogin no
# PAM would add nothing here but calls to services the host cannot see.
UsePAM no
StrictModes yes
UseDNS no
X11Forwarding no
PrintMotd no
PrintLastLog no
MaxStartups 64:30:128
MaxSessions 64
AcceptEnv LANG LC_*
Subsystem sftp {commands.SFTP_SERVER}
"""

    # -- process ----------------------------------------------------------------------------

    def start(self, owned: bool) -> subprocess.Popen:
        """Start hostinit (which becomes sshd) inside the host's namespaces.

        owned: the calling process owns the lab, and the kernel kills the sshd if that process
        dies, even by SIGKILL; `picluster lab up` starts hosts that outlive it.  With a cgroup,
        the first process joins it before exec, so every later process of the host is in it.
        """
        args = [
            "ip", "netns", "exec", self.netns,
            "unshare", "--uts", "--mount", "--propagation", "private", "--",
            sys.executable, "-I", str(HOSTINIT), str(self.dir / "spec.json"),
        ]  # fmt: skip
        commands.said(args)
        with open(self.log_path, "ab") as log:
            proc = subprocess.Popen(
                args,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                preexec_fn=_chain(self._joiner(), die_with_parent if owned else None),
            )
        self.pid = proc.pid
        self.started = start_time(proc.pid)
        return proc

    def record_namespaces(self) -> None:
        """Note the namespaces' inodes once hostinit is in them, to find their processes later."""
        if self.pid is not None:
            self.net_inode = procs.namespace_inode(self.pid, "net")
            self.mnt_inode = procs.namespace_inode(self.pid, "mnt")

    def alive(self) -> bool:
        return same_process(self.pid, self.started)

    def log_tail(self) -> str:
        """The last two lines of the host's log on one line (sshd says what, then that it quits)."""
        try:
            lines = [line.strip() for line in self.log_path.read_text(errors="replace").splitlines()]
        except FileNotFoundError:
            return "(no log)"
        return " / ".join([line for line in lines if line][-2:]) or "(empty log)"

    # -- acting inside the host ---------------------------------------------------------------

    def _require_alive(self) -> int:
        if not self.alive():
            raise ClusterError(f"test host {self.name} is not running ({self.log_tail()})")
        assert self.pid is not None  # alive() checked it
        return self.pid

    def run(
        self,
        args: list[str],
        *,
        input: str | None = None,
        check: bool = True,
        timeout: float = 60.0,
    ) -> subprocess.CompletedProcess:
        """Run a command as root in the host's network, mount and UTS namespaces."""
        pid = self._require_alive()
        return commands.run(
            ["nsenter", "-t", str(pid), "-n", "-m", "-u", "--", *args],
            input=input,
            check=check,
            timeout=timeout,
            preexec_fn=self._joiner(),  # a command run in the host counts against its limits too
        )

    def _joiner(self):
        return Cgroup(self.cgroup).joiner() if self.cgroup else None

    def path(self, inside: str) -> Path:
        """A path as the host sees it (through its overlays), usable from the root namespace.

        /proc/PID/root resolves in the mount namespace of PID.
        """
        return Path(f"/proc/{self._require_alive()}/root") / inside.lstrip("/")

    def read_file(self, inside: str) -> str:
        return self.path(inside).read_text()

    def write_file(self, inside: str, text: str) -> None:
        self.path(inside).write_text(text)


def _chain(*fns):
    """One preexec_fn calling each of ``fns`` that is not None, in order."""
    chosen = [fn for fn in fns if fn is not None]
    if not chosen:
        return None

    def run_all() -> None:
        for fn in chosen:
            fn()
    return run_all


def hosts_file(name: str) -> str:
    # As Raspberry Pi Imager leaves it on a freshly written card whose hostname it set.
    return (
        "127.0.0.1\tlocalhost\n"
        "::1\t\tlocalhost ip6-localhost ip6-loopback\n"
        "ff02::1\t\tip6-allnodes\n"
        "ff02::2\t\tip6-allrouters\n"
        "\n"
        f"127.0.1.1\t\t{name}\n"
    )


def untraversable_dirs(paths: list[Path]) -> list[str]:
    """Directories on the way to `paths` that others may not enter (e.g. /root, mode 0700)."""
    found: list[str] = []
    for path in paths:
        for parent in reversed(path.parents):
            if str(parent) == "/" or str(parent) in found:
                continue
            try:
                mode = os.stat(parent).st_mode
            except FileNotFoundError:
                break
            if not mode & stat.S_IXOTH:
                found.append(str(parent))
    return found


def shared_under_tmp() -> list[str]:
    """The running venv and picluster's source, when they live under /tmp (hosts get a private
    /tmp): the servers started in the hosts run this same code."""
    tmp = Path("/tmp")
    return outermost([p for p in runtime_paths() if tmp in p.parents])


def runtime_paths() -> set[Path]:
    """What a host needs to run this process's code: the venv and picluster's source tree (an
    editable install)."""
    import picluster

    return {Path(sys.prefix).resolve(), Path(picluster.__file__).resolve().parent.parent}


def outermost(paths) -> list[str]:
    """``paths`` sorted, without those inside another one (a directory comes with its parent)."""
    kept = sorted({str(p) for p in paths})
    return [p for p in kept if not any(p != q and p.startswith(q + "/") for q in kept)]
