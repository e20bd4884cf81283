"""VM test hosts (picluster.lab.vm): the image, its cache, one-line refusals, and `picluster lab up
--vm`: real VMs with their own kernel on a lab bridge (SSH, NFS modules, reboot, teardown).
Provisioning on VMs is in test_provision_vm.py."""

import hashlib
import json
import os
import platform
import signal
import subprocess
import sys
import textwrap
import time
import tomllib
from pathlib import Path

import psutil
import pytest
import yaml

from picluster.lab import Lab, keys, mockpi, naming, netns, procs, reap_orphans, teardown
from picluster.lab.host import HostOptions, User
from picluster.lab.registry import known_ids, state_root
from picluster.lab.vm import VM, VMHost, accel, aptsource, guest, image, seed, support, tap, virtiofs
from picluster.provision.steps import packages as provision_packages
from picluster.util.errors import ClusterError, UsageError

from conftest import picluster

REPO = Path(__file__).resolve().parents[1]


def qemu_pids_under(path) -> list[int]:
    """qemu processes whose command line names a file under `path`."""
    return [pid for pid in procs.naming_path(path) if _is_qemu(pid)]


def _is_qemu(pid: int) -> bool:
    try:
        return psutil.Process(pid).name().startswith("qemu-system")
    except psutil.NoSuchProcess:
        return False


def nothing_left(lab_id: str, run_dir: Path) -> None:
    """No qemu, tap, bridge, disk or state of the lab; the lab is not known any more."""
    assert qemu_pids_under(run_dir) == []
    assert [n for n in netns.link_names() if naming.lab_of_link(n) == lab_id] == []
    assert not run_dir.exists()
    assert lab_id not in known_ids()


def cli(*args, env=None, how=(), timeout=900) -> subprocess.CompletedProcess:
    return picluster(*args, how=how, timeout=timeout, env=env or dict(os.environ, COLUMNS="200"))


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


ACCOUNTING_PACKAGES = ("mariadb-server", "slurmdbd")


def test_image_preinstalls_every_package_provisioning_installs():
    wanted = set(provision_packages.EVERYWHERE) | set(provision_packages.MASTER)
    defaults = yaml.safe_load((REPO / "ansible/roles/common/defaults/main.yml").read_text())
    wanted |= set(defaults["common_packages"])
    slurm = yaml.safe_load((REPO / "ansible/roles/slurm/defaults/main.yml").read_text())
    wanted |= set(slurm["slurm_packages"]) | set(slurm["slurm_controller_packages"])
    wanted |= set(ACCOUNTING_PACKAGES)  # `[slurm] accounting = true`, on the controller
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
    assert aptsource.debian_mirror("bookworm", tmp_path) == "http://mirror.example/debian"
    (tmp_path / "sources.list.d" / "debian.sources").unlink()
    (tmp_path / "sources.list").write_text("deb [signed-by=/k.gpg arch=amd64] http://other.example/d bookworm main\n")
    assert aptsource.debian_mirror("bookworm", tmp_path) == "http://other.example/d"
    with pytest.raises(UsageError, match="no Debian trixie mirror") as caught:
        aptsource.debian_mirror("trixie", tmp_path)
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


@pytest.mark.lab  # a bind mount: root
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


@pytest.mark.lab  # as root, dropping to nobody for the first; the others are what root meets next
@pytest.mark.parametrize(
    "how, env, says",
    [
        (["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"], {}, "VM test hosts need root"),
        ([], {"PATH": "/usr/sbin:/sbin"}, "apt-get install qemu-system-x86 qemu-utils"),
        ([], {"PICLUSTER_TEST_NODES": "99"}, "start at most"),
    ],
)
def test_lab_up_vm_refuses_in_one_line_and_makes_nothing(how, env, says, tmp_path):
    # A lab makes its run dir (under the state dir) before its bridge: no state dir, no bridge.
    # (Other labs on this machine come and go meanwhile, so links are not compared.)
    state = tmp_path / "state"
    nodes = env.pop("PICLUSTER_TEST_NODES", "2")
    proc = cli(
        "lab", "up", "--vm", "--nodes", nodes, how=how,
        env=dict(os.environ, PICLUSTER_STATE_DIR=str(state), PICLUSTER_CACHE_DIR=str(tmp_path / "cache"), **env),
        timeout=60,
    )  # fmt: skip
    assert proc.returncode == 2 and proc.stdout == "", proc.stdout
    assert proc.stderr.count("\n") == 1 and says in proc.stderr, proc.stderr
    assert not state.exists() and not (tmp_path / "cache").exists()  # no image built for a refusal
    assert qemu_pids_under(tmp_path) == []


def test_a_lab_refuses_more_vms_than_memory_holds_before_making_anything(tmp_path, monkeypatch):
    monkeypatch.setattr(support, "missing_support", lambda arch="amd64": None)
    monkeypatch.setattr(support.psutil, "virtual_memory", lambda: type("M", (), {"available": 2 << 30})())
    lab = Lab(2, vm=True, root=tmp_path / "labs")
    with pytest.raises(UsageError, match=r"2 VMs need .* start at most 0"):
        lab.up()
    assert lab.id is None and not (tmp_path / "labs").exists()


def test_a_lab_of_larger_vms_counts_their_size_against_memory(tmp_path, monkeypatch):
    """HostOptions(vm_cpus=, vm_memory_mib=): VMs a job of TensorFlow and another fit on; the
    memory check counts them at that size, before anything is made."""
    monkeypatch.setattr(support, "missing_support", lambda arch="amd64": None)
    monkeypatch.setattr(support.psutil, "virtual_memory", lambda: type("M", (), {"available": 8 << 30})())
    big = HostOptions(vm_cpus=2, vm_memory_mib=4096)
    lab = Lab(2, vm=True, root=tmp_path / "labs", host_options={"node01": big, "node02": big})
    with pytest.raises(UsageError, match=r"2 VMs need 9\.8 GiB of memory \(4096 MiB each, .* start at most 1"):
        lab.up()
    assert lab.id is None and not (tmp_path / "labs").exists()
    vm = VM("node01", 1, "10.9.9.11", 24, "pcl-zq1-01", "pcl-zq1", tmp_path, cpus=big.vm_cpus, memory_mib=big.vm_memory_mib)
    args = vm.command(image.Image(tmp_path, {"recipe_hash": "x"}), accel.Accel("tcg", "max", "test"))
    assert args[args.index("-m") + 1] == "4096" and args[args.index("-smp") + 1] == "2"


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
    # Its disks live in its dir: that is how a lab's teardown finds a qemu whose state is lost.
    assert any(a.startswith(f"file={tmp_path}/disk.qcow2,") for a in args)


def test_a_vm_sharing_this_machines_python_gets_shared_memory_and_one_read_only_mount_per_directory(tmp_path):
    dirs = virtiofs.coordinator_dirs()
    repo = str(REPO.resolve())
    assert repo in dirs or any(repo.startswith(d + "/") for d in dirs)  # picluster's source (editable install)
    prefix = str(Path(sys.prefix).resolve())
    assert any(prefix == d or prefix.startswith(d + "/") for d in dirs)  # the venv
    assert not any(a != b and a.startswith(b + "/") for a in dirs for b in dirs)  # none inside another
    vm = VM("node01", 1, "10.9.9.11", 24, "pcl-zq1-01", "pcl-zq1", tmp_path, shares=["/opt/py", "/work/tree"])
    args = vm.command(image.Image(tmp_path, {"recipe_hash": "x"}), accel.Accel("tcg", "max", "test"))
    # vhost-user needs the guest's memory shared with virtiofsd, and all of it.
    assert args[args.index("-object") + 1] == "memory-backend-memfd,id=mem,size=1024M,share=on"
    assert "node,memdev=mem" in args
    devices = [args[i + 1] for i, a in enumerate(args) if a == "-device" and args[i + 1].startswith("vhost-user-fs")]
    assert devices == ["vhost-user-fs-pci,chardev=fs0,tag=pclfs0", "vhost-user-fs-pci,chardev=fs1,tag=pclfs1"]
    assert f"socket,id=fs1,path={tmp_path}/virtiofs1.sock" in args  # in its dir: the sweep finds its virtiofsd
    assert "memory-backend-memfd" not in " ".join(VM("node02", 2, "10.9.9.12", 24, "t", "b", tmp_path).command(
        image.Image(tmp_path, {"recipe_hash": "x"}), accel.Accel("tcg", "max", "test")))
    assert virtiofs.seed_lines(vm.shares) == "pclfs0 /opt/py\npclfs1 /work/tree\n"
    with pytest.raises(ClusterError, match="has a space or a newline"):
        virtiofs.seed_lines(["/my dir"])
    assert 'mount -t virtiofs -o ro "$tag" "$path"' in guest.SEED_SH  # the guest mounts them read-only


def test_a_vm_host_round_trips_through_the_state_file_without_its_login(tmp_path):
    host = VMHost("node02", 2, "10.9.9.12", 24, "pcl-zq1-02", "pcl-zq1", tmp_path / "node02", pid=4242, accel="tcg")
    host.login = object()  # type: ignore[assignment]
    data = json.loads(json.dumps(host.to_dict()))
    assert "login" not in data
    back = VMHost.from_dict(data)
    assert (back.name, back.veth, back.netns, back.pid, back.dir) == ("node02", "pcl-zq1-02", None, 4242, tmp_path / "node02")
    assert back.login is None and back.describe() == "vm, qemu pid 4242 (tcg)"
    with pytest.raises(ClusterError, match="no view from this machine"):
        back.path("/etc/hosts")


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


# -- arm64 VMs (the Pi's instruction set), without VMs ------------------------------------------


def legacy_recipe() -> dict:
    """The recipe as it was before there was an architecture to choose: amd64's images cached
    under its hash must stay valid, so amd64's recipe may not gain or change a key."""
    return {
        "format": image.FORMAT,
        "suite": image.SUITE,
        "variant": "minbase",
        "packages": sorted(image.PACKAGES),
        "root_size": image.ROOT_SIZE,
        "files": {path: [text, oct(mode)] for path, (text, mode) in sorted(guest.FILES.items())},
        "symlinks": dict(sorted(guest.SYMLINKS.items())),
        "enabled": list(guest.ENABLED),
        "masked": list(guest.MASKED),
    }


def test_amd64_recipe_hash_is_unchanged_and_arm64_has_its_own():
    assert image.recipe() == image.recipe("amd64") == legacy_recipe()
    assert image.recipe_hash() == image.recipe_hash(arch="amd64") == image.recipe_hash(legacy_recipe())
    arm = image.recipe("arm64")
    assert arm.pop("arch") == "arm64"
    assert set(legacy_recipe()["packages"]) - set(arm["packages"]) == {"linux-image-cloud-amd64"}
    assert set(arm["packages"]) - set(legacy_recipe()["packages"]) == {"linux-image-cloud-arm64"}
    assert image.recipe_hash(arch="arm64") != image.recipe_hash()
    assert image.image_dir(Path("/c"), "arm64") != image.image_dir(Path("/c")) == Path("/c/images") / image.recipe_hash()
    with pytest.raises(UsageError, match="use amd64 or arm64"):
        image.recipe("sparc")


def test_arm64_vm_command_is_the_virt_board_emulated_with_one_nic(tmp_path, monkeypatch):
    monkeypatch.setattr(accel, "probe", lambda *a, **k: pytest.fail("no KVM probe for a foreign architecture"))
    monkeypatch.setattr(accel.os, "access", lambda path, mode: True)  # even where /dev/kvm works
    monkeypatch.delenv(accel.ENV, raising=False)
    kernel = tmp_path / "vmlinuz"
    kernel.write_bytes(b"k")
    chosen = accel.choose(kernel, tmp_path, arch="arm64")
    assert (chosen.name, chosen.cpu) == ("tcg", "cortex-a72") and not (tmp_path / "accel.json").exists()
    vm = VM("node01", 1, "10.9.9.11", 24, "pcl-zq1-01", "pcl-zq1", tmp_path, uuid="u", arch="arm64")
    args = vm.command(image.Image(tmp_path, {"recipe_hash": "x", "arch": "arm64"}), chosen)
    assert args[0] == "qemu-system-aarch64" and args[args.index("-machine") + 1] == "virt"
    assert args[args.index("-accel") + 1] == "tcg,tb-size=256" and args[args.index("-cpu") + 1] == "cortex-a72"
    assert args[args.index("-m") + 1] == "1024" and args[args.index("-smp") + 1] == "1"
    append = args[args.index("-append") + 1].split()
    assert "console=ttyAMA0" in append and "console=ttyS0" not in append and "root=/dev/vda" in append
    assert "-nodefaults" in args and "kvm" not in " ".join(args)
    netdevs = [args[i + 1] for i, a in enumerate(args) if a in ("-netdev", "-nic", "-net")]
    assert netdevs == ["tap,id=lab,ifname=pcl-zq1-01,script=no,downscript=no"]
    devices = [args[i + 1] for i, a in enumerate(args) if a == "-device"]
    assert devices == [f"virtio-net-pci,netdev=lab,mac={vm.mac}", "virtio-rng-pci"]
    assert [a for a in args if a.startswith("file=")][:2] == [f"file={tmp_path}/disk.qcow2,format=qcow2,if=virtio",
                                                             f"file={tmp_path}/seed.img,format=raw,if=virtio,readonly=on"]
    # amd64's own command is as it was: no board, the PC's serial console.
    amd = VM("node01", 1, "10.9.9.11", 24, "pcl-zq1-01", "pcl-zq1", tmp_path).command(
        image.Image(tmp_path, {"recipe_hash": "x"}), accel.Accel("tcg", "max", "test"))
    assert amd[0] == "qemu-system-x86_64" and "-machine" not in amd and "console=ttyS0" in amd[amd.index("-append") + 1]
    with pytest.raises(ClusterError, match="is arm64 but image"):
        vm.command(image.Image(tmp_path, {"recipe_hash": "x"}), chosen)
    monkeypatch.setenv(accel.ENV, "kvm")
    with pytest.raises(UsageError, match="emulated"):
        accel.choose(kernel, tmp_path, arch="arm64")


def test_arm64_image_build_refuses_in_one_line_without_binfmt_and_makes_nothing(tmp_path, monkeypatch):
    monkeypatch.setattr(image.os, "geteuid", lambda: 0)
    monkeypatch.setattr(image.shutil, "which", lambda tool: f"/usr/bin/{tool}")
    monkeypatch.setattr(image, "BINFMT_AARCH64", tmp_path / "no-binfmt")
    assert image.missing_build_tools("amd64") is None
    with pytest.raises(UsageError) as caught:
        image.ensure(tmp_path / "cache", arch="arm64")
    message = one_line(caught.value)
    assert "qemu-user-static" in message and "scripts/arm64-deps.sh" in message
    assert not (tmp_path / "cache").exists()
    entry = tmp_path / "qemu-aarch64"
    entry.write_text(f"enabled\ninterpreter {sys.executable}\nflags: PF\n")
    assert image.binfmt_enabled(entry)
    entry.write_text(f"disabled\ninterpreter {sys.executable}\n")
    assert not image.binfmt_enabled(entry)


def test_arm64_support_refusal_names_qemu_system_arm(monkeypatch):
    monkeypatch.setattr(os, "geteuid", lambda: 0)
    real_which = support.shutil.which
    monkeypatch.setattr(support.shutil, "which", lambda t: None if t == "qemu-system-aarch64" else real_which(t))
    assert support.missing_support("arm64") == (
        "VM test hosts need Debian packages qemu-system-arm: apt-get install qemu-system-arm (or run scripts/lab-deps.sh)"
    )
    assert "qemu-system-arm" not in (support.missing_support("amd64") or "")


def test_lab_up_arch_choices_are_the_image_architectures():
    from picluster.cli.lab import up

    choice = next(p for p in up.params if p.name == "arch").type
    assert tuple(choice.choices) == image.ARCHES


@pytest.mark.parametrize(
    "args, says",
    [
        (["--arch", "sparc", "--vm"], "'sparc' is not one of 'amd64', 'arm64'"),
        (["--arch", "arm64"], "--arch arm64 needs --vm"),
        (["--arch", "arm64", "--nodes", "1"], "--arch arm64 needs --vm"),
        (["--share-venv", "--nodes", "1"], "--share-venv is for VMs: namespace hosts see this machine's venv already"),
        (["--vm", "--arch", "arm64", "--share-venv"], "this machine's venv holds amd64 programs, which arm64 VMs cannot run"),
    ],
)
def test_lab_up_refuses_a_bad_arch_in_one_line_and_makes_nothing(args, says, tmp_path):
    state, cache = tmp_path / "state", tmp_path / "cache"
    proc = cli("lab", "up", *args, env=dict(os.environ, PICLUSTER_STATE_DIR=str(state), PICLUSTER_CACHE_DIR=str(cache)), timeout=60)
    assert proc.returncode == 2 and proc.stdout == "", proc.stdout
    assert proc.stderr.startswith("picluster: error: ") and proc.stderr.count("\n") == 1, proc.stderr
    assert says in proc.stderr and "Traceback" not in proc.stderr
    assert not state.exists() and not cache.exists()


def test_the_state_file_keeps_a_vm_labs_arch_and_old_ones_mean_amd64(tmp_path):
    host = VMHost("node01", 1, "10.9.9.11", 24, "pcl-ab12-01", "pcl-ab12", tmp_path / "ab12" / "hosts" / "node01", arch="arm64")
    state = {"version": 1, "id": "ab12", "kind": "vm", "arch": "arm64", "phase": "up", "subnet": "10.9.9.0/24",
             "user": {"name": "pi", "uid": 1000, "gid": 1000}, "owner": None, "hosts": [host.to_dict()]}
    (tmp_path / "ab12").mkdir()
    (tmp_path / "ab12" / "state.json").write_text(json.dumps(state))
    lab = Lab.load("ab12", root=tmp_path)
    assert (lab.arch, lab.kind.arch, lab.host("node01").arch) == ("arm64", "arm64", "arm64")
    assert "arm64 VMs" in lab.kind.describe() and lab.host("node01").describe() == "vm arm64"
    lab.save()
    assert json.loads((tmp_path / "ab12" / "state.json").read_text())["arch"] == "arm64"
    # Written before there was a choice: no arch in the lab or its hosts.
    del state["arch"]
    for entry in state["hosts"]:
        del entry["arch"]
    (tmp_path / "ab12" / "state.json").write_text(json.dumps(state))
    lab = Lab.load("ab12", root=tmp_path)
    assert (lab.arch, lab.kind.arch, lab.host("node01").arch) == ("amd64", "amd64", "amd64")
    with pytest.raises(UsageError, match="needs --vm"):
        Lab(1, arch="arm64")
    with pytest.raises(UsageError, match="use amd64 or arm64"):
        Lab(1, vm=True, arch="sparc")


# -- the real image ----------------------------------------------------------------------------


@pytest.mark.vm
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
    assert vm_image.root.stat().st_mode & 0o222 == 0


def damaged_cache(vm_image, tmp_path: Path) -> Path:
    """A cache holding a copy of the real image (hard links) whose kernel is cut short."""
    cache = tmp_path / "cache"
    copy = cache / "vm" / "images" / vm_image.dir.name
    copy.mkdir(parents=True)
    for name in (image.INITRD, image.ROOT, image.MANIFEST):
        os.link(vm_image.dir / name, copy / name)
    (copy / image.KERNEL).write_bytes(vm_image.kernel.read_bytes()[: 1 << 20])
    return cache


@pytest.mark.vm
def test_a_damaged_cached_image_is_refused_before_anything_starts(vm_image, tmp_path):
    cache = damaged_cache(vm_image, tmp_path)
    proc = cli(
        "lab", "up", "--vm", "--nodes", "2",
        env=dict(os.environ, PICLUSTER_STATE_DIR=str(tmp_path / "state"), PICLUSTER_CACHE_DIR=str(cache)), timeout=120,
    )  # fmt: skip
    assert proc.returncode == 1 and proc.stdout == ""
    assert proc.stderr.count("\n") == 1, proc.stderr
    assert "vmlinuz is 1048576 bytes" in proc.stderr and image.REBUILD_HINT in proc.stderr
    assert not (tmp_path / "state").exists()
    assert qemu_pids_under(tmp_path) == []
    assert vm_image.kernel.stat().st_size == vm_image.manifest["files"]["vmlinuz"]["size"]


# -- real VMs ----------------------------------------------------------------------------------


@pytest.mark.vm
@pytest.mark.timeout(2400)
def test_cli_up_status_ssh_reboot_and_down_of_a_vm_lab_that_runs_this_machines_venv(vm_image, tmp_path):
    lab_id = "v" + os.urandom(2).hex()
    inventory = tmp_path / "picluster.toml"
    try:
        up = cli("lab", "up", "--vm", "--share-venv", "--nodes", "1", "--name", lab_id, "--inventory-out", inventory)
        assert up.returncode == 0, up.stderr
        assert "VMs use " in up.stderr  # which accelerator, and why
        lab = Lab.load(lab_id)
        host = lab.host("node01")
        assert isinstance(host, VMHost) and host.alive() and f"lab {lab_id} (VMs" in up.stdout
        assert tomllib.loads(inventory.read_text()) == tomllib.loads(lab.inventory_path.read_text())
        assert tomllib.loads(inventory.read_text())["cluster"]["nodes"] == "node01"

        status = cli("lab", "status", "--name", lab_id)
        assert status.returncode == 0 and "running" in status.stdout and f"qemu pid {host.pid}" in status.stdout

        # OpenSSH's own client with the printed command; a VM with its own kernel, not this one's.
        ssh = subprocess.run(
            [*lab.ssh_command("node01"), "-o", "BatchMode=yes", "hostname; uname -r; id -un; sudo -n id -un"],
            capture_output=True, text=True, timeout=120,
        )  # fmt: skip
        name, release, user, root = ssh.stdout.split()
        assert (name, user, root) == ("node01", "pi", "root") and release == vm_image.kernel_release != platform.release()
        run = lambda *args: host.run(list(args)).stdout.strip()
        assert run("sh", "-c", "modprobe nfsd && test -d /proc/fs/nfsd && echo yes") == "yes"
        assert run("ip", "-4", "-o", "addr", "show", "dev", "eth0").split()[3] == f"{host.address}/24"
        assert run("sh", "-c", "ls /sys/class/net | sort") == "eth0\nlo"
        assert run("sh", "-c", "ip -4 route show table all | grep -c default || true") == "0"
        assert host.read_file("/boot/firmware/config.txt") == mockpi.CONFIG_TXT
        assert run("sh", "-c", f"tr -d '\\0' < {mockpi.MODEL_PATH}") == mockpi.DEFAULT_MODEL

        # --share-venv: the VM runs this machine's venv, read-only.
        def as_user(command: str) -> subprocess.CompletedProcess:
            return host.run(["runuser", "-u", lab.user.name, "--", "sh", "-c", command], check=False, timeout=300)

        def runs_picluster() -> None:
            # What a node's task runs: the venv's Python and picluster, as the cluster user.
            done = as_user(f"{sys.prefix}/bin/python -c 'import picluster, psutil; print(picluster.__file__)'")
            assert done.returncode == 0, done.stderr
            assert done.stdout.strip() == str(Path(sys.modules["picluster"].__file__).resolve())

        runs_picluster()
        written = as_user(f"touch {REPO}/.written-by-a-vm")
        assert written.returncode != 0 and "Read-only file system" in written.stderr
        assert not (REPO / ".written-by-a-vm").exists()

        # What provisioning writes outlives a reboot; the VM comes back as itself, the venv mounted again.
        before = host.boot_id()
        host.write_file("/etc/provisioned", "kept\n")
        reboot = cli("lab", "reboot", "--name", lab_id)
        assert reboot.returncode == 0 and reboot.stdout.startswith("node01: back after "), reboot.stderr
        assert host.boot_id() != before and host.read_file("/etc/provisioned") == "kept\n"
        assert run("hostname") == "node01"
        runs_picluster()
        daemons = [p for p in procs.naming_path(lab.run_dir) if psutil.Process(p).name() == "virtiofsd"]
        assert len(daemons) == len(host.shares) > 0  # one per directory, the same across the guest's reboot
        refused = cli("lab", "reboot", "--name", lab_id, "node07")
        assert refused.returncode == 2 and "has no host 'node07'" in refused.stderr

        down = cli("lab", "down", "--name", lab_id)
        assert down.returncode == 0 and f"lab {lab_id}: down" in down.stdout, down.stderr
        nothing_left(lab_id, lab.run_dir)
        assert procs.naming_path(lab.run_dir) == []  # no virtiofsd left with its qemu gone
    finally:
        teardown(lab_id)


@pytest.mark.vm
def test_a_vm_lab_that_does_not_answer_in_time_leaves_nothing(vm_image, tmp_path):
    lab = Lab(2, vm=True, root=tmp_path / "labs")
    started = time.monotonic()
    with pytest.raises(ClusterError) as caught:
        lab.up(timeout=3)
    assert "did not answer SSH within 3s" in one_line(caught.value)
    assert time.monotonic() - started < 120  # a KVM probe may run first (at most 40 s, once)
    nothing_left(lab.id, lab.run_dir)


@pytest.mark.vm
def test_a_failure_after_the_disks_were_made_leaves_nothing(vm_image, tmp_path, monkeypatch):
    real_start = VMHost.start

    def start_then_fail(self, image_, accel_, owned=True):
        if self.name == "node02":
            raise ClusterError("injected failure while starting node02")
        return real_start(self, image_, accel_, owned)

    monkeypatch.setattr(VMHost, "start", start_then_fail)
    lab = Lab(2, vm=True, root=tmp_path / "labs")
    with pytest.raises(ClusterError, match="injected"):
        lab.up()
    assert (tmp_path / "labs").exists() and not list((tmp_path / "labs").iterdir())
    nothing_left(lab.id, lab.run_dir)


@pytest.mark.vm
def test_qemu_dies_with_its_owner_and_the_next_session_reaps_the_rest(vm_image):
    lab_id = "q" + os.urandom(2).hex()
    script = textwrap.dedent(f"""
        from picluster.lab import Lab
        Lab(nodes=1, lab_id={lab_id!r}, vm=True).up()
    """)
    child = subprocess.Popen([sys.executable, "-c", script], cwd=REPO, stderr=subprocess.DEVNULL)
    state = state_root() / lab_id / "state.json"
    deadline = time.monotonic() + 120
    pid = None
    while time.monotonic() < deadline and not pid:
        try:
            pid = json.loads(state.read_text())["hosts"][0]["pid"]
        except (FileNotFoundError, ValueError, KeyError, IndexError):
            time.sleep(0.05)
    try:
        assert pid, "the child never started its VM"
        qemu = psutil.Process(pid)
        assert qemu.name().startswith("qemu-system")
        child.send_signal(signal.SIGKILL)  # no finally, no atexit
        child.wait(timeout=10)
        qemu.wait(timeout=10)  # PR_SET_PDEATHSIG: the kernel killed it
        assert lab_id in known_ids() and lab_id in reap_orphans()
        nothing_left(lab_id, state_root() / lab_id)
    finally:
        child.kill()
        teardown(lab_id)


# -- a real arm64 VM ---------------------------------------------------------------------------


@pytest.mark.long
@pytest.mark.timeout(7200)  # the first arm64 lab on a machine builds its image: tens of minutes, emulated
def test_an_arm64_vm_lab_boots_debian_on_the_pis_instruction_set():
    for reason in (support.missing_support("arm64"), None if image.cached(arch="arm64") else image.missing_build_tools("arm64")):
        if reason:
            pytest.fail(reason, pytrace=False)  # never a skip: it would hide a missing install step
    lab_id = "a" + os.urandom(2).hex()
    try:
        up = cli("lab", "up", "--vm", "--arch", "arm64", "--nodes", "1", "--name", lab_id, timeout=7000)
        assert up.returncode == 0, up.stderr
        assert "arm64 VMs use TCG (-cpu cortex-a72)" in up.stderr and f"lab {lab_id} (arm64 VMs (TCG))" in up.stdout
        lab = Lab.load(lab_id)
        host = lab.host("node01")
        assert lab.arch == host.arch == "arm64" and psutil.Process(host.pid).name() == "qemu-system-aarch64"
        ssh = subprocess.run(
            [*lab.ssh_command("node01"), "-o", "BatchMode=yes", "uname -m; hostname"], capture_output=True, text=True, timeout=300,
        )  # fmt: skip
        assert ssh.stdout.split() == ["aarch64", "node01"], ssh.stderr
        # SSH answers before boot has finished: wait for systemd's verdict (degraded: a unit failed,
        # which `systemctl --failed` names; still a booted system).
        deadline = time.monotonic() + 1200
        while (state := host.run(["systemctl", "is-system-running"], check=False, timeout=300).stdout.strip()) in ("initializing", "starting"):
            assert time.monotonic() < deadline, f"still {state} after 1200 s"
            time.sleep(5)
        assert state in ("running", "degraded"), state
        down = cli("lab", "down", "--name", lab_id)
        assert down.returncode == 0 and f"lab {lab_id}: down" in down.stdout, down.stderr
        nothing_left(lab_id, lab.run_dir)
    finally:
        teardown(lab_id)
