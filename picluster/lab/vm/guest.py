"""Files baked into the VM image: how a guest takes its identity from its seed disk at every boot.

A VM gets no network configuration service, no cloud-init and no metadata server: the harness
writes a small read-only disk per VM (seed.py) and the image carries a oneshot systemd unit that
mounts it (by its label, so drive order does not matter) and applies it early, before the network
and sshd start.

What the harness relies on is applied at *every* boot, from the seed, so a reboot comes back
the same: hostname, address (a runtime networkd file in /run), sshd host key, the MOCK device-tree
model, this machine's runtime when shared.  What provisioning may change afterwards (/etc/hosts, the user's authorized_keys, sudoers,
the MOCK boot partition) is written only on the first boot of that seed, so a reboot does not undo
provisioning's edits.

Everything here is part of the image recipe's hash (image.py): changing a byte builds a new image.
"""

SEED_LABEL = "pclseed"
ROOT_LABEL = "pclroot"
SEED_MOUNT = "/run/picluster-seed"
SEED_SCRIPT = "/usr/local/sbin/picluster-seed"
SEED_UNIT = "picluster-seed.service"
NETWORK_FILE = "/run/systemd/network/10-picluster-lab.network"
APPLIED = "/var/lib/picluster-seed/applied"

# POSIX sh: Python in a TCG guest starts about 20x slower than on the host.
SEED_SH = f"""\
#!/bin/sh
# picluster test lab: apply this VM's identity from its seed disk (see {SEED_UNIT}).
# Written into the image by picluster/lab/vm/guest.py.
set -eu
SEED={SEED_MOUNT}
APPLIED={APPLIED}

mkdir -p "$SEED"
if ! mountpoint -q "$SEED"; then
    # The seed is a virtio disk probed with the root disk; allow a few seconds all the same.
    tries=0
    until mount -o ro LABEL={SEED_LABEL} "$SEED" 2>/dev/null; do
        tries=$((tries + 1))
        [ "$tries" -lt 50 ] || {{ echo "picluster-seed: no disk labelled {SEED_LABEL}" >&2; exit 1; }}
        sleep 0.2
    done
fi
. "$SEED/settings"

# -- every boot: what the harness needs to reach and trust this VM ----------------------------
printf '%s\\n' "$NAME" > /proc/sys/kernel/hostname
mkdir -p "$(dirname {NETWORK_FILE})"
{{
    printf '[Match]\\nMACAddress=%s\\n\\n[Network]\\nAddress=%s\\n' "$MAC" "$ADDRESS"
    # IPv4 on the lab subnet only: no link-local IPv6, no router solicitations.
    printf 'LinkLocalAddressing=no\\nIPv6AcceptRA=no\\n'
    if [ -n "$GATEWAY" ]; then printf 'Gateway=%s\\n' "$GATEWAY"; fi
}} > {NETWORK_FILE}.tmp
mv {NETWORK_FILE}.tmp {NETWORK_FILE}
install -m 600 -o root -g root "$SEED/ssh_host_ed25519_key" /etc/ssh/ssh_host_ed25519_key
install -m 644 -o root -g root "$SEED/ssh_host_ed25519_key.pub" /etc/ssh/ssh_host_ed25519_key.pub
if [ -d "$SEED/sys-firmware" ] && ! mountpoint -q /sys/firmware; then
    mount --bind "$SEED/sys-firmware" /sys/firmware
fi
# This machine's runtime at its own paths, read-only, where the seed asks for it (virtiofs.py).
# A mount that fails is said on the console and the boot goes on: SSH still lets a test see why.
if [ -f "$SEED/virtiofs" ]; then
    while read -r tag path; do
        mkdir -p "$path"
        mountpoint -q "$path" || mount -t virtiofs -o ro "$tag" "$path" ||
            echo "picluster-seed: cannot mount virtiofs $tag at $path" >&2
        # The cluster user must walk to it: parents such as /root (0700) get o+x.
        dir=$(dirname "$path")
        while [ "$dir" != / ]; do chmod o+x "$dir"; dir=$(dirname "$dir"); done
    done < "$SEED/virtiofs"
fi

# -- first boot of this seed only: what provisioning may edit later ---------------------------
if [ "$(cat "$APPLIED" 2>/dev/null || true)" != "$SEED_ID" ]; then
    printf '%s\\n' "$NAME" > /etc/hostname
    install -m 644 "$SEED/hosts" /etc/hosts
    getent group "$USER_NAME" >/dev/null || groupadd -g "$USER_GID" "$USER_NAME"
    if ! id -u "$USER_NAME" >/dev/null 2>&1; then
        # '*': no password, yet not a locked account: key logins work, password ones cannot.
        useradd -m -u "$USER_UID" -g "$USER_GID" -G sudo -s /bin/bash -p '*' \\
            -c "picluster lab user" "$USER_NAME"
    fi
    home=$(getent passwd "$USER_NAME" | cut -d: -f6)
    chmod 750 "$home"
    install -d -m 700 -o "$USER_UID" -g "$USER_GID" "$home/.ssh"
    install -m 600 -o "$USER_UID" -g "$USER_GID" "$SEED/authorized_keys" "$home/.ssh/authorized_keys"
    sudoers="/etc/sudoers.d/010_$USER_NAME-nopasswd"
    if [ "$SUDO_NOPASSWD" = yes ]; then
        printf '%s ALL=(ALL) NOPASSWD: ALL\\n' "$USER_NAME" > "$sudoers.tmp"
        chmod 440 "$sudoers.tmp"
        mv "$sudoers.tmp" "$sudoers"
    else
        rm -f "$sudoers"
    fi
    mkdir -p /boot/firmware
    cp -R "$SEED/boot-firmware/." /boot/firmware/
    for dir in $MKDIRS; do mkdir -p "$dir"; done
    mkdir -p "$(dirname "$APPLIED")"
    printf '%s\\n' "$SEED_ID" > "$APPLIED.tmp"
    sync
    mv "$APPLIED.tmp" "$APPLIED"
fi
"""

SEED_SERVICE = f"""\
# picluster test lab: this VM's identity (hostname, address, host key, user) from its seed disk.
# Before the network and sshd, so both start with it.
[Unit]
Description=picluster lab: identity from the seed disk
DefaultDependencies=no
After=local-fs.target
Wants=network-pre.target
Before=sysinit.target network-pre.target systemd-networkd.service ssh.service
Before=systemd-user-sessions.service shutdown.target
Conflicts=shutdown.target

[Service]
Type=oneshot
RemainAfterExit=yes
ExecStart={SEED_SCRIPT}

[Install]
WantedBy=sysinit.target
"""

# The root disk is mounted read-write by the kernel (root=/dev/vda rw): no fsck pass, nothing else.
FSTAB = f"LABEL={ROOT_LABEL} / ext4 rw,errors=remount-ro 0 0\n"

SSHD_DROPIN = """\
# picluster test lab (image): only the host key the seed disk provides; no DNS lookups
# (there is no DNS).  Provisioning is free to edit /etc/ssh/sshd_config itself.
HostKey /etc/ssh/ssh_host_ed25519_key
UseDNS no
"""

# debootstrap copies this machine's resolv.conf; the lab has no DNS, so nothing may be tried.
RESOLV_CONF = "# picluster test lab: no DNS inside the lab (names are in /etc/hosts)\n"

# Units that would only burn emulated CPU (or try the network, which the lab does not have).
MASKED = (
    "apt-daily.timer",
    "apt-daily-upgrade.timer",
    "dpkg-db-backup.timer",
    "e2scrub_all.timer",
    "e2scrub_reap.service",
    "fstrim.timer",
)
ENABLED = ("systemd-networkd.service", SEED_UNIT)

# link -> target.  dbus's postinst wrote its own machine id, which systemd copies into an empty
# /etc/machine-id on first boot: every VM would share it.  Debian links the two on new systems.
SYMLINKS = {"/var/lib/dbus/machine-id": "/etc/machine-id"}

# path inside the image -> (text, mode)
FILES = {
    SEED_SCRIPT: (SEED_SH, 0o755),
    f"/etc/systemd/system/{SEED_UNIT}": (SEED_SERVICE, 0o644),
    "/etc/fstab": (FSTAB, 0o644),
    "/etc/ssh/sshd_config.d/picluster-lab.conf": (SSHD_DROPIN, 0o644),
    "/etc/resolv.conf": (RESOLV_CONF, 0o644),
    # Each VM says who it is from its seed; the image is nobody.
    "/etc/hostname": ("localhost\n", 0o644),
    # Empty: systemd makes a new machine id at each VM's first boot (debootstrap left one).
    "/etc/machine-id": ("", 0o444),
}
