#!/usr/bin/env bash
# Debian packages the test lab (picluster/lab) needs on the coordinator.
#
# Idempotent: installs only what is missing.  Installing openssh-server must not
# leave an sshd listening on port 22 in the root namespace: the lab runs its own
# sshd per test host, inside that host's network namespace, and nothing else.
set -euo pipefail

packages=(
    openssh-server   # /usr/sbin/sshd, run once per test host
    openssh-client   # ssh-keygen, ssh: for people reaching a test host by hand
    iproute2         # ip netns / link / addr, tc
    util-linux       # unshare, nsenter, mount, findmnt
    sudo             # the cluster user's sudo inside each host
    nftables         # make_unreachable(how="drop"); provisioning writes nft rules
    procps           # pgrep/ps for people checking that nothing is left running
    libnss-wrapper   # a test's own hosts file for the CLI it runs: inventories that name nodes (node01.local)
    # What `picluster provision` wants on the nodes, pre-installed (service starts blocked) so
    # that inside a test host the packages step finds them and reports ok: the hosts share
    # this machine's /usr, so an install inside a host would write the machine's.
    nfs-kernel-server
    nfs-common
    python3-venv
    python3-apt      # Ansible's apt module on the test hosts (else it installs it itself)
    python3-packaging  # Ansible's pip module on the test hosts (the runtime role)
    munge slurmd slurmctld slurm-client  # the queue of an inventory with [slurm] (service starts blocked)
    slurmdbd mariadb-server  # its accounting ([slurm] accounting = true), on the controller
    libpam-slurm-adopt  # [users] with [slurm]: logins held to jobs on the workers (only its PAM module: no
                        # maintainer script, nothing in this machine's /etc/pam.d uses it)
    # Not for the lab: only its promtool, which lints the node agent's metrics page in the
    # tests (`promtool check metrics`).  Its service is never started (policy below).
    prometheus
    # VM test hosts (picluster/lab/vm): Debian 12 guests with their own kernel.
    qemu-system-x86  # qemu-system-x86_64 (with seabios and ipxe-qemu's virtio-net ROM)
    qemu-utils       # qemu-img: each VM's copy-on-write disk over the cached image
    debootstrap      # builds that image once from the Debian mirror apt uses
    e2fsprogs        # mkfs.ext4 -d: root and seed disks made from directories, no loop mount
    # arm64 VM test hosts (lab up --vm --arch arm64): the Pi's instruction set, emulated.
    qemu-system-arm  # qemu-system-aarch64 (-machine virt)
    qemu-user-static # debootstrap's second stage of the arm64 image runs arm64 programs here,
    binfmt-support   # handed to qemu-aarch64-static by binfmt_misc (enabled by arm64-deps.sh below)
)

if [[ $(id -u) -ne 0 ]]; then
    echo "lab-deps: must run as root (apt-get install)" >&2
    exit 1
fi

missing=()
for pkg in "${packages[@]}"; do
    if [[ "$(dpkg-query -W -f='${db:Status-Status}' "$pkg" 2>/dev/null || true)" != "installed" ]]; then
        missing+=("$pkg")
    fi
done

sshd_on_22() {
    # Listening sockets of the root network namespace only (ss runs here).
    ss -Hltnp 'sport = :22' 2>/dev/null | grep -q sshd
}

if (( ${#missing[@]} )); then
    had_sshd=no
    sshd_on_22 && had_sshd=yes

    # Forbid service starts during the install, unless a policy already exists
    # (Docker images ship one): then it is not ours to add or remove.
    policy=/usr/sbin/policy-rc.d
    own_policy=no
    if [[ ! -e $policy ]]; then
        printf '#!/bin/sh\n# picluster lab-deps.sh: no service starts during install\nexit 101\n' >"$policy"
        chmod 755 "$policy"
        own_policy=yes
    fi
    trap '[[ $own_policy == yes ]] && rm -f "$policy"' EXIT

    echo "lab-deps: installing ${missing[*]}"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null

    if [[ $own_policy == yes ]]; then
        rm -f "$policy"
        own_policy=no
    fi

    # Under systemd the unit may be enabled (or socket-activated) regardless.
    if [[ -d /run/systemd/system ]]; then
        systemctl disable --now ssh.service ssh.socket prometheus.service \
            munge.service slurmd.service slurmctld.service slurmdbd.service mariadb.service >/dev/null 2>&1 || true
    fi
    if [[ $had_sshd == no ]] && sshd_on_22; then
        if [[ -x /etc/init.d/ssh ]]; then
            /etc/init.d/ssh stop >/dev/null 2>&1 || true
        fi
    fi
else
    echo "lab-deps: all present (${packages[*]})"
fi

if sshd_on_22; then
    echo "lab-deps: warning: an sshd (not started here) listens on port 22 in the root namespace" >&2
fi

# The lab runs sshd directly; fail here, not in the middle of a test run.
for tool in /usr/sbin/sshd /usr/lib/openssh/sftp-server; do
    [[ -x $tool ]] || { echo "lab-deps: $tool missing after install" >&2; exit 1; }
done
[[ -f /lib/security/pam_slurm_adopt.so ]] || { echo "lab-deps: /lib/security/pam_slurm_adopt.so missing after install" >&2; exit 1; }
for tool in ip tc unshare nsenter mount umount findmnt sudo nft promtool qemu-system-x86_64 qemu-system-aarch64 qemu-img \
            debootstrap mkfs.ext4 munged slurmd slurmctld sinfo slurmdbd mariadbd; do
    command -v "$tool" >/dev/null || { echo "lab-deps: $tool missing after install" >&2; exit 1; }
done

# binfmt_misc mounted and qemu-aarch64 enabled: without them debootstrap cannot build the arm64
# VM image.  The packages are installed above; that script adds the kernel set-up (idempotent).
# Only arm64 VM labs need it, so a machine that cannot mount binfmt_misc is warned, not stopped.
bash "$(dirname "$0")/arm64-deps.sh" >/dev/null ||
    echo "lab-deps: warning: arm64 VM images cannot be built here (scripts/arm64-deps.sh failed)" >&2
