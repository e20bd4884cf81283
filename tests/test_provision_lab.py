"""`picluster provision` and the Ansible twin against the test lab: real SSH hosts on this machine.

The kernel here has no NFS: exports, NFS restarts, the slot table and mounts must say
`skipped (no NFS support in this kernel)`, which these tests assert exactly (test_provision_vm.py
runs them for real on VMs).  The first test provisions as a new user would, runtime included: the
hosts have no route to the internet, so picluster and TensorFlow come from wheels the coordinator
downloads once and pushes over SFTP.  Tests about other steps point `venv` at the coordinator's
own venv (the hosts share /usr and this tree) to skip installing TensorFlow again.
"""

import os
import re
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from picluster.lab import HostOptions, keys, snapshot
from picluster.model import nodeset
from picluster.model.inventory import load_inventory
from picluster.provision.result import Status
from picluster.provision.runner import provision, run_order
from picluster.provision.steps import NO_NFS, Options

from conftest import ansible_playbook, assert_converged, picluster

pytestmark = pytest.mark.lab
STEP_NAMES = run_order(None, slurm=False)  # these inventories have no [slurm]

ROOT = Path(__file__).resolve().parents[1]
VENV = sys.prefix  # the coordinator's venv: the hosts share /usr and this tree, so picluster and TF import
SUDO_MARK = "/home/pi/.sudo_as_admin_successful"  # sudo's own bookkeeping on Debian, on first use

CLIENT_FILES = {
    "/boot/firmware/config.txt", "/etc/hosts", "/etc/fstab", "/etc/modprobe.d", "/etc/modprobe.d/sunrpc.conf",
    "/etc/sysctl.d", "/etc/sysctl.d/60-picluster-sunrpc.conf", "/etc/nftables.conf", "/etc/nftables.d",
    "/etc/nftables.d/picluster.nft", "/etc/ssh/sshd_config.d/00-picluster.conf", SUDO_MARK,
}  # fmt: skip
MASTER_FILES = CLIENT_FILES | {"/etc/exports", "/etc/nfs.conf.d", "/etc/nfs.conf.d/picluster.conf", "/srv/picluster"}
# A host's /etc is an overlay on this machine's: a directory provisioning writes into is a change
# only where the machine lacks it (/etc/sysctl.d is in Debian's base; nfs-common ships /etc/nfs.conf.d).
def made(paths: set[str]) -> set[str]:
    return {p for p in paths if not (p in {"/etc/modprobe.d", "/etc/sysctl.d", "/etc/nftables.d", "/etc/nfs.conf.d"} and os.path.isdir(p))}


# What provisioning would write on a Pi, seen on the real machine: none of it may change.
MACHINE_PATHS = (
    "/etc/hosts", "/etc/hostname", "/etc/exports", "/etc/fstab", "/etc/default/nfs-kernel-server", "/etc/nfs.conf.d",
    "/etc/modprobe.d", "/etc/sysctl.d", "/etc/nftables.conf", "/etc/nftables.d", "/etc/ssh/sshd_config.d", "/boot", "/srv",
)  # fmt: skip


def inventory(lab, tmp_path: Path, name: str = "picluster.toml") -> Path:
    return lab.write_inventory(tmp_path / name)


def run_cli(lab, inv: Path, *args: str, timeout: float = 300, venv: str | None = VENV):
    """`picluster provision`; venv=None: the inventory's own (picluster-venv, made for real)."""
    return picluster(
        "provision", "-i", inv, "--known-hosts", lab.known_hosts_path, *(["--venv", venv] if venv else []), *args,
        env=dict(os.environ, COLUMNS="250"), timeout=timeout,
    )  # fmt: skip


def options(lab, **kwargs) -> Options:
    return Options(**{"known_hosts": lab.known_hosts_path, "venv": VENV, **kwargs})


NODE_VENV = "/home/pi/picluster-venv"  # the inventory's venv, made for real by the first test


def changed_paths(lab) -> dict[str, set[str]]:
    """Per host, what provisioning wrote outside the venv it made (thousands of files)."""
    return {
        name: {c.path for c in changes if not (c.path + "/").startswith(NODE_VENV + "/")}
        for name, changes in lab.changes().items()
    }


def machine_state() -> tuple:
    ruleset = subprocess.run(["nft", "list", "tables"], capture_output=True, text=True).stdout
    hostname = subprocess.run(["hostname"], capture_output=True, text=True).stdout
    return snapshot.take(MACHINE_PATHS), ruleset, hostname


def items(report, step):
    return {i.name: (i.status, i.detail) for i in report.step(step).items}


def test_provision_writes_every_file_once_and_a_second_run_changes_nothing(lab4, tmp_path):
    inv = inventory(lab4, tmp_path)
    # node02 comes as Raspberry Pi Imager leaves a card whose hostname was not set.
    lab4.host("node02").run(
        ["sh", "-c", "echo raspberrypi > /etc/hostname && sed -i 's/^127.0.1.1.*/127.0.1.1\traspberrypi/' /etc/hosts"
         " && hostname raspberrypi"]
    )  # fmt: skip
    baseline = {h.name: h.manifest() for h in lab4.hosts}
    machine_before = machine_state()

    # As a new user would: no --venv, so the runtime step makes picluster-venv for real.
    dry = run_cli(lab4, inv, "--dry-run", venv=None)
    assert dry.returncode == 0, dry.stdout + dry.stderr
    assert "node01: 13 change(s) planned" in dry.stdout
    assert "node02: 12 change(s) planned" in dry.stdout  # /etc/hostname and the live name too
    assert "  hostname live: would set the hostname raspberrypi -> node02" in dry.stdout
    assert (
        f"  runtime venv: would install picluster and TensorFlow for cp311-x86_64-glibc{os.confstr('CS_GNU_LIBC_VERSION').split()[1]}"
        f" into {NODE_VENV}, wheels via the node (no share mounted)"
    ) in dry.stdout
    assert "node01: would change (13)" in dry.stdout
    for host in lab4.hosts:
        assert {c.path for c in host.changes(since=baseline[host.name])} <= {SUDO_MARK}, host.name
    assert lab4.host("node02").run(["hostname"]).stdout.strip() == "raspberrypi"

    first = run_cli(lab4, inv, venv=None, timeout=3600)
    assert first.returncode == 0, first.stdout + first.stderr
    assert "node01: changed (13)" in first.stdout
    assert "node02: changed (12)" in first.stdout
    assert "node[03-04]: changed (10)" in first.stdout
    assert "nfs-client mount: skipped (no NFS support in this kernel): node[01-04]" in first.stdout
    assert "nfs-client slot_table: skipped (no NFS support in this kernel): node[01-04]" in first.stdout
    assert "nfs-server exportfs: skipped (no NFS support in this kernel): node01" in first.stdout
    assert "nfs-server service: skipped (no NFS support in this kernel): node01" in first.stdout

    changes = changed_paths(lab4)
    assert changes["node01"] == made(MASTER_FILES)
    # node02's /etc/hostname is back to what the lab seeded, so it is no change since the lab came up.
    assert changes["node02"] == changes["node03"] == changes["node04"] == made(CLIENT_FILES)
    # The hosts reach no package index: TensorFlow came from the coordinator's wheels (--no-index).
    tf = lab4.host("node03").run(["sudo", "-u", "pi", f"{NODE_VENV}/bin/python", "-c", "import tensorflow as tf; print(tf.__version__)"], timeout=300)
    assert tf.stdout.strip().startswith("2.21.")
    lab4.host("node03").run(["rm", "-rf", "/home/pi/.keras"])  # Keras's config from that import: the test's, not provisioning's

    subnet = str(lab4.subnet)
    master = lab4.host("node01")
    assert master.read_file("/etc/exports").splitlines()[-1] == f"/srv/picluster {subnet}(rw,sync,no_subtree_check,root_squash)"
    assert "\nthreads=8\n" in master.read_file("/etc/nfs.conf.d/picluster.conf")
    share = master.run(["stat", "-c", "%U:%G %a", "/srv/picluster"]).stdout.strip()
    assert share == "pi:pi 775"
    for host in lab4.hosts:
        hosts = host.read_file("/etc/hosts")
        assert f"127.0.1.1\t{host.name}\n" in hosts
        for other in lab4.hosts:
            assert hosts.count(f"{other.address}\t{other.name}\n") == 1
        assert host.read_file("/etc/hostname") == f"{host.name}\n"
        assert host.run(["hostname"]).stdout.strip() == host.name
        assert host.read_file("/boot/firmware/config.txt").endswith("[all]\ngpu_mem=16\n")
        assert host.read_file("/etc/fstab").splitlines()[-1] == f"{master.address}:/srv/picluster /mnt/picluster nfs defaults,_netdev,lookupcache=positive 0 0"
        assert "PasswordAuthentication no" in host.read_file("/etc/ssh/sshd_config.d/00-picluster.conf")
        assert "\noptions sunrpc tcp_slot_table_entries=128\n" in host.read_file("/etc/modprobe.d/sunrpc.conf")
        assert "\nsunrpc.tcp_slot_table_entries = 128\n" in host.read_file("/etc/sysctl.d/60-picluster-sunrpc.conf")
        live = host.run(["nft", "list", "table", "inet", "picluster"]).stdout
        assert f"ip saddr {subnet} tcp dport {{ 111, 2049, 2222-2223, 19100, 20048, 23300-23363 }} accept" in live
        assert f"ip saddr {lab4.gateway} tcp dport {{ 111, 2049, 2222-2223, 19100, 20048, 23300-23363 }} accept" in live
        assert "tcp dport { 111, 2049, 2222-2223, 19100, 20048, 23300-23363 } drop" in live

    # Again, as the card writes it: `picluster provision`, in the folder that holds picluster.toml.
    assert inv == tmp_path / "picluster.toml"
    second = picluster("provision", cwd=tmp_path, env=dict(os.environ, COLUMNS="250"), timeout=600)
    assert second.returncode == 0, second.stdout + second.stderr
    assert second.stderr.startswith("picluster: using the inventory ./picluster.toml in this folder")
    assert "node[01-04]: ok" in second.stdout
    assert "changed" not in second.stdout

    reports = provision(load_inventory(inv), options(lab4, venv="picluster-venv"))
    for report in reports:
        assert [s.step for s in report.steps] == list(STEP_NAMES)
        assert report.changes == 0 and not report.failed, report
        assert items(report, "nfs-client")["mount"] == (Status.SKIPPED, NO_NFS)
        assert items(report, "runtime")["venv"][0] is Status.OK
        assert items(report, "raspi")["gpu_mem"][0] is Status.OK
    server = items(reports[0], "nfs-server")
    assert all(server[name] == (Status.SKIPPED, NO_NFS) for name in ("exportfs", "enabled", "service", "threads", "mountd", "export"))
    assert changed_paths(lab4) == changes

    assert machine_state() == machine_before


def test_missing_package_fails_clearly_and_a_new_venv_is_only_planned(lab4, tmp_path):
    inv = load_inventory(inventory(lab4, tmp_path))
    before = {h.name: h.manifest() for h in lab4.hosts}
    reports = provision(inv, options(lab4, only=("packages",), extra_packages=("picluster-no-such-package",)))
    for report in reports:
        got = items(report, "packages")
        status, detail = got["picluster-no-such-package"]
        assert status is Status.FAILED and "Unable to locate package picluster-no-such-package" in detail
        assert "apt-get update:" in detail  # it was tried first, and could not reach a mirror
        assert got["nfs-common"] == (Status.OK, "installed")
        assert report.failed
    assert ("nfs-kernel-server" in items(reports[0], "packages")) and ("nfs-kernel-server" not in items(reports[1], "packages"))
    assert subprocess.run(["dpkg-query", "-W", "picluster-no-such-package"], capture_output=True).returncode != 0

    reports = provision(inv, options(lab4, only=("runtime",), dry_run=True, venv="new-venv"))
    for report in reports:
        status, detail = items(report, "runtime")["venv"]
        assert status is Status.CHANGED
        assert detail.startswith("would install picluster and TensorFlow for cp311-x86_64-glibc") and "into /home/pi/new-venv" in detail
    for host in lab4.hosts:
        assert {c.path for c in host.changes(since=before[host.name])} <= {SUDO_MARK}
        assert not host.path("/home/pi/new-venv").exists()


def test_unreachable_hosts_and_a_wrong_key(lab_factory, tmp_path):
    lab = lab_factory(3)
    inv = inventory(lab, tmp_path)

    lab.make_unreachable("node03")
    try:
        result = run_cli(lab, inv, "--timeout", "4", timeout=120)
    finally:
        lab.restore("node03")
    assert result.returncode == 1, result.stdout + result.stderr
    assert result.stderr.count("\n") == 1
    assert result.stderr.startswith("picluster: error: provisioning failed on node03 (node03: unreachable: ")
    assert "\nnode03: unreachable: no answer on port 22 within 4 s\n" in result.stdout
    assert "node01: changed (12)" in result.stdout and "node02: changed (9)" in result.stdout
    # Off a terminal, progress is a line per finished step and node set, before the table.
    progress = [line for line in result.stdout.split("picluster provision")[0].splitlines() if line.strip()]
    assert re.fullmatch(r"node\[01-02\]: facts: done in \d+ s", progress[0]), progress
    assert re.fullmatch(r"node03: facts: failed after [45] s", progress[1]), progress
    seen = []
    for line in progress[2:]:
        match = re.fullmatch(r"(node\S*): ([a-z-]+): (done in \d+ s|skipped|failed after \d+ s)", line)
        assert match and not match[3].startswith("failed"), line
        seen += [(match[2], node) for node in nodeset.expand(match[1])]
    assert sorted(seen) == sorted((step, node) for step in STEP_NAMES[1:] for node in ("node01", "node02"))
    assert [step for step, _ in seen] == sorted((step for step, _ in seen), key=STEP_NAMES.index)  # in run order

    # Mid-run: node02 goes away once the hostname step is done everywhere.
    cut = threading.Event()

    def on_step(step, reports):
        if step == "hostname":
            lab.make_unreachable("node02")
            cut.set()

    try:
        reports = provision(load_inventory(inv), options(lab, timeout=4, connect_timeout=4), on_step=on_step)
    finally:
        lab.restore("node02")
    assert cut.is_set()
    by_name = {r.name: r for r in reports}
    lost = by_name["node02"]
    assert lost.unreachable and lost.failed and lost.failure.startswith("unreachable: ")
    assert [s.step for s in lost.steps] == ["facts", "hostname", "raspi"]
    assert lost.step("raspi").status is Status.FAILED
    for name in ("node01", "node03"):
        assert [s.step for s in by_name[name].steps] == list(STEP_NAMES)
        assert not by_name[name].failed

    wrong = keys.make_keypair(tmp_path / "wrong_key", "not-the-lab")
    inv.write_text(inv.read_text().replace(str(lab.key_path), str(wrong.private_path)))
    result = run_cli(lab, inv, timeout=120)
    assert result.returncode == 1
    assert result.stderr == (
        f"picluster: error: provisioning failed on node[01-03] (node01: SSH key rejected for "
        f"pi@{lab.host('node01').address} (check cluster.ssh_key))\n"
    )


def test_sudo_password_and_a_host_that_is_not_a_pi(lab_factory, tmp_path):
    lab = lab_factory(
        2, host_options={"node01": HostOptions(pi_model=None), "node02": HostOptions(sudo_nopasswd=False)}
    )
    result = run_cli(lab, inventory(lab, tmp_path), timeout=120)
    assert result.returncode == 1
    assert result.stderr == (
        "picluster: error: provisioning failed on node02 (node02: sudo asks for a password; give pi NOPASSWD sudo)\n"
    )
    assert "raspi gpu_mem: skipped (not a Raspberry Pi): node01" in result.stdout
    assert "node01: changed (" in result.stdout
    assert "node02: failed (sudo asks for a password; give pi NOPASSWD sudo)" in result.stdout
    assert "gpu_mem=16" not in lab.host("node01").read_file("/boot/firmware/config.txt")
    assert {c.path for c in lab.host("node02").changes()} <= {SUDO_MARK}


def test_ansible_converges_to_the_same_state(lab_factory, tmp_path):
    lab = lab_factory(2)
    inv = inventory(lab, tmp_path)
    ansible_inv = tmp_path / "inventory.yml"
    made = picluster("inventory", "--ansible", "-i", inv, "--known-hosts", lab.known_hosts_path, "--out", ansible_inv)
    assert made.returncode == 0, made.stderr
    # A key this play cannot log in with is installed, but password login stays on: no lockout.
    other = keys.make_keypair(tmp_path / "other", "not-the-login-key").public_line
    wrong = ansible_playbook(ansible_inv, "-e", f"venv={VENV}", "-e", f"coordinator_public_key='{other}'")
    assert wrong.returncode == 0, wrong.stdout[-3000:] + wrong.stderr[-2000:]
    assert "password_login: skipped (a login with the installed key failed: the installed key is not the key of this play)" in wrong.stdout
    for host in lab.hosts:
        assert not host.path("/etc/ssh/sshd_config.d/00-picluster.conf").exists()
    first = ansible_playbook(ansible_inv, "-e", f"venv={VENV}")
    assert first.returncode == 0, first.stdout[-3000:] + first.stderr[-2000:]
    assert "skipped (no NFS support in this kernel)" in first.stdout
    second = ansible_playbook(ansible_inv, "-e", f"venv={VENV}")
    assert_converged(second, lab.hosts)
    for host in lab.hosts:
        assert "PasswordAuthentication no" in host.read_file("/etc/ssh/sshd_config.d/00-picluster.conf")
        # The other key went in, then the play's own key was tried and worked: both are there.
        assert other in host.read_file("/home/pi/.ssh/authorized_keys")
    # Same end state: the Fabric path finds nothing to change.
    reports = provision(load_inventory(inv), options(lab))
    for report in reports:
        assert not report.failed and report.changes == 0, [
            (s.step, i) for s in report.steps for i in s.items if i.status is not Status.OK
        ]


def test_drift_is_put_back_item_by_item(lab4, tmp_path):
    inv = load_inventory(inventory(lab4, tmp_path))
    settle = provision(inv, options(lab4, only=("nfs-server",)))
    assert not settle[0].failed
    master = lab4.host("node01")
    master.run(["sh", "-c", "chmod 777 /srv/picluster && sed -i 's/^threads=.*/threads=2/' /etc/nfs.conf.d/picluster.conf"])
    reports = provision(inv, options(lab4, only=("nfs-server",)))
    got = items(reports[0], "nfs-server")
    assert {name for name, (status, _) in got.items() if status is Status.CHANGED} == {"share_dir", "config"}
    assert got["config"][1] == "wrote /etc/nfs.conf.d/picluster.conf (nfs-utils reads /etc/nfs.conf.d)"
    assert got["exports"] == (Status.OK, "/etc/exports")
    assert got["exportfs"] == (Status.SKIPPED, NO_NFS) and got["service"] == (Status.SKIPPED, NO_NFS)
    assert master.run(["stat", "-c", "%a", "/srv/picluster"]).stdout.strip() == "775"
    assert "\nthreads=8\n" in master.read_file("/etc/nfs.conf.d/picluster.conf")
    for report in reports[1:]:
        assert items(report, "nfs-server") == {"server": (Status.SKIPPED, "not the NFS master, node01 is")}


def test_a_new_coordinator_key_is_appended_once(lab4, tmp_path, monkeypatch):
    from picluster.provision import runner

    other = keys.make_keypair(tmp_path / "coordinator2", "coordinator2")
    monkeypatch.setattr(runner, "public_key", lambda key: other.public_line)
    inv = load_inventory(inventory(lab4, tmp_path))
    first = provision(inv, options(lab4, only=("ssh",)))
    second = provision(inv, options(lab4, only=("ssh",)))
    for one, two in zip(first, second):
        assert items(one, "ssh")["authorized_key"] == (Status.CHANGED, "added the coordinator's key")
        assert items(two, "ssh")["authorized_key"] == (Status.OK, "~/.ssh/authorized_keys")
    for host in lab4.hosts:
        lines = host.read_file("/home/pi/.ssh/authorized_keys").splitlines()
        assert lines.count(other.public_line) == 1 and len(lines) == 2  # the lab's key stays
        assert host.run(["stat", "-c", "%U %a", "/home/pi/.ssh/authorized_keys"]).stdout.strip() == "pi 600"
    with lab4.connect("node01") as conn:  # the lab's key still logs in
        assert conn.run("hostname", hide=True).stdout.strip() == "node01"


def test_a_runtime_outside_the_home_is_made_by_root_owned_by_the_user_and_run_by_every_account(lab4, tmp_path):
    """With [users], cluster.venv is an absolute path (/opt/picluster-venv by default; /var here,
    which each test host has of its own): root makes the folder, the inventory's user installs
    into it, and another account runs it."""
    from picluster.provision.steps import Runtime

    shared = "/var/lib/picluster-venv"
    runtime = Runtime(requirements=("psutil>=5.9,<8",), imports=("psutil",))
    inv = load_inventory(inventory(lab4, tmp_path))
    first = provision(inv, options(lab4, only=("runtime",), venv=shared, runtime=runtime))
    assert not any(r.failed for r in first), [r.first_failure() for r in first]
    host = lab4.host("node02")
    assert host.run(["stat", "-c", "%U %a", shared]).stdout.strip() == "pi 755"
    ran = host.run(["runuser", "-u", "nobody", "--", f"{shared}/bin/python", "-c", "import psutil; print('ok')"])
    assert ran.stdout.strip() == "ok"
    again = provision(inv, options(lab4, only=("runtime",), venv=shared, runtime=runtime))
    assert all(items(r, "runtime")["venv"][0] is Status.OK for r in again)
    for h in lab4.hosts:
        h.run(["rm", "-rf", shared])
