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

        # Debian 12's own kernel and systemd: cgroup v2 with its controllers, so jobs are confined.
        assert items(first[0], "slurm")["containment"] == (
            Status.OK, "jobs confined to their cores and memory (proctrack/cgroup, task/cgroup; cgroup v2)")
        # The queue step reads it back: a step over its memory stopped, a step's detached child gone.
        read_back = items(first[0], "queue")
        assert read_back["memory"] == (Status.OK, "a step over its --mem (32M) was stopped by Slurm (oom-kill event)")
        assert read_back["processes"][0] is Status.OK and "detached child (setsid) ended with the step" in read_back["processes"][1]
        node02 = vm3.host("node02")
        # A job over its memory is stopped by Slurm and recorded so, not left to the kernel's OOM killer.
        hog = submit_wrap(node02, "--mem=64M", "python3 -c 'b = bytearray(512 * 2**20); import time; time.sleep(60)'")
        assert ended(node02, hog, 120) == "OUT_OF_MEMORY"
        # A job whose child leaves its process tree (setsid, reparented to init) leaves nothing after scancel.
        held = submit_wrap(node02, "--nodelist=node03", "setsid -f sleep 4321; sleep 600")
        deadline = time.monotonic() + 120
        # Anchored: `sudo -n -- pgrep -f ...`, which runs it, holds the words too.
        while vm3.host("node03").run(["pgrep", "-f", "^sleep 4321$"], check=False).returncode != 0:
            assert time.monotonic() < deadline, "the job's detached child never started"
            time.sleep(2)
        node02.run(["scancel", held])
        assert ended(node02, held, 60) == "CANCELLED"
        deadline = time.monotonic() + 30
        while vm3.host("node03").run(["pgrep", "-f", "^sleep 4321$"], check=False).returncode == 0:
            assert time.monotonic() < deadline, "the detached child outlived scancel"
            time.sleep(1)

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


def submit_wrap(host, *args: str) -> str:
    """sbatch --wrap on ``host``: the job's id."""
    command = args[-1]
    done = host.run(["sbatch", "--parsable", "--time=5", *args[:-1], "--wrap", command], timeout=60)
    return done.stdout.strip().split(";")[0]


def ended(host, job: str, seconds: float) -> str:
    """The job's state once it has ended (scontrol keeps it for MinJobAge)."""
    deadline = time.monotonic() + seconds
    while True:
        shown = host.run(["scontrol", "-o", "show", "job", job], check=False).stdout
        state = next((w.split("=", 1)[1] for w in shown.split() if w.startswith("JobState=")), "")
        if state and state not in ("PENDING", "RUNNING", "CONFIGURING", "COMPLETING"):
            return state
        assert time.monotonic() < deadline, f"job {job} still {state or 'unknown'} after {seconds:.0f} s"
        time.sleep(2)
