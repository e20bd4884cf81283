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


import pytest

from picluster.inventory import load_inventory
from picluster.lab import Lab
from picluster.provision import wheelhouse
from picluster.provision.result import Status
from picluster.provision.runner import provision, run_order
from picluster.provision.steps import Options

from conftest import picluster
from vm_checks import REMOVED, RUNTIME, apt_repository, as_a_fresh_card, check_nfs_and_firewall, check_runtime, inventory, served, sh

pytestmark = [pytest.mark.vm, pytest.mark.timeout(3600)]
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


def test_everything_holds_after_every_vm_reboots(vm3, provisioned):
    inv, _ = provisioned
    seconds = vm3.reboot()
    assert sorted(seconds) == ["node01", "node02", "node03"]
    check_nfs_and_firewall(vm3, inv, THREADS)
    check_runtime(vm3)
    reports = provision(inv, options(vm3))
    assert [r.changes for r in reports] == [0, 0, 0]
