#!/usr/bin/env bash
# Debian packages and kernel set-up the arm64 benchmark (benchmarks/arm64_memory.py) and the arm64
# VM image (lab up --vm --arch arm64) need: qemu-user-static runs aarch64 programs on this x86-64
# machine, binfmt_misc hands them to it, debootstrap builds the Debian arm64 root they run in.
# Idempotent; root only.  scripts/lab-deps.sh calls it.
set -euo pipefail

if [[ $(id -u) -ne 0 ]]; then
    echo "arm64-deps: must run as root (apt-get install, mount binfmt_misc)" >&2
    exit 1
fi

packages=(qemu-user-static binfmt-support debootstrap)
missing=()
for pkg in "${packages[@]}"; do
    [[ "$(dpkg-query -W -f='${db:Status-Status}' "$pkg" 2>/dev/null || true)" == installed ]] || missing+=("$pkg")
done
if (( ${#missing[@]} )); then
    echo "arm64-deps: installing ${missing[*]}"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

# Without systemd nothing mounts binfmt_misc at boot; update-binfmts then registers qemu-aarch64.
if [[ ! -e /proc/sys/fs/binfmt_misc/register ]]; then
    mount -t binfmt_misc binfmt_misc /proc/sys/fs/binfmt_misc
fi
if [[ ! -e /proc/sys/fs/binfmt_misc/qemu-aarch64 ]]; then
    update-binfmts --enable qemu-aarch64
fi
grep -q '^enabled' /proc/sys/fs/binfmt_misc/qemu-aarch64 || { echo "arm64-deps: qemu-aarch64 not enabled in binfmt_misc" >&2; exit 1; }
echo "arm64-deps: ready ($(qemu-aarch64-static --version | head -1))"
