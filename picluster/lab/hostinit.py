"""First process of a test host: builds the host's private view of the filesystem, then becomes its sshd.

Started by host.py as
    ip netns exec NS unshare --uts --mount --propagation private -- python -I hostinit.py SPEC
so it already runs in the host's network, UTS and (private) mount namespaces.  It mounts what
SPEC (JSON written by host.py) lists, seeds the cluster user, and execs sshd, which therefore
keeps this PID: the harness tracks one process per host, and every mount made here lives and dies
with the mount namespace.

Standard library only, and no picluster imports: it runs by path, before anything is mounted.
"""

import json
import os
import shutil
import socket
import subprocess
import sys

SCRATCH = "/run/picluster-lab-scratch"


def main(spec_path: str) -> None:
    with open(spec_path) as f:
        spec = json.load(f)
    os.umask(0o022)
    socket.sethostname(spec["hostname"])

    # A private /run: sshd's privilege-separation dir and pid file, sudo's timestamps, and
    # no view of the machine's systemd or D-Bus sockets, so `systemctl` inside a host cannot
    # reach the real services.
    mount(["-t", "tmpfs", "-o", "mode=0755,nosuid,nodev", "tmpfs", "/run"])
    os.makedirs("/run/sshd", mode=0o755)
    os.makedirs("/run/lock", mode=0o1777)
    os.chmod("/run/lock", 0o1777)
    os.makedirs("/run/picluster-lab")
    bind(spec["sshd_dir"], "/run/picluster-lab")

    for layer in spec["overlays"]:
        overlay(layer["target"], layer["upper"], layer["work"])
    for target in spec["mkdirs"]:
        os.makedirs(target, exist_ok=True)
    for item in spec["binds"]:
        os.makedirs(item["target"], exist_ok=True)
        bind(item["source"], item["target"])
    for target in spec["traversable"]:
        make_traversable(target)
    mount_cgroups(spec.get("cgroup_mounts", []))
    # Last: a run dir under /tmp must stay reachable for the mounts above.  Paths under /tmp
    # that hosts must keep seeing (a checkout and its venv, as in CI) are parked under /run
    # and bound back over the private /tmp.
    parked = []
    for i, path in enumerate(spec.get("keep_under_tmp", [])):
        spot = f"{SCRATCH}/keep{i}"
        os.makedirs(spot)
        bind(path, spot)
        parked.append((spot, path))
    mount(["-t", "tmpfs", "-o", "mode=1777,nosuid,nodev", "tmpfs", "/tmp"])
    for spot, path in parked:
        os.makedirs(path, exist_ok=True)
        bind(spot, path)

    write("/etc/hostname", spec["hostname"] + "\n")
    write("/etc/hosts", spec["hosts_file"])
    add_user(spec["user"])

    os.execv(spec["sshd"][0], spec["sshd"])


def mount(args: list[str]) -> None:
    proc = subprocess.run(["mount", *args], capture_output=True, text=True)
    if proc.returncode != 0:
        fail(f"mount {' '.join(args)}: {proc.stderr.strip()}")


def bind(source: str, target: str) -> None:
    mount(["--bind", source, target])


def overlay(target: str, upper: str, work: str) -> None:
    mount(["-t", "overlay", "overlay", "-o", f"lowerdir={target},upperdir={upper},workdir={work}", target])


def mount_cgroups(mounts: list[dict]) -> None:
    """The machine's cgroup hierarchies again, read-only (``ip netns exec`` hid them under a new
    /sys): the host's agent reads its own limits and usage there."""
    if not mounts:
        return
    if any(m["target"] != "/sys/fs/cgroup" for m in mounts):  # v1: one directory per hierarchy
        mount(["-t", "tmpfs", "-o", "mode=0755,nosuid,nodev,noexec", "tmpfs", "/sys/fs/cgroup"])
    for m in mounts:
        os.makedirs(m["target"], exist_ok=True)
        options = ",".join(o for o in ("ro", m["options"]) if o)
        mount(["-t", m["fstype"], "-o", options, m["fstype"], m["target"]])


def make_traversable(target: str) -> None:
    """Show `target` with o+x, so the cluster user can reach e.g. the Python the venv links to."""
    name = target.strip("/").replace("/", "_")
    upper, work = f"{SCRATCH}/{name}/upper", f"{SCRATCH}/{name}/work"
    os.makedirs(upper)
    os.makedirs(work)
    overlay(target, upper, work)
    os.chmod(target, os.stat(target).st_mode & 0o7777 | 0o011)


def add_user(user: dict) -> None:
    name, uid, gid, home = user["name"], user["uid"], user["gid"], user["home"]
    append("/etc/passwd", f"{name}:x:{uid}:{gid}:picluster lab user:{home}:/bin/bash\n")
    # '*' is no password at all, yet not a locked account: key logins work, password ones cannot.
    append("/etc/shadow", f"{name}:*:20000:0:99999:7:::\n")
    append("/etc/group", f"{name}:x:{gid}:\n")
    append("/etc/gshadow", f"{name}:!::\n")
    # Raspberry Pi OS puts its user in group sudo and adds a NOPASSWD rule in sudoers.d.
    add_to_group("/etc/group", "sudo", name)
    add_to_group("/etc/gshadow", "sudo", name)
    if user["sudo_nopasswd"]:
        sudoers = f"/etc/sudoers.d/010_{name}-nopasswd"
        write(sudoers, f"{name} ALL=(ALL) NOPASSWD: ALL\n")
        os.chmod(sudoers, 0o440)

    shutil.copytree("/etc/skel", home, dirs_exist_ok=True)
    ssh_dir = os.path.join(home, ".ssh")
    os.makedirs(ssh_dir, exist_ok=True)
    keys = os.path.join(ssh_dir, "authorized_keys")
    write(keys, user["authorized_keys"])
    # sshd's StrictModes: nothing on the way to authorized_keys writable by others.
    os.chmod(home, 0o750)
    os.chmod(ssh_dir, 0o700)
    os.chmod(keys, 0o600)
    for root, dirs, files in os.walk(home):
        os.chown(root, uid, gid)
        for entry in dirs + files:
            os.lchown(os.path.join(root, entry), uid, gid)


def append(path: str, line: str) -> None:
    with open(path, "a") as f:
        f.write(line)


def write(path: str, text: str) -> None:
    with open(path, "w") as f:
        f.write(text)


def add_to_group(path: str, group: str, member: str) -> None:
    # Rewritten in place so the file keeps its owner and mode (gshadow is root:shadow 0640).
    with open(path, "r+") as f:
        lines = f.read().splitlines(keepends=True)
        for i, line in enumerate(lines):
            fields = line.rstrip("\n").split(":")
            if fields[0] == group:
                members = [m for m in fields[-1].split(",") if m]
                if member not in members:
                    fields[-1] = ",".join(members + [member])
                lines[i] = ":".join(fields) + "\n"
        f.seek(0)
        f.truncate()
        f.write("".join(lines))


def fail(message: str) -> None:
    print(f"hostinit: {' '.join(message.split())}", file=sys.stderr, flush=True)
    sys.exit(1)


if __name__ == "__main__":
    try:
        main(sys.argv[1])
    except SystemExit:
        raise
    except Exception as exc:  # one line in the host's log, which the harness reports
        fail(f"{type(exc).__name__}: {exc}")
