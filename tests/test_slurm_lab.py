"""`picluster provision` with [slurm] against the test lab: munge, slurmctld and slurmd for real.

The hosts have no init, so the daemons run as the step starts them there (test_provision_vm.py
covers systemd hosts).  slurmd reads cgroups at start even with the plugins chosen here, so the
lab's hosts are limited ones: those see this machine's cgroup hierarchies (read-only).
"""

import os
import re
import shutil
import stat
import sys
from types import SimpleNamespace

import pytest

from picluster.inventory import load_inventory
from picluster.lab import Lab
from picluster.lab.limits import Limits
from picluster.provision.result import Status
from picluster.provision.runner import provision
from picluster.provision.steps import Options
from picluster.provision.steps.slurm import key_path

from conftest import ansible_playbook, assert_converged, picluster

pytestmark = pytest.mark.lab

VENV = sys.prefix  # the hosts share /usr and this tree: no runtime to install
NAMES = ["node01", "node02", "node03"]


@pytest.fixture(scope="module")
def slurm_lab(lab_support):
    lab = Lab(nodes=3, limits=Limits(cpu=0.3, memory=2**30))
    lab.up()
    try:
        yield lab
    finally:
        lab.down()
        forget_key(lab)


def forget_key(lab):
    """The munge key provisioning made on this machine for the lab's cluster (named after the lab)."""
    shutil.rmtree(key_path(SimpleNamespace(name=f"lab-{lab.id}")).parent, ignore_errors=True)


def inventory(lab, tmp_path):
    path = lab.write_inventory(tmp_path / "picluster.toml")
    path.write_text(path.read_text() + '\n[slurm]\npartition = "pis"\n')
    return load_inventory(path)


def options(lab, **kwargs) -> Options:
    return Options(**{"known_hosts": lab.known_hosts_path, "venv": VENV, **kwargs})


def items(report, step):
    return {i.name: (i.status, i.detail) for i in report.step(step).items}


def sinfo(host) -> dict[str, str]:
    out = host.run(["sinfo", "--noheader", "--Node", "--format=%N %T"]).stdout
    return dict(line.split() for line in out.splitlines())


def test_slurm_comes_up_on_every_node_and_a_second_run_changes_nothing(slurm_lab, tmp_path):
    inv = inventory(slurm_lab, tmp_path)

    dry = provision(inv, options(slurm_lab, dry_run=True))
    assert not any(r.failed for r in dry), dry
    for host, report in zip(slurm_lab.hosts, dry):
        got = items(report, "slurm")
        assert got["munged"] == (Status.CHANGED, "would start munged")
        assert got["slurmd"] == (Status.CHANGED, "would start slurmd")
        assert ("slurmctld" in got) == (host.name == "node01")
        assert not host.path("/etc/slurm/slurm.conf").exists()
        assert host.run(["test", "-e", "/run/slurmd.pid"], check=False).returncode != 0

    first = provision(inv, options(slurm_lab))
    assert not any(r.failed for r in first), [r.first_failure() for r in first]
    queue = items(first[0], "queue")
    assert queue["controller"] == (Status.OK, "Slurmctld(primary) at node01 is UP")
    assert queue["nodes"] == (Status.OK, "3 idle in partition pis")
    assert queue["srun"] == (Status.OK, "hostname ran on all 3 nodes")
    assert all(items(r, "queue")["queue"][0] is Status.SKIPPED for r in first[1:])

    # What the running system says, asked from a node that is not the controller.
    node03 = slurm_lab.host("node03")
    assert sinfo(node03) == {name: "idle" for name in NAMES}
    ran = node03.run(["srun", "--nodes=3", "--time=1", "hostname"], timeout=120)
    assert sorted(ran.stdout.split()) == NAMES

    # One key, the coordinator's, 0400 on both sides; not the one this machine's package made.
    kept = key_path(inv)
    assert stat.S_IMODE(os.stat(kept).st_mode) == 0o400
    with open(kept) as f:
        key = f.read()
    with open("/etc/munge/munge.key", "rb") as f:
        assert f.read() != key.encode()
    conf = slurm_lab.host("node01").read_file("/etc/slurm/slurm.conf")
    for host in slurm_lab.hosts:
        assert host.run(["stat", "-c", "%U:%G %a", "/etc/munge/munge.key"]).stdout.strip() == "munge:munge 400"
        assert host.read_file("/etc/munge/munge.key") == key
        assert host.read_file("/etc/slurm/slurm.conf") == conf  # Slurm refuses nodes whose files differ
        assert host.read_file("/etc/slurm/cgroup.conf").endswith("CgroupPlugin=cgroup/v1\n")
        rules = host.run(["nft", "list", "table", "inet", "picluster"]).stdout
        # With a range in it the set is an interval set, and nft shows neighbours as ranges.
        assert f"ip saddr {slurm_lab.subnet} tcp dport {{ 111, 2049, 2222-2223, 6817-6818, 19100, 20048, 60001-60100 }} accept" in rules
    cpus = os.cpu_count()
    for name, host in zip(NAMES, slurm_lab.hosts):
        assert f"NodeName={name} NodeAddr={host.address} CPUs={cpus} RealMemory=" in conf
    assert conf.endswith("PartitionName=pis Nodes=ALL Default=YES MaxTime=INFINITE State=UP\n")
    assert f"SlurmctldHost=node01({slurm_lab.host('node01').address})" in conf

    second = provision(inv, options(slurm_lab))
    for report in second:
        assert report.changes == 0 and not report.failed, report
    assert items(second[0], "slurm")["slurmctld"] == (Status.OK, "running, configuration unchanged")
    assert items(second[0], "queue")["nodes"] == (Status.OK, "3 idle in partition pis")


def test_a_stopped_slurmd_is_seen_and_the_next_run_starts_it(slurm_lab, tmp_path):
    inv = inventory(slurm_lab, tmp_path)
    assert not any(r.failed for r in provision(inv, options(slurm_lab, only=("slurm", "queue"))))
    node02 = slurm_lab.host("node02")
    node02.run(["sh", "-c", "kill $(cat /run/slurmd.pid)"])
    controller = slurm_lab.host("node01")
    # slurmctld notices on its next ping of the node; ask it to look now instead of waiting minutes.
    controller.run(["scontrol", "update", "NodeName=node02", "State=DOWN", "Reason=test-stopped"])
    assert sinfo(controller)["node02"] == "down"
    assert controller.run(["srun", "--nodes=3", "--time=1", "--immediate=5", "true"], check=False, timeout=60).returncode != 0
    # provision's read-back says which node and why (after waiting its 60 s for it to register).
    seen = provision(inv, options(slurm_lab, only=("queue",)))
    status, detail = items(seen[0], "queue")["nodes"]
    # "down*" once slurmctld's own ping of the node has gone unanswered too.
    assert status is Status.FAILED and re.fullmatch(r"not idle after 60 s: node02 down\*? \(test-stopped\)", detail), detail

    again = provision(inv, options(slurm_lab, only=("slurm", "queue")))
    assert items(again[1], "slurm")["slurmd"] == (Status.CHANGED, "start slurmd")
    assert items(again[0], "slurm")["slurmd"] == (Status.OK, "running, configuration unchanged")
    assert items(again[0], "queue")["nodes"] == (Status.OK, "3 idle in partition pis")
    assert sinfo(controller) == {name: "idle" for name in NAMES}


def test_the_ansible_twin_brings_up_the_same_slurm(lab_support, tmp_path):
    lab = Lab(nodes=3, limits=Limits(cpu=0.3, memory=2**30))
    lab.up()
    try:
        path = lab.write_inventory(tmp_path / "picluster.toml")
        path.write_text(path.read_text() + '\n[slurm]\ncontroller = "node02"\n')
        ansible_inv = tmp_path / "inventory.yml"
        made = picluster("inventory", "--ansible", "-i", path, "--known-hosts", lab.known_hosts_path, "--out", ansible_inv)
        assert made.returncode == 0, made.stderr
        first = ansible_playbook(ansible_inv, "-e", f"venv={VENV}")
        assert first.returncode == 0, first.stdout[-4000:] + first.stderr[-2000:]
        assert sinfo(lab.host("node01")) == {name: "idle" for name in NAMES}
        second = ansible_playbook(ansible_inv, "-e", f"venv={VENV}")
        assert_converged(second, lab.hosts)
        # Same end state, byte for byte: the Fabric path finds nothing to change or restart.
        reports = provision(load_inventory(path), options(lab))
        for report in reports:
            assert not report.failed and report.changes == 0, [
                (s.step, i) for s in report.steps for i in s.items if i.status is not Status.OK
            ]
        assert items(reports[1], "queue")["srun"] == (Status.OK, "hostname ran on all 3 nodes")
        assert "SlurmctldHost=node02(" in lab.host("node03").read_file("/etc/slurm/slurm.conf")
    finally:
        lab.down()
        forget_key(lab)
