"""VM test hosts (picluster.lab.vm): the image, its cache, one-line refusals, and real VMs with their
own kernel on a lab bridge: SSH, NFS modules, files, reboot, teardown."""

import hashlib
import json
import os
import platform
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import psutil
import pytest
import yaml

from picluster.errors import ClusterError, UsageError
from picluster.lab import keys, mockpi, naming, netns
from picluster.lab.host import User
from picluster.lab.vm import Fleet, VM, accel, guest, image, mirror, qmp, seed, support, tap
from picluster.lab.vm.scratch import ScratchNet
from picluster.provision.steps import packages as provision_packages
from vm_fixtures import BOOT_TIMEOUT, nothing_left, qemu_pids_under, vm_image, vm_pair, vm_support  # noqa: F401

REPO = Path(__file__).resolve().parents[1]


def one_line(exc: BaseException) -> str:
    text = str(exc)
    assert "\n" not in text, text
    return text


# -- without VMs -------------------------------------------------------------------------------


def test_recipe_hash_is_stable_and_covers_the_guest_files(monkeypatch):
    first = image.recipe_hash()
    assert first == image.recipe_hash() and len(first) == 16
    files = dict(guest.FILES)
    files["/etc/fstab"] = ("changed\n", 0o644)
    monkeypatch.setattr(guest, "FILES", files)
    assert image.recipe_hash() != first
    monkeypatch.setattr(image, "PACKAGES", (*image.PACKAGES, "less"))
    assert image.image_dir(Path("/c")).name == image.recipe_hash()


def test_image_preinstalls_every_package_provisioning_installs():
    wanted = set(provision_packages.EVERYWHERE) | set(provision_packages.MASTER)
    defaults = yaml.safe_load((REPO / "ansible/roles/common/defaults/main.yml").read_text())
    wanted |= set(defaults["common_packages"])
    for tasks in (REPO / "ansible/roles").glob("*/tasks/main.yml"):
        for task in yaml.safe_load(tasks.read_text()) or []:
            apt = task.get("ansible.builtin.apt") or {}
            names = apt.get("name")
            if isinstance(names, str) and "{{" not in names:
                wanted.add(names)
    assert wanted - set(image.PACKAGES) == set()
    assert "python3-apt" in image.PACKAGES  # Ansible's apt module, else it tries to install it


def test_mirror_is_read_from_both_apt_source_formats(tmp_path):
    (tmp_path / "sources.list.d").mkdir()
    (tmp_path / "sources.list.d" / "debian.sources").write_text(textwrap.dedent("""\
        Types: deb
        # a comment
        URIs: http://mirror.example/debian-security
        Suites: bookworm-security
        Components: main

        Types: deb deb-src
        URIs: http://mirror.example/debian/
        Suites: bookworm bookworm-updates
        Components: main contrib
    """))
    assert mirror.debian_mirror("bookworm", tmp_path) == "http://mirror.example/debian"
    (tmp_path / "sources.list.d" / "debian.sources").unlink()
    (tmp_path / "sources.list").write_text("deb [signed-by=/k.gpg arch=amd64] http://other.example/d bookworm main\n")
    assert mirror.debian_mirror("bookworm", tmp_path) == "http://other.example/d"
    with pytest.raises(UsageError, match="no Debian trixie mirror") as caught:
        mirror.debian_mirror("trixie", tmp_path)
    one_line(caught.value)


def fake_image(directory: Path) -> Path:
    """An image dir that passes check(): sizes, hashes and an ext4 superblock magic."""
    directory.mkdir(parents=True)
    files = {}
    for name in (image.KERNEL, image.INITRD):
        data = os.urandom(2 << 20)
        (directory / name).write_bytes(data)
        files[name] = {"size": len(data), "sha256": hashlib.sha256(data).hexdigest()}
    root = bytearray(64 << 10)
    root[image.EXT4_MAGIC_OFFSET : image.EXT4_MAGIC_OFFSET + 2] = b"\x53\xef"
    (directory / image.ROOT).write_bytes(bytes(root))
    files[image.ROOT] = {"size": len(root)}
    (directory / image.MANIFEST).write_text(json.dumps({"recipe_hash": directory.name, "files": files}))
    return directory


@pytest.mark.parametrize(
    "damage, reason",
    [
        (lambda d: (d / image.MANIFEST).unlink(), "no manifest.json"),
        (lambda d: (d / image.MANIFEST).write_text("{"), "manifest.json unreadable"),
        (lambda d: (d / image.KERNEL).unlink(), "vmlinuz missing"),
        (lambda d: os.truncate(d / image.INITRD, 1000), "initrd.img is 1000 bytes"),
        (lambda d: (d / image.KERNEL).write_bytes(b"x" * (2 << 20)), "vmlinuz differs"),
        (lambda d: (d / image.ROOT).write_bytes(b"\0" * (64 << 10)), "root.img holds no ext4"),
    ],
)
def test_a_damaged_cached_image_is_refused_in_one_line(tmp_path, damage, reason):
    directory = fake_image(tmp_path / "vm" / "images" / image.recipe_hash())
    assert image.cached(tmp_path / "vm").dir == directory
    damage(directory)
    with pytest.raises(ClusterError) as caught:
        image.cached(tmp_path / "vm")
    message = one_line(caught.value)
    assert reason in message and image.REBUILD_HINT in message and str(directory) in message


def test_a_half_built_image_is_never_used(tmp_path):
    # A build happens under .build-*; only the final rename gives it the name ensure() looks for.
    fake_image(tmp_path / "vm" / "images" / f".build-{image.recipe_hash()}-123")
    assert image.cached(tmp_path / "vm") is None


def test_removing_a_dead_builds_dir_never_reaches_into_its_mounts(tmp_path):
    # A debootstrap killed mid-way leaves /proc and /sys mounted in its target.
    precious = tmp_path / "precious"
    precious.mkdir()
    (precious / "file").write_text("keep")
    build = tmp_path / "images" / ".build-x-1"
    (build / "root" / "proc").mkdir(parents=True)
    subprocess.run(["mount", "--bind", str(precious), str(build / "root" / "proc")], check=True)
    try:
        image._remove_build(build)
    finally:
        subprocess.run(["umount", "-l", str(build / "root" / "proc")], capture_output=True)
    assert not build.exists()
    assert (precious / "file").read_text() == "keep"


def test_memory_check_refuses_in_one_line_what_does_not_fit():
    gib = 1 << 30
    support.check_memory(2, available_bytes=8 * gib)
    with pytest.raises(UsageError) as caught:
        support.check_memory(5, available_bytes=4 * gib)
    message = one_line(caught.value)
    assert "5 VMs need" in message and "start at most 2" in message
    assert support.fitting(4 * gib) == 2
    assert support.fitting(0) == 0


def test_support_refusals_say_what_to_do(monkeypatch):
    monkeypatch.setattr(os, "geteuid", lambda: 1000)
    assert "run as root" in support.missing_support()
    monkeypatch.setattr(os, "geteuid", lambda: 0)
    real_which = support.shutil.which
    monkeypatch.setattr(support.shutil, "which", lambda t: None if t.startswith("qemu") else real_which(t))
    assert support.missing_support() == (
        "VM test hosts need Debian packages qemu-system-x86, qemu-utils: "
        "apt-get install qemu-system-x86 qemu-utils (or run scripts/lab-deps.sh)"
    )


@pytest.mark.parametrize(
    "how, says",
    [
        (["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"], "VM test hosts need root"),
        (["env", "PATH=/usr/sbin:/sbin"], "apt-get install qemu-system-x86 qemu-utils"),
    ],
)
def test_cli_refuses_in_one_line_without_root_or_qemu(how, says, tmp_path):
    links_before = set(netns.link_names())
    proc = subprocess.run(
        [*how, sys.executable, "-m", "picluster.lab.vm", "try", "--nodes", "2"],
        capture_output=True, text=True, timeout=60, cwd=REPO,
        env=dict(os.environ, PICLUSTER_STATE_DIR=str(tmp_path / "state")),
    )  # fmt: skip
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.count("\n") == 1 and says in proc.stderr, proc.stderr
    assert set(netns.link_names()) == links_before
    assert not (tmp_path / "state").exists()


def test_fleet_refuses_before_making_anything(tmp_path, monkeypatch):
    vms = [VM(f"node0{i}", i, f"10.9.9.1{i}", 24, tap.name("zq1", i), "pcl-zq1", tmp_path / f"n{i}") for i in (1, 2)]
    fleet = Fleet(vms, User("pi", 1000, 1000), tmp_path / "key", tmp_path / "known", cache=tmp_path / "cache")
    monkeypatch.setattr(support, "missing_support", lambda: None)
    monkeypatch.setattr(support.psutil, "virtual_memory", lambda: type("M", (), {"available": 2 << 30})())
    with pytest.raises(UsageError, match="2 VMs need .* start at most 0"):
        fleet.up()
    assert list(tmp_path.iterdir()) == []
    assert not any(naming.lab_of_link(n) == "zq1" for n in netns.link_names())


def test_tap_names_map_back_to_their_lab_and_macs_are_stable():
    assert tap.name("ab12", 3) == "pcl-ab12-03"
    assert naming.lab_of_link(tap.name("abcdef", 99)) == "abcdef"
    assert len(tap.name("abcdef", 99)) <= 15
    assert tap.mac("pcl-ab12-03") == tap.mac("pcl-ab12-03") != tap.mac("pcl-ab12-04")
    assert tap.mac("pcl-ab12-03").startswith("52:54:00:")


def test_vm_command_has_one_nic_the_tap_and_no_user_network(tmp_path):
    vm = VM("node01", 1, "10.9.9.11", 24, "pcl-zq1-01", "pcl-zq1", tmp_path)
    img = image.Image(tmp_path, {"recipe_hash": "x"})
    args = vm.command(img, accel.Accel("tcg", "max", "test"))
    assert "-nodefaults" in args and "-no-reboot" not in args
    netdevs = [args[i + 1] for i, a in enumerate(args) if a in ("-netdev", "-nic", "-net")]
    assert netdevs == ["tap,id=lab,ifname=pcl-zq1-01,script=no,downscript=no"]
    assert args[args.index("-m") + 1] == "1024" and args[args.index("-smp") + 1] == "1"
    assert args[args.index("-accel") + 1].startswith("tcg") and args[args.index("-cpu") + 1] == "max"


def test_seed_settings_read_back_in_sh_and_the_guest_script_parses(tmp_path):
    identity = seed.Identity(
        name="node01", mac="52:54:00:01:02:03", address="10.9.9.11/24", gateway=None,
        user=User("pi", 1234, 1235), authorized_key="ssh-ed25519 AAAA test",
    )  # fmt: skip
    host_key = seed.write_tree(identity, tmp_path)
    assert host_key == keys.load_keypair(tmp_path / "ssh_host_ed25519_key").public_key
    out = subprocess.run(
        ["sh", "-c", '. ./settings; printf "%s|" "$NAME" "$ADDRESS" "$GATEWAY" "$USER_UID" "$SUDO_NOPASSWD" "$MKDIRS"'],
        cwd=tmp_path, capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    assert out == "node01|10.9.9.11/24||1234|yes|/srv/picluster /mnt/picluster|"
    assert (tmp_path / "boot-firmware" / "config.txt").read_text() == mockpi.CONFIG_TXT
    assert (tmp_path / "sys-firmware/devicetree/base/model").read_bytes() == mockpi.DEFAULT_MODEL.encode() + b"\0"
    subprocess.run(["sh", "-n", "-c", guest.SEED_SH], check=True)


def test_kvm_probe_verdict_is_cached(tmp_path, monkeypatch):
    calls = []

    def probe(kernel, args, timeout=accel.PROBE_SECONDS):
        calls.append(args)
        return False, "hung after 'Probing EDD', killed after 20 s"

    kernel = tmp_path / "vmlinuz"
    kernel.write_bytes(b"k")
    monkeypatch.delenv(accel.ENV, raising=False)
    monkeypatch.setattr(accel, "probe", probe)
    monkeypatch.setattr(accel.os, "access", lambda path, mode: True)
    first = accel.choose(kernel, tmp_path)
    assert (first.name, first.cpu) == ("tcg", "max") and "Probing EDD" in first.why
    assert len(calls) == len(accel.KVM_CPUS)
    again = accel.choose(kernel, tmp_path)
    assert (again.name, "cached" in again.why, len(calls)) == ("tcg", True, len(accel.KVM_CPUS))
    monkeypatch.setenv(accel.ENV, "tcg")
    assert accel.choose(kernel, tmp_path).why == "PICLUSTER_VM_ACCEL=tcg"
    monkeypatch.setenv(accel.ENV, "fast")
    with pytest.raises(UsageError, match="use tcg or kvm"):
        accel.choose(kernel, tmp_path)


# -- the real image ----------------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.timeout(1800)  # the first session on a machine builds the image
def test_image_is_built_once_then_cached_and_checked(vm_image):
    assert vm_image.dir == image.image_dir()
    started = time.monotonic()
    again = image.ensure()
    assert time.monotonic() - started < 30
    assert again.manifest["built"] == vm_image.manifest["built"]  # not rebuilt
    assert vm_image.kernel_release.endswith("-cloud-amd64")
    assert vm_image.root.stat().st_size == 8 << 30
    assert vm_image.root.stat().st_blocks * 512 < 2 << 30  # sparse
    assert not any(p.name.startswith(".build-") for p in vm_image.dir.parent.iterdir())
    assert not os.access(vm_image.root, os.W_OK) or vm_image.root.stat().st_mode & 0o222 == 0


@pytest.mark.slow
def test_a_damaged_cached_image_is_refused_before_anything_starts(vm_image, tmp_path):
    # A copy of the real image (hard links; the damaged file is a new one) in a cache of its own.
    cache = tmp_path / "cache"
    copy = cache / "images" / vm_image.dir.name
    copy.mkdir(parents=True)
    for name in (image.INITRD, image.ROOT, image.MANIFEST):
        os.link(vm_image.dir / name, copy / name)
    (copy / image.KERNEL).write_bytes(vm_image.kernel.read_bytes()[: 1 << 20])
    with ScratchNet(tmp_path / "run") as net:
        fleet = Fleet(net.vms(1), net.user, net.key_path, net.known_hosts_path, cache=cache)
        with pytest.raises(ClusterError) as caught:
            fleet.up(timeout=60)
        message = one_line(caught.value)
        assert "vmlinuz is 1048576 bytes" in message and image.REBUILD_HINT in message
        nothing_left(fleet, net)
    assert vm_image.kernel.stat().st_size == vm_image.manifest["files"]["vmlinuz"]["size"]


# -- real VMs ----------------------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.timeout(1800)
def test_two_vms_answer_ssh_as_themselves_and_run_their_own_kernel(vm_pair, vm_image):
    fleet, net = vm_pair
    assert [vm.name for vm in fleet.vms] == ["node01", "node02"]
    assert fleet.accel.name in ("kvm", "tcg")
    for vm in fleet.vms:
        with fleet.connect(vm) as conn:
            run = lambda cmd: conn.run(cmd, hide=True, timeout=120).stdout.strip()  # noqa: E731
            assert run("hostname") == vm.name
            assert run("id -un") == net.user.name and run("id -u") == str(net.user.uid)
            assert run("sudo -n id -un") == "root"
            # Its own kernel, not this machine's, with the NFS server module this one lacks.
            assert run("uname -r") == vm_image.kernel_release != platform.release()
            assert run("sudo -n modprobe nfsd && test -d /proc/fs/nfsd && echo yes") == "yes"
            assert run("systemctl is-active nfs-server") == "active"  # as the user: D-Bus works
            # One NIC, the lab's address, and no route beyond the lab subnet.
            assert run("ip -4 -o addr show dev eth0").split()[3] == f"{vm.address}/24"
            assert run("ls /sys/class/net | sort") == "eth0\nlo"
            assert run("ip -4 route show table all | grep -c default || true") == "0"
            assert run("ip -6 addr show dev eth0") == ""
            # The same MOCK Pi as a namespace host.
            assert run("cat /boot/firmware/config.txt") == mockpi.CONFIG_TXT.strip()
            assert run(f"tr -d '\\0' < {mockpi.MODEL_PATH}") == mockpi.DEFAULT_MODEL
            assert run("test -d /srv/picluster && test -d /mnt/picluster && echo yes") == "yes"
    # Two machines with their own ids, on one bridge: each reaches the other's sshd.
    ids = {fleet.run(vm, "cat /etc/machine-id").strip() for vm in fleet.vms}
    assert len(ids) == 2
    other = fleet.vms[1].address
    banner = fleet.run(
        "node01", f"python3 -c \"import socket; print(socket.create_connection(('{other}', 22), 10).recv(7))\""
    )
    assert banner.strip() == "b'SSH-2.0'"


@pytest.mark.slow
def test_a_file_round_trip_through_a_vm(vm_pair, tmp_path):
    fleet, _ = vm_pair
    data = os.urandom(3 << 20)
    (tmp_path / "out").write_bytes(data)
    with fleet.connect("node01") as conn:
        conn.put(str(tmp_path / "out"), "/tmp/roundtrip")
        remote_sum = conn.run("sha256sum /tmp/roundtrip", hide=True).stdout.split()[0]
        conn.run("sudo -n cp /tmp/roundtrip /srv/picluster/roundtrip", hide=True)
        conn.get("/srv/picluster/roundtrip", str(tmp_path / "back"))
    assert remote_sum == hashlib.sha256(data).hexdigest()
    assert (tmp_path / "back").read_bytes() == data


@pytest.mark.slow
@pytest.mark.timeout(1800)
def test_a_rebooted_vm_comes_back_with_the_same_identity(vm_pair):
    fleet, net = vm_pair
    vm = fleet.vm("node02")
    pid = vm.pid
    before = fleet.run(vm, "cat /proc/sys/kernel/random/boot_id; cat /etc/machine-id").split()
    # Provisioning's edits must outlive a reboot: the seed rewrites only what the harness needs.
    fleet.run(vm, "echo '10.9.9.9 provisioned' | sudo -n tee -a /etc/hosts >/dev/null")
    fleet.run(vm, "echo kept > ~/file && echo 'dtparam=spi=on' | sudo -n tee -a /boot/firmware/config.txt")
    seconds = fleet.reboot(vm, timeout=BOOT_TIMEOUT)
    assert seconds > 0 and vm.pid == pid and vm.alive()  # same qemu: the machine was reset
    # fleet.run checks the host key against known_hosts: the same key, else it would refuse.
    after = fleet.run(vm, "cat /proc/sys/kernel/random/boot_id; cat /etc/machine-id").split()
    assert after[0] != before[0] and after[1] == before[1]
    assert fleet.run(vm, "hostname").strip() == "node02"
    assert fleet.run(vm, "ip -4 -o addr show dev eth0").split()[3] == f"{vm.address}/24"
    assert "10.9.9.9 provisioned" in fleet.run(vm, "cat /etc/hosts")
    assert fleet.run(vm, "cat ~/file").strip() == "kept"
    assert fleet.run(vm, "tail -n 1 /boot/firmware/config.txt").strip() == "dtparam=spi=on"
    assert "reboot: Restarting system" in vm.console_log.read_text(errors="replace")
    # The other VM did not notice.
    assert fleet.run("node01", "hostname").strip() == "node01"


@pytest.mark.slow
def test_down_leaves_no_process_tap_or_disk(vm_pair):
    fleet, net = vm_pair
    pids = [vm.pid for vm in fleet.vms]
    assert all(psutil.pid_exists(p) for p in pids)
    fleet.down()
    nothing_left(fleet, net)
    assert not any(psutil.pid_exists(p) and psutil.Process(p).status() != psutil.STATUS_ZOMBIE for p in pids)
    fleet.down()  # idempotent
    net.down()
    nothing_left(fleet, net, bridge_too=True)


@pytest.mark.slow
def test_a_vm_that_does_not_answer_in_time_is_deleted_with_everything(vm_image, tmp_path):
    with ScratchNet(tmp_path / "run") as net:
        fleet = Fleet(net.vms(2), net.user, net.key_path, net.known_hosts_path)
        started = time.monotonic()
        with pytest.raises(ClusterError) as caught:
            fleet.up(timeout=3)
        assert "did not answer SSH within 3 s" in one_line(caught.value)
        assert time.monotonic() - started < 120  # a KVM probe may run first (at most 40 s, once)
        nothing_left(fleet, net)


@pytest.mark.slow
def test_a_failure_after_the_disks_were_made_leaves_nothing(vm_image, tmp_path):
    # The taps' bridge does not exist: the first start fails after every disk and seed was made.
    with ScratchNet(tmp_path / "run") as net:
        vms = net.vms(2)
        for vm in vms:
            vm.bridge = "pcl-nobr"
        fleet = Fleet(vms, net.user, net.key_path, net.known_hosts_path)
        with pytest.raises(ClusterError, match="pcl-nobr"):
            fleet.up(timeout=60)
        nothing_left(fleet, net)


@pytest.mark.slow
def test_qemu_dies_with_its_owner(vm_image, tmp_path):
    script = textwrap.dedent(f"""
        import time
        from pathlib import Path
        from picluster.lab.vm import image
        from picluster.lab.vm.accel import Accel
        from picluster.lab.vm.scratch import ScratchNet
        from picluster.lab import keys
        net = ScratchNet(Path({str(tmp_path / "run")!r})).up()
        vm = net.vms(1)[0]
        vm.prepare(image.cached(), net.user, keys.load_keypair(net.key_path).public_line)
        vm.start(image.cached(), Accel("tcg", "max", "test"))
        print(net.id, vm.pid, flush=True)
        time.sleep(600)
    """)
    child = subprocess.Popen([sys.executable, "-c", script], cwd=REPO, stdout=subprocess.PIPE, text=True)
    try:
        lab_id, pid = child.stdout.readline().split()
        qemu = psutil.Process(int(pid))
        assert "qemu-system-x86_64" in qemu.name()
        child.send_signal(signal.SIGKILL)  # no finally, no atexit
        child.wait(timeout=10)
        qemu.wait(timeout=10)  # PR_SET_PDEATHSIG: the kernel killed it
        assert qemu_pids_under(tmp_path) == []
    finally:
        child.kill()
        # What a lab teardown does for a dead owner's lab: every link named after its id.
        for name in sorted(n for n in netns.link_names() if naming.lab_of_link(n) == lab_id):
            netns.delete_link(name)
    assert not any(naming.lab_of_link(n) == lab_id for n in netns.link_names())


@pytest.mark.slow
def test_stop_presses_the_power_button_and_the_guest_shuts_down(vm_image, tmp_path):
    with ScratchNet(tmp_path / "run") as net:
        fleet = Fleet(net.vms(1), net.user, net.key_path, net.known_hosts_path)
        try:
            fleet.up(timeout=BOOT_TIMEOUT)
            vm = fleet.vms[0]
            assert qmp.command(vm.qmp_socket, "query-status")["status"] == "running"
            started = time.monotonic()
            vm.stop(grace=120)
            assert not vm.alive() and time.monotonic() - started < 120
            assert "reboot: Power down" in vm.console_log.read_text(errors="replace")
        finally:
            fleet.down()
        nothing_left(fleet, net)
