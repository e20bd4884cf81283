"""Slurm on VM test hosts: Debian's own systemd units for munge, slurmctld and slurmd, enabled
at boot, and a cluster that comes back as a queue after every VM reboots.

Namespace hosts (test_slurm_lab.py) have no init, so there the daemons are started directly;
here `provision` goes through systemd, as on a Pi.  The image carries the Slurm packages, as it
carries every package provisioning installs (the lab has no internet).
"""

import time

import pytest
from test_slurm_lab import forget_key, items, sinfo

from picluster.inventory import load_inventory
from picluster.provision.result import Status
from picluster.provision.runner import provision
from picluster.provision.steps import Options

from vm_checks import inventory

# Long: about 8 minutes of TCG; the queue itself is tested on namespace hosts in every run.
pytestmark = [pytest.mark.long, pytest.mark.timeout(1800)]
NAMES = ["node01", "node02", "node03"]
UNITS = {"node01": ["munge", "slurmctld", "slurmd"], "node02": ["munge", "slurmd"], "node03": ["munge", "slurmd"]}


def idle_within(host, seconds: float) -> dict[str, str]:
    deadline = time.monotonic() + seconds
    while (states := sinfo(host)) != {name: "idle" for name in NAMES} and time.monotonic() < deadline:
        time.sleep(2)
    return states


def test_slurm_runs_under_systemd_and_comes_back_after_every_vm_reboots(vm3, tmp_path):
    path = inventory(vm3, tmp_path / "picluster.toml")
    path.write_text(path.read_text() + "\n[slurm]\n")
    inv = load_inventory(path)
    opts = Options(known_hosts=vm3.known_hosts_path, only=("slurm", "queue"))
    try:
        first = provision(inv, opts)
        assert not any(r.failed for r in first), [r.first_failure() for r in first]
        assert items(first[0], "queue")["srun"] == (Status.OK, "hostname ran on all 3 nodes")
        assert items(first[0], "slurm")["version"][1].startswith("slurm 22.05.")
        for host in vm3.hosts:
            for unit in UNITS[host.name]:  # Debian's packages enable their units; the step checks
                assert items(first[NAMES.index(host.name)], "slurm")[f"{unit.replace('munge', 'munged')}_at_boot"] == (
                    Status.OK, f"{unit}.service enabled")
                state = host.run(["systemctl", "is-enabled", unit]).stdout.strip(), host.run(["systemctl", "is-active", unit]).stdout.strip()
                assert state == ("enabled", "active"), (host.name, unit, state)
        again = provision(inv, opts)
        assert [r.changes for r in again] == [0, 0, 0]

        # Every VM reboots at once: the units start the daemons, and slurmctld takes each node back
        # as it registers (ReturnToService=2), with no provisioning in between.
        vm3.reboot()
        assert idle_within(vm3.host("node01"), 120) == {name: "idle" for name in NAMES}
        ran = vm3.host("node02").run(["srun", "--nodes=3", "--time=1", "hostname"], timeout=180)
        assert sorted(ran.stdout.split()) == NAMES
        after = provision(inv, opts)
        assert [r.changes for r in after] == [0, 0, 0]
    finally:
        forget_key(vm3)
