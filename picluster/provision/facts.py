"""Step 1, facts: what a node is (OS release, architecture, Pi model, boot directory, kernel NFS,
how its nfs-utils is configured, which network manager it has, its Python and C library, and the
address it sees the coordinator at)."""

import re
from dataclasses import dataclass

from picluster.cluster.ssh import Remote
from picluster.provision.result import Item, Status
from picluster.util.errors import ClusterError

PI_OS_RELEASES = ("bookworm", "bullseye")
NODE_PYTHON = (3, 11)  # pyproject.toml's requires-python: picluster itself runs on every node

_SCRIPT = r"""
. /etc/os-release 2>/dev/null
echo "id=$ID"
echo "codename=$VERSION_CODENAME"
echo "pretty=$PRETTY_NAME"
[ -e /etc/rpi-issue ] && echo "rpi_issue=yes"
echo "arch=$(uname -m)"
m=$(tr -d '\000' < /proc/device-tree/model 2>/dev/null || tr -d '\000' < /sys/firmware/devicetree/base/model 2>/dev/null)
echo "model=$m"
[ -e /boot/firmware/config.txt ] && echo "boot_firmware=yes"
[ -e /boot/config.txt ] && echo "boot_legacy=yes"
echo "raspi_config=$(command -v raspi-config)"
[ -d /run/systemd/system ] && echo "systemd=yes"
grep -qw nfsd /proc/filesystems && echo "nfsd=yes"
grep -qw nfs /proc/filesystems && echo "nfs=yes"
k=/lib/modules/$(uname -r)/kernel/fs
[ -n "$(find $k/nfsd -name 'nfsd.ko*' 2>/dev/null | head -n 1)" ] && echo "nfsd_module=yes"
[ -n "$(find $k/nfs -name 'nfs.ko*' 2>/dev/null | head -n 1)" ] && echo "nfs_module=yes"
echo "hostname=$(hostname)"
echo "home=$HOME"
echo "nfsconf=$(PATH="$PATH:/usr/sbin:/sbin" command -v nfsconf)"  # in sbin, off a user's PATH
echo "nfs_utils=$(dpkg-query -W -f='${Version}' nfs-common 2>/dev/null)"
if [ -d /run/systemd/system ]; then
    # The network manager in use, not merely installed: systemd ships networkd's wait-online unit
    # everywhere, and where networkd manages no link that unit waits two minutes and fails.
    for pair in NetworkManager:NetworkManager-wait-online systemd-networkd:systemd-networkd-wait-online \
                networking:ifupdown-wait-online dhcpcd:; do
        if systemctl is-active --quiet "${pair%%:*}" 2>/dev/null; then
            echo "network=${pair%%:*}"
            [ -n "${pair#*:}" ] && systemctl cat "${pair#*:}.service" >/dev/null 2>&1 && echo "wait_online=${pair#*:}.service"
            break
        fi
    done
fi
echo "python=$(python3 -V 2>/dev/null | cut -d' ' -f2)"
echo "glibc=$(getconf GNU_LIBC_VERSION 2>/dev/null | cut -d' ' -f2)"
echo "coordinator=${SSH_CONNECTION%% *}"
echo "cpus=$(nproc 2>/dev/null)"
echo "mem_kb=$(awk '$1 == "MemTotal:" {print $2}' /proc/meminfo 2>/dev/null)"
if [ -f /sys/fs/cgroup/cgroup.controllers ]; then echo "cgroup=v2"; echo "cgroup_controllers=$(cat /sys/fs/cgroup/cgroup.controllers)"
elif [ -d /sys/fs/cgroup/cpu ] || [ -d /sys/fs/cgroup/memory ]; then echo "cgroup=v1"; fi
"""


@dataclass(frozen=True)
class Facts:
    os_id: str
    codename: str
    pretty: str
    pi_os: bool
    arch: str
    model: str | None
    boot_dir: str | None  # None: not a Pi
    raspi_config: str | None  # path of raspi-config, when installed
    systemd: bool
    nfs_server_kernel: bool  # nfsd is in the kernel or a module of it
    nfs_client_kernel: bool
    hostname: str
    home: str
    nfsconf: str | None = None  # nfsconf's path: nfs-utils reads /etc/nfs.conf.d (bookworm), not /etc/default
    nfs_utils: str = ""  # nfs-common's package version
    network: str = ""  # the active network service: NetworkManager, systemd-networkd, networking (ifupdown), dhcpcd
    wait_online: str | None = None  # its unit that makes boot wait for the network, when it has one
    python: str = ""  # python3's version, "3.11.2"
    glibc: str = ""  # "2.36"
    coordinator: str = ""  # the address this node sees the coordinator's SSH session come from
    cpus: int = 0  # online CPUs (nproc): a Slurm node's CPUs
    mem_mb: int = 0  # MemTotal in MiB: a Slurm node's RealMemory (slurmd -C reports the same)
    cgroup: str = ""  # "v2" (unified), "v1" (one mount per controller) or "" (none mounted)
    cgroup_controllers: tuple[str, ...] = ()  # v2: the controllers the root offers (a Pi's lacks memory unless turned on)

    @property
    def is_pi(self) -> bool:
        return _is_pi(self.model)

    def summary(self) -> str:
        os_name = "Raspberry Pi OS" if self.pi_os else self.os_id.capitalize()
        parts = [f"{os_name} {self.codename or '?'}", self.arch, self.model or "not a Pi"]
        if self.boot_dir:
            parts.append(f"boot {self.boot_dir}")
        return ", ".join(parts)


def _is_pi(model: str | None) -> bool:
    return bool(model and model.startswith("Raspberry Pi"))


def parse(text: str) -> Facts:
    values: dict[str, str] = {}
    for line in text.splitlines():
        key, sep, value = line.partition("=")
        if sep:
            values[key.strip()] = value.strip()
    os_id = values.get("id", "").lower()
    codename = values.get("codename", "").lower()
    model = values.get("model") or None
    pi_os = os_id == "raspbian" or values.get("rpi_issue") == "yes"
    if values.get("boot_firmware") == "yes":
        boot = "/boot/firmware"
    elif values.get("boot_legacy") == "yes":
        boot = "/boot"
    else:
        boot = "/boot" if codename in ("bullseye", "buster", "stretch") else "/boot/firmware"
    return Facts(
        os_id=os_id,
        codename=codename,
        pretty=values.get("pretty", ""),
        pi_os=pi_os,
        arch=values.get("arch", ""),
        model=model,
        boot_dir=boot if _is_pi(model) else None,
        raspi_config=values.get("raspi_config") or None,
        systemd=values.get("systemd") == "yes",
        nfs_server_kernel=values.get("nfsd") == "yes" or values.get("nfsd_module") == "yes",
        nfs_client_kernel=values.get("nfs") == "yes" or values.get("nfs_module") == "yes",
        hostname=values.get("hostname", ""),
        home=values.get("home", ""),
        nfsconf=values.get("nfsconf") or None,
        nfs_utils=values.get("nfs_utils", ""),
        network=values.get("network", ""),
        wait_online=values.get("wait_online") or None,
        python=values.get("python", ""),
        glibc=values.get("glibc", ""),
        coordinator=values.get("coordinator", ""),
        cpus=_count(values.get("cpus")),
        mem_mb=_count(values.get("mem_kb")) // 1024,
        cgroup=values.get("cgroup", "") if values.get("cgroup") in ("v1", "v2") else "",
        cgroup_controllers=tuple(values.get("cgroup_controllers", "").split()),
    )


def _count(text: str | None) -> int:
    return int(text) if text and text.isdigit() and len(text) < 19 else 0


def check_supported(facts: Facts) -> None:
    if facts.os_id not in ("debian", "raspbian"):
        raise ClusterError(
            f"unsupported OS {facts.pretty or facts.os_id or 'unknown'} (want Raspberry Pi OS bookworm/bullseye or Debian)"
        )
    if facts.pi_os and facts.codename not in PI_OS_RELEASES:
        raise ClusterError(f"unsupported Raspberry Pi OS release {facts.codename or '?'} (want bookworm or bullseye)")
    version = re.fullmatch(r"(\d+)\.(\d+)(?:\.\d+)?\S*", facts.python)
    if version and (int(version.group(1)), int(version.group(2))) < NODE_PYTHON:
        # Said here, before anything changes: else the runtime step's pip finds no TensorFlow for it.
        raise ClusterError(f"python3 {facts.python} on the node: picluster needs Python {'.'.join(map(str, NODE_PYTHON))} or newer "
                           "on every node (Raspberry Pi OS bookworm and Debian 12 have 3.11; bullseye has 3.9)")


def gather(remote: Remote) -> tuple[Facts, list[Item]]:
    """Log in, read the facts, and check sudo works without a password."""
    remote.open()
    facts = parse(remote.run(_SCRIPT).stdout)
    check_supported(facts)
    remote.run("true", sudo=True)  # raises SudoPasswordRequired
    items = [
        Item("reachable", Status.OK, f"{remote.user}@{remote.conn.host}, sudo without password"),
        Item("system", Status.OK, facts.summary()),
    ]
    return facts, items
