"""Provisioning on VM test hosts: what namespace hosts cannot show, on real kernels and systemd.

Three VMs (node01 the NFS master, node02 and node03 clients) are provisioned by the Fabric path,
checked (nfsd threads and mountd's port as the kernel and rpcbind report them, the export, the
sunrpc slot table on every client, the share mounted everywhere with a file written on one node
and read on another, the firewall in the guests' kernels from cluster, coordinator and outside
addresses), provisioned again (nothing changes), rebooted all at once and checked again.  Three
fresh VMs then converge with Ansible twice (changed=0 the second time) and pass the same checks.

The lab has no internet, so apt's cache update (needed on a freshly written card) is tested
against a small Debian repository the coordinator serves on the lab bridge, holding the one
package removed from a VM beforehand.  The runtime step installs psutil and prometheus-client
from wheels staged on the NFS share, not TensorFlow: under TCG a VM runs Python about 20x slower
than this machine, and TensorFlow's 260 MB wheel would take most of an hour on three VMs.  The
namespace-host tests install the real picluster + TensorFlow set the same way (pushed over SFTP,
as there is no share there).
"""

import contextlib
import functools
import hashlib
import os
import secrets
import socket
import subprocess
import sys
import threading
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from picluster.inventory import Inventory, load_inventory
from picluster.lab import Lab
from picluster.provision import wheelhouse
from picluster.provision.result import Status
from picluster.provision.runner import STEP_NAMES, provision
from picluster.provision.steps import Options, Runtime

from conftest import picluster

pytestmark = [pytest.mark.slow, pytest.mark.timeout(3600)]

ROOT = Path(__file__).resolve().parents[1]
RUNTIME = Runtime(requirements=("psutil>=5.9,<8", "prometheus-client>=0.20,<1"), imports=("psutil", "prometheus_client"))
THREADS = 13  # not nfsd's default 8: reading 13 back proves the setting took
REMOVED = "python3-venv"  # taken off node03 with apt's lists: a freshly written card's state


def inventory(lab: Lab, path: Path) -> Path:
    """The lab's inventory without `subnet`: the cluster's range is then the nodes' own (.8/29),
    and the coordinator (the bridge, .1) lies outside it, as on a LAN."""
    path.write_text("".join(line + "\n" for line in lab.inventory_text().splitlines() if not line.startswith("subnet =")))
    return path


def sh(host, command: str, timeout: float = 300) -> str:
    return host.run(["sh", "-c", command], timeout=timeout).stdout.strip()


# -- a Debian repository on the bridge, for apt's cache update ---------------------------------


def apt_repository(directory: Path, packages: list[str]) -> Path:
    """A flat repository (Packages, Release) of these packages, downloaded from Debian by apt."""
    directory.mkdir(parents=True, exist_ok=True)
    subprocess.run(["apt-get", "download", "-q", *packages], cwd=directory, check=True, capture_output=True, timeout=300)
    stanzas = []
    for deb in sorted(directory.glob("*.deb")):
        control = subprocess.run(["dpkg-deb", "-f", str(deb)], capture_output=True, text=True, check=True).stdout
        data = deb.read_bytes()
        extra = f"Filename: ./{deb.name}\nSize: {len(data)}\nSHA256: {hashlib.sha256(data).hexdigest()}\n"
        stanzas.append(control.rstrip("\n") + "\n" + extra)
    packages_text = "\n".join(stanzas)
    (directory / "Packages").write_text(packages_text)
    digest = hashlib.sha256(packages_text.encode()).hexdigest()
    (directory / "Release").write_text(f"Origin: picluster-lab\nSHA256:\n {digest} {len(packages_text.encode())} Packages\n")
    return directory


@contextlib.contextmanager
def served(directory: Path, address: str):
    """An HTTP server on `address` (the lab's bridge) for `directory`; yields its URL."""
    handler = functools.partial(SimpleHTTPRequestHandler, directory=str(directory))
    handler.log_message = lambda *args: None  # type: ignore[method-assign]
    server = ThreadingHTTPServer((address, 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://{address}:{server.server_address[1]}/"
    finally:
        server.shutdown()
        server.server_close()


def as_a_fresh_card(host, url: str) -> None:
    """No apt lists, one package missing, a mirror it can reach: the repository above."""
    sh(host, f"apt-get remove -y -q {REMOVED} >/dev/null && rm -rf /var/lib/apt/lists/* && "
             "rm -f /etc/apt/sources.list /etc/apt/sources.list.d/* && "
             f"echo 'deb [trusted=yes] {url} ./' > /etc/apt/sources.list.d/lab.list", timeout=600)  # fmt: skip
    assert sh(host, f"dpkg-query -W -f='${{db:Status-Status}}' {REMOVED} 2>/dev/null || true") != "installed"


# -- what must hold on the VMs -------------------------------------------------------------------


def reach(source: str, address: str, port: int, timeout: float = 6.0) -> str:
    """"open", "refused" (nothing listens: the firewall let it through) or "dropped"."""
    with socket.socket() as sock:
        sock.bind((source, 0))
        sock.settimeout(timeout)
        try:
            sock.connect((address, port))
            return "open"
        except ConnectionRefusedError:
            return "refused"
        except TimeoutError:
            return "dropped"


def reach_from_vm(host, address: str, port: int) -> str:
    probe = (
        "import socket, sys\n"
        "s = socket.socket(); s.settimeout(6)\n"
        "try:\n    s.connect((sys.argv[1], int(sys.argv[2]))); print('open')\n"
        "except ConnectionRefusedError:\n    print('refused')\n"
        "except OSError:\n    print('dropped')\n"
    )
    return host.run(["python3", "-c", probe, address, str(port)], timeout=120).stdout.strip()


@contextlib.contextmanager
def outside_address(lab: Lab):
    """A third address on the bridge: neither the coordinator's (.1) nor in the cluster's range."""
    address = str(lab.subnet.network_address + 250)
    subprocess.run(["ip", "addr", "add", f"{address}/{lab.subnet.prefixlen}", "dev", lab.bridge], check=True)
    try:
        yield address
    finally:
        subprocess.run(["ip", "addr", "del", f"{address}/{lab.subnet.prefixlen}", "dev", lab.bridge], check=False)


def check_firewall(lab: Lab, inv: Inventory) -> None:
    master, client = lab.host(inv.nfs_master), lab.host("node02")
    coordinator = lab.gateway
    assert coordinator not in [str(a) for a in inv.cluster_subnet]
    closed = (inv.tf_port, inv.tf_port + 1, inv.agent_port)  # admitted, but nothing listens: refused
    for port in closed:
        assert reach(coordinator, master.address, port) == "refused", port
        assert reach_from_vm(client, master.address, port) == "refused", port
    for port in (2049, 111, 20048):
        assert reach(coordinator, master.address, port) == "open", port
    with outside_address(lab) as outside:
        assert reach(outside, master.address, 22) == "open"  # routed, and SSH is left alone
        for port in (*closed, 2049, 111, 20048):
            assert reach(outside, master.address, port) == "dropped", port
        assert reach(outside, client.address, inv.tf_port) == "dropped"


def check_nfs_and_firewall(lab: Lab, inv: Inventory, threads: int) -> None:
    master = lab.host(inv.nfs_master)
    assert sh(master, "cat /proc/fs/nfsd/threads") == str(threads)
    assert sh(master, "nfsconf --get nfsd threads") == str(threads)
    mountd = sh(master, "rpcinfo -p 127.0.0.1 | awk '$5 == \"mountd\" {print $3 \"/\" $4}' | sort -u").split()
    assert mountd == ["tcp/20048", "udp/20048"]
    assert sh(master, "systemctl is-enabled nfs-server; systemctl is-active nfs-server").split() == ["enabled", "active"]
    exported = sh(master, "exportfs -v").split()
    assert str(inv.share_dir) in exported and any(w.startswith(f"{inv.cluster_subnet}(rw,") for w in exported), exported
    source = f"{master.address}:{inv.share_dir}"
    for host in lab.hosts:
        assert sh(host, "cat /proc/sys/sunrpc/tcp_slot_table_entries") == "128", host.name
        assert sh(host, "cat /proc/sys/sunrpc/tcp_max_slot_table_entries") == "65536", host.name  # never lowered
        assert sh(host, f"findmnt -n -o SOURCE,FSTYPE --mountpoint {inv.data_dir}").split() == [source, "nfs4"], host.name
        assert sh(host, "nft list table inet picluster | grep -c ' accept$'") == "5"  # lo, subnet x2, coordinator x2
    token = secrets.token_hex(8)
    with lab.connect("node02") as conn:  # as the cluster user, through its mount
        conn.run(f"echo {token} > {inv.data_dir}/written-on-node02", hide=True, timeout=120)
    assert sh(lab.host("node03"), f"cat {inv.data_dir}/written-on-node02") == token
    assert master.read_file(f"{inv.share_dir}/written-on-node02").strip() == token
    assert sh(master, f"stat -c '%U %a' {inv.share_dir}") == f"{inv.user} 775"
    check_firewall(lab, inv)


def check_runtime(lab: Lab, venv: str = "picluster-venv") -> None:
    for host in lab.hosts:
        versions = sh(host, f"sudo -u pi /home/pi/{venv}/bin/python -c 'import psutil, prometheus_client as p; print(psutil.__version__)'")
        assert versions, host.name


# -- Fabric ---------------------------------------------------------------------------------------


def options(lab: Lab, **kwargs) -> Options:
    return Options(**{"known_hosts": lab.known_hosts_path, "runtime": RUNTIME, "nfsd_threads": THREADS, **kwargs})


def items(report, step):
    return {i.name: (i.status, i.detail) for i in report.step(step).items}


@pytest.fixture(scope="module")
def provisioned(vm3, tmp_path_factory):
    """vm3 after a first `provision`, node03 having started as a fresh card; the first run's reports."""
    tmp = tmp_path_factory.mktemp("provision-vm")
    inv = load_inventory(inventory(vm3, tmp / "picluster.toml"))
    with served(apt_repository(tmp / "repo", [REMOVED]), vm3.gateway) as url:
        as_a_fresh_card(vm3.host("node03"), url)
        reports = provision(inv, options(vm3))
    return inv, reports


def test_provision_runs_every_step_for_real_and_it_holds(vm3, provisioned):
    inv, reports = provisioned
    failures = {r.name: r.first_failure() for r in reports if r.failed}
    assert failures == {}
    for report in reports:
        assert [s.step for s in report.steps] == list(STEP_NAMES)
        skipped = {(s.step, i.name) for s in report.steps for i in s.items if i.status is Status.SKIPPED}
        # Nothing is skipped for want of NFS or systemd: only the server step on the clients.
        assert skipped == (set() if report.name == "node01" else {("nfs-server", "server")}), report.name
        assert "systemd-networkd-wait-online.service" in items(report, "raspi")["wait_network"][1]  # not NetworkManager's
        status, detail = items(report, "runtime")["venv"]
        assert status is Status.CHANGED and "--no-index, wheels via the share (/mnt/picluster)" in detail, detail
    server = items(reports[0], "nfs-server")
    assert server["config"][0] is Status.CHANGED and "/etc/nfs.conf.d/picluster.conf" in server["config"][1]
    assert server["threads"] == (Status.OK, f"{THREADS} nfsd threads") and server["mountd"] == (Status.OK, "mountd on port 20048")
    for report in reports:
        assert items(report, "nfs-client")["slot_table"] == (Status.CHANGED, "2 -> 128 slots now")
    # node03 came without python3-venv and without apt lists: updated from the bridge's mirror, then installed.
    assert items(reports[2], "packages")[REMOVED] == (Status.CHANGED, "installed now")
    assert items(reports[1], "packages")[REMOVED] == (Status.OK, "installed")
    # The wheels went once to the share, read by every node from its mount.
    key = wheelhouse.key_of(wheelhouse.Platform.of("x86_64", "3.11.2", "2.36"), list(RUNTIME.requirements))
    staged = sh(vm3.host("node01"), "ls /srv/picluster/.picluster/wheels").split()
    assert staged == [key]
    check_runtime(vm3)
    check_nfs_and_firewall(vm3, inv, THREADS)
    ids = {sh(h, "cat /etc/machine-id") for h in vm3.hosts}
    assert len(ids) == 3


def test_provision_again_changes_nothing_and_restores_a_drifted_server(vm3, provisioned):
    inv, _ = provisioned
    again = provision(inv, options(vm3))
    for report in again:
        assert not report.failed and report.changes == 0, [(s.step, i) for s in report.steps for i in s.items if i.status is not Status.OK]
    # Drift in the running kernel only (no file changed): the server is restarted to its configuration.
    sh(vm3.host("node01"), "rpc.nfsd 4")
    fixed = provision(inv, options(vm3, only=("nfs-server",)))
    server = items(fixed[0], "nfs-server")
    assert server["service"] == (Status.CHANGED, "restart the NFS server (4 nfsd threads running)")
    assert server["threads"] == (Status.OK, f"{THREADS} nfsd threads")


def test_everything_holds_after_every_vm_reboots(vm3, provisioned):
    inv, _ = provisioned
    seconds = vm3.reboot()
    assert sorted(seconds) == ["node01", "node02", "node03"]
    check_nfs_and_firewall(vm3, inv, THREADS)
    check_runtime(vm3)
    reports = provision(inv, options(vm3))
    assert [r.changes for r in reports] == [0, 0, 0]


# -- Ansible ----------------------------------------------------------------------------------------


def test_ansible_converges_fresh_vms_to_the_same_state(lab_factory, vm_image, tmp_path):
    lab = lab_factory(3, vm=True, say=print)
    inv_path = inventory(lab, tmp_path / "picluster.toml")
    inv = load_inventory(inv_path)
    master = lab.host("node01")
    sh(master, "systemctl disable --now nfs-server")  # the role must enable and start it
    ansible_inv = tmp_path / "inventory.yml"
    made = picluster("inventory", "--ansible", "-i", inv_path, "--known-hosts", lab.known_hosts_path, "--out", ansible_inv)
    assert made.returncode == 0, made.stderr
    wheels = tmp_path / "wheels"
    made = picluster("wheelhouse", "--out", wheels, "--arch", "x86_64", "--python", "3.11.2", "--glibc", "2.36", *RUNTIME.requirements)
    assert made.returncode == 0 and "wheels for cp311-x86_64-glibc2.36" in made.stdout, made.stderr
    extra = {"wheelhouse": str(wheels), "runtime_install": list(RUNTIME.requirements), "runtime_imports": list(RUNTIME.imports)}
    playbook = [str(Path(sys.executable).with_name("ansible-playbook")), "-i", str(ansible_inv), "site.yml", "-e", _json(extra)]
    env = dict(os.environ, ANSIBLE_NOCOLOR="1", ANSIBLE_FORCE_COLOR="0")
    with served(apt_repository(tmp_path / "repo", [REMOVED]), lab.gateway) as url:
        as_a_fresh_card(lab.host("node03"), url)
        first = subprocess.run(playbook, cwd=ROOT / "ansible", capture_output=True, text=True, timeout=3600, env=env)
        assert first.returncode == 0, first.stdout[-4000:] + first.stderr[-2000:]
        second = subprocess.run(playbook, cwd=ROOT / "ansible", capture_output=True, text=True, timeout=3600, env=env)
    assert second.returncode == 0, second.stdout[-4000:]
    recap = second.stdout.split("PLAY RECAP")[-1]
    for host in lab.hosts:
        line = next(line for line in recap.splitlines() if line.startswith(host.name))
        assert "changed=0" in line and "failed=0" in line, line
    assert "skipped (no NFS support" not in first.stdout
    assert sh(lab.host("node03"), f"dpkg-query -W -f='${{db:Status-Status}}' {REMOVED}") == "installed"
    for host in lab.hosts:
        assert sh(host, "systemctl is-enabled systemd-networkd-wait-online.service") == "enabled"
        assert "PasswordAuthentication no" in host.read_file("/etc/ssh/sshd_config.d/00-picluster.conf")
    check_runtime(lab)
    check_nfs_and_firewall(lab, inv, 8)  # the inventory's max(8, 3 nodes)


def _json(value) -> str:
    import json

    return json.dumps(value)
