"""Provisioning on VM test hosts: what namespace hosts cannot show, on real kernels and systemd.

Three VMs (node01 the NFS master, node02 and node03 clients) are provisioned by the Fabric path,
checked (nfsd threads and mountd's port as the kernel and rpcbind report them, the export, the
sunrpc slot table on every client, the share mounted everywhere with a file written on one node
and read on another, the firewall in the guests' kernels from cluster, coordinator and outside
addresses: tests/vm_checks.py), provisioned again (nothing changes, also through the CLI),
rebooted all at once and checked again.  (Ansible's twin on VMs: tests/test_provision_vm_ansible.py.)

The lab has no internet, so apt's cache update (needed on a freshly written card) is tested
against a small Debian repository the coordinator serves on the lab bridge, holding the one
package removed from a VM beforehand.  The runtime step installs psutil and prometheus-client
from wheels staged on the NFS share, not TensorFlow: under TCG a VM runs Python about 20x slower
than this machine, and TensorFlow's 260 MB wheel would take most of an hour on three VMs.  The
namespace-host tests install the real picluster + TensorFlow set the same way (pushed over SFTP,
as there is no share there).
"""


import base64
import threading
import time

import pytest

from picluster.lab import Lab
from picluster.model.inventory import load_inventory
from picluster.provision import wheelhouse
from picluster.provision.result import Status
from picluster.provision.runner import provision, run_order
from picluster.provision.steps import Options

from conftest import one_line, picluster
from vm_checks import REMOVED, RUNTIME, apt_repository, as_a_fresh_card, build_deb, check_nfs_and_firewall, check_runtime, index_repository, inventory, served, sh

# Long: about 23 minutes of TCG on 2 cores; CI runs tests/test_vm.py (the VM hosts themselves) and
# leaves this to a run on purpose (./dev test --long tests/test_provision_vm.py; docs/test-hosts.md).
pytestmark = [pytest.mark.long, pytest.mark.timeout(3600)]
STEP_NAMES = run_order(None, slurm=False)  # the inventory has no [slurm]

THREADS = 13  # not nfsd's default 8: reading 13 back proves the setting took


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


def test_provision_again_changes_nothing_and_restores_a_drifted_server(vm3, provisioned, tmp_path):
    inv, _ = provisioned
    again = provision(inv, options(vm3))
    for report in again:
        assert not report.failed and report.changes == 0, [(s.step, i) for s in report.steps for i in s.items if i.status is not Status.OK]
    # The same through `picluster provision` (all but the runtime step, whose small requirement set
    # only Options can name): exit 0, every node ok, nothing skipped.
    cli = picluster(
        "provision", "-i", inventory(vm3, tmp_path / "picluster.toml"), "--known-hosts", vm3.known_hosts_path,
        "--nfsd-threads", THREADS, "--only", ",".join(s for s in STEP_NAMES if s not in ("facts", "runtime")), timeout=1800,
    )  # fmt: skip
    assert cli.returncode == 0, cli.stdout[-3000:] + cli.stderr
    assert "node[01-03]: ok" in cli.stdout, cli.stdout
    skips = [line.strip() for line in cli.stdout.splitlines() if ": skipped (" in line]
    assert skips == ["nfs-server server: skipped (not the NFS master, node01 is): node[02-03]"], cli.stdout
    # Drift in the running kernel only (no file changed): the server is restarted to its configuration.
    sh(vm3.host("node01"), "rpc.nfsd 4")
    fixed = provision(inv, options(vm3, only=("nfs-server",)))
    server = items(fixed[0], "nfs-server")
    assert server["service"] == (Status.CHANGED, "restart the NFS server (4 nfsd threads running)")
    assert server["threads"] == (Status.OK, f"{THREADS} nfsd threads")


def boot_time(host) -> int:
    """When the guest's kernel booted (seconds since the epoch, from its clock: the host's)."""
    return int(next(line.split()[1] for line in sh(host, "cat /proc/stat").splitlines() if line.startswith("btime ")))


def test_everything_holds_after_every_vm_is_rebooted_one_at_a_time(vm3, provisioned, tmp_path):
    inv, _ = provisioned
    path = inventory(vm3, tmp_path / "picluster.toml")
    before = {h.name: h.boot_id() for h in vm3.hosts}
    result = picluster("nodes", "reboot", "all", "-i", path, "--yes", timeout=2400)
    assert result.returncode == 0, result.stdout + result.stderr
    lines = result.stdout.splitlines()
    assert lines[:4] == ["Reboot: node[01-03] in this order (1 at a time, each checked back before the next):",
                         "  1. node02  worker", "  2. node03  worker", "  3. node01  NFS master"], result.stdout
    # No task was started on these nodes (`cluster up` needs TensorFlow, which they lack): nothing to bring
    # back but the NFS share, mounted on every node before, which each reboot waited for again.
    assert [line.split(":")[0].strip() for line in lines[4:7]] == ["node02", "node03", "node01"]
    assert all("rebooted, back in" in line and line.endswith("; share)") for line in lines[4:7]), result.stdout
    assert {h.name: h.boot_id() for h in vm3.hosts}.items().isdisjoint(before.items())
    booted = {h.name: boot_time(h) for h in vm3.hosts}
    assert booted["node02"] < booted["node03"] < booted["node01"], booted  # one after the other, the master last
    for host in vm3.hosts:
        # The runtime step's unit ran at boot and found no start script (no `cluster up`): nothing started.
        shown = dict(line.split("=", 1) for line in sh(host, "systemctl show -p ActiveState -p ConditionResult picluster-node").splitlines())
        assert shown == {"ConditionResult": "no", "ActiveState": "inactive"}, (host.name, shown)
    check_nfs_and_firewall(vm3, inv, THREADS)
    check_runtime(vm3)
    reports = provision(inv, options(vm3))
    assert [r.changes for r in reports] == [0, 0, 0]


def test_upgrade_stops_at_the_first_node_that_cannot_and_reboots_where_a_package_asks(vm3, provisioned, tmp_path):
    path = inventory(vm3, tmp_path / "picluster.toml")
    # node02 has Debian's own sources, which the lab cannot reach: the first node of the order fails.
    failed = picluster("nodes", "upgrade", "all", "-i", path, timeout=1800)
    one_line(failed, 1, "node02: apt-get update failed (", "nothing was upgraded there; not upgraded: node[01,03]")
    assert "node03:" not in failed.stdout and "node01:" not in failed.stdout

    # node03 reads the coordinator's repository: probe 1 installed, probe 2 served, whose
    # postinst asks for a reboot as a kernel's does.
    repo = tmp_path / "repo"
    repo.mkdir()
    node03 = vm3.host("node03")
    old = build_deb(tmp_path, "picluster-probe", "1")
    build_deb(repo, "picluster-probe", "2", postinst="touch /var/run/reboot-required")
    node03.run(["sh", "-c", "base64 -d > /tmp/probe.deb && dpkg -i /tmp/probe.deb && rm -f /tmp/probe.deb /var/run/reboot-required"],
               input=base64.b64encode(old.read_bytes()).decode())
    boot = node03.boot_id()
    with served(index_repository(repo), vm3.gateway) as url:
        sh(node03, f"echo 'deb [trusted=yes] {url} ./' > /etc/apt/sources.list.d/lab.list")
        done = picluster("nodes", "upgrade", "node03", "-i", path, timeout=1800)
    assert done.returncode == 0, done.stdout + done.stderr
    line = next(line for line in done.stdout.splitlines() if line.strip().startswith("node03:"))
    assert "1 upgraded, 0 newly installed; reboot required: rebooted, back in" in line, done.stdout
    assert node03.boot_id() != boot
    assert sh(node03, "cat /usr/share/doc/picluster-probe/version") == "2"
    assert sh(node03, "test -e /var/run/reboot-required && echo yes || echo no") == "no"  # /run is new at every boot


def test_shutdown_takes_the_workers_first_and_the_nfs_master_last(vm3, provisioned, tmp_path):
    """The last test of the module: the VMs are off after it."""
    path = inventory(vm3, tmp_path / "picluster.toml")
    gone: dict[str, float] = {}
    stop = threading.Event()

    def watch():  # when each VM's qemu exits: a guest that powers off ends it
        while not stop.is_set() and len(gone) < 3:
            for host in vm3.hosts:
                if host.name not in gone and not host.alive():
                    gone[host.name] = time.monotonic()
            time.sleep(0.2)

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    try:
        result = picluster("nodes", "shutdown", "all", "-i", path, "--yes", timeout=1200)
    finally:
        time.sleep(5)
        stop.set()
        watcher.join()
    assert result.returncode == 0, result.stdout + result.stderr
    lines = result.stdout.splitlines()
    assert lines[1:3] == ["  1. node[02-03]  worker", "  2. node01  NFS master"], result.stdout
    assert lines[3].startswith("  node[02-03]: off after ") and lines[4].startswith("  node01: off after "), result.stdout
    assert sorted(gone) == ["node01", "node02", "node03"], gone
    assert max(gone["node02"], gone["node03"]) < gone["node01"], gone
