"""Slurm on VM test hosts: Debian's own systemd units for munge, slurmctld and slurmd, enabled
at boot, and a cluster that comes back as a queue after every VM reboots.

Namespace hosts (test_slurm_lab.py) have no init, so there the daemons are started directly;
here `provision` goes through systemd, as on a Pi.  The image carries the Slurm packages, as it
carries every package provisioning installs (the lab has no internet).
"""

import os
import shlex
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

import pytest
from test_slurm_lab import forget_key, items, job_state, sinfo

from picluster.model.inventory import load_inventory
from picluster.provision.result import Status
from picluster.provision.runner import provision
from picluster.provision.steps import Options

from conftest import ROOT, one_line, picluster
from vm_checks import inventory

# Long: about 8 minutes of TCG; the queue itself is tested on namespace hosts in every run.
pytestmark = [pytest.mark.long, pytest.mark.timeout(1800)]
NAMES = ["node01", "node02", "node03"]
UNITS = {"node01": ["munge", "slurmctld", "slurmd"], "node02": ["munge", "slurmd"], "node03": ["munge", "slurmd"]}


def slurm_inventory(vm3, tmp_path, extra: str = ""):
    """The VMs' inventory with [slurm] (and ``extra`` lines in it), and provisioning's options for
    the slurm and queue steps."""
    path = inventory(vm3, tmp_path / "picluster.toml")
    path.write_text(path.read_text() + "\n[slurm]\n" + extra)
    return path, load_inventory(path), Options(known_hosts=vm3.known_hosts_path, only=("slurm", "queue"))


def idle_within(host, seconds: float) -> dict[str, str]:
    deadline = time.monotonic() + seconds
    while (states := sinfo(host)) != {name: "idle" for name in NAMES} and time.monotonic() < deadline:
        time.sleep(2)
    return states


def test_slurm_runs_under_systemd_and_comes_back_after_every_vm_reboots(vm3, tmp_path):
    _, inv, opts = slurm_inventory(vm3, tmp_path)
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


def test_a_rolling_reboot_waits_for_each_workers_job_requeues_on_request_and_an_upgrade_waits_for_apts_lock(vm3, tmp_path):
    """`picluster nodes reboot|upgrade` as typed, around users' jobs: a node drained with a reason,
    its job ended (not NODE_FAIL), the node resumed once slurmd is back from the new boot."""
    from picluster.lab.keys import make_keypair

    alice = make_keypair(tmp_path / "alice", "alice@laptop")
    path, inv, opts = slurm_inventory(vm3, tmp_path, f'accounting = true\n\n[users]\nalice = "{alice.public_line}"\n')
    opts = replace(opts, only=("users", "slurm", "queue"))
    try:
        first = provision(inv, opts)
        assert not any(r.failed for r in first), [r.first_failure() for r in first]
        # Accounting under systemd: Debian's units for MariaDB and slurmdbd, enabled at boot.
        assert items(first[0], "slurm")["mariadbd_at_boot"][1] == "mariadb.service enabled" or \
            items(first[0], "slurm")["mariadbd_at_boot"][0] is Status.CHANGED
        assert items(first[0], "queue")["accounting"][0] is Status.OK, items(first[0], "queue")
        node01 = vm3.host("node01")
        for unit in ("mariadb", "slurmdbd"):
            assert node01.run(["systemctl", "is-active", unit]).stdout.strip() == "active"
        memory = {u: int(node01.run(["systemctl", "show", "-p", "MemoryCurrent", "--value", u]).stdout) // 2**20
                  for u in ("mariadb", "slurmdbd", "slurmctld")}
        print(f"controller memory by unit (MiB, systemd's MemoryCurrent): {memory}")
        node01, node02, node03 = vm3.host("node01"), vm3.host("node02"), vm3.host("node03")
        node02.run(["rm", "-f", DONE])
        # A person of [users] queues it on the controller, as themself (an account on every node,
        # one uid): the chores wait for it, and accounting records it under their name.
        job = submit_wrap(node01, "--nodelist=node02", f"sleep 45 && touch {DONE}", user="alice")
        running_within(node01, job, 120)

        # Logins held to jobs: Alice reaches node02, where her job runs, and her shell is inside
        # that job; node03, where she has none, refuses her key; the controller is open to her
        # (she queues there); the inventory's user, the teacher, reaches every node.
        logins = {name: items(first[NAMES.index(name)], "users") for name in NAMES}
        print("logins:", {name: (i["logins"][1], i.get("pam_systemd", ("", "-"))[1]) for name, i in logins.items()})
        assert logins["node01"]["logins"][1].startswith("open to everyone of [users]: Slurm's controller")
        for name in ("node02", "node03"):
            assert logins[name]["logins"] == (Status.CHANGED, f"hold logins to jobs: people log in only where a job of theirs runs "
                                                               f"({inv.user} and root always)"), logins[name]
        inside = ssh_as(vm3, "alice", alice.private_path, "node02", "cat /proc/self/cgroup")
        assert inside.returncode == 0 and f"/job_{job}/step_extern/" in inside.stdout, inside.stdout + inside.stderr
        print(f"alice's login on node02, its cgroup: {inside.stdout.strip()}")
        refused = ssh_as(vm3, "alice", alice.private_path, "node03", "true")
        assert refused.returncode == 255, refused.stdout + refused.stderr
        assert refused.stderr.splitlines()[0] == "Access denied by pam_slurm_adopt: you have no active jobs on this node", refused.stderr
        assert ssh_as(vm3, "alice", alice.private_path, "node01", "true").returncode == 0
        for name in NAMES:
            assert ssh_as(vm3, inv.user, vm3.key_path, name, "true").returncode == 0, name
        boots = {name: vm3.host(name).boot_id() for name in ("node02", "node03")}
        started = time.monotonic()
        done = picluster("nodes", "reboot", "node[02-03]", "-i", path, timeout=2400)
        took = time.monotonic() - started
        assert done.returncode == 0, done.stdout + done.stderr
        lines = [line.strip() for line in done.stdout.splitlines()]
        waited = next(line for line in lines if line.startswith("node02: drained in Slurm; waiting for job"))
        assert waited.startswith(f"node02: drained in Slurm; waiting for job {job} (alice; time limit ends "), done.stdout
        for name in ("node02", "node03"):
            line = next(line for line in lines if line.startswith(f"{name}: rebooted"))
            assert line.endswith("; resumed in Slurm"), done.stdout
            assert vm3.host(name).boot_id() != boots[name]
        assert node02.run(["test", "-e", DONE], check=False).returncode == 0  # it ran to its end: the node went only after
        assert idle_within(node01, 60) == {name: "idle" for name in NAMES}
        accounted = node01.run(["sacct", "--noheader", "--parsable2", "--allocations", f"--jobs={job}", "--format=User,State,NodeList"]).stdout
        assert accounted == "alice|COMPLETED|node02\n", accounted  # recorded, and not NODE_FAIL
        print(f"rolling reboot of node[02-03] around a 45 s job: {took:.0f} s\n{done.stdout}")

        # --requeue: the job goes back to the queue at once and runs again once a node is free.
        held = submit_wrap(node01, "--nodelist=node03", "sleep 600")
        running_within(node01, held, 120)
        done = picluster("nodes", "reboot", "node03", "--requeue", "-i", path, timeout=1800)
        assert done.returncode == 0, done.stdout + done.stderr
        assert f"node03: job {held} (root) requeued" in done.stdout, done.stdout
        shown = node01.run(["scontrol", "-o", "show", "job", held]).stdout
        assert "Restarts=1" in shown, shown
        running_within(node01, held, 180)  # again, on node03 back in service
        node01.run(["scancel", held])

        # upgrade: apt's lock held by another process is waited for, and who holds it is said.
        hold = "import fcntl, sys, time; f = open('/var/lib/apt/lists/lock', 'w'); fcntl.lockf(f, fcntl.LOCK_EX); time.sleep(float(sys.argv[1]))"
        node03.run(["sh", "-c", f"setsid -f python3 -c {shlex.quote(hold)} 60 >/dev/null 2>&1"])
        time.sleep(2)
        held_by = node03.run(["pgrep", "-f", "^python3 -c import fcntl"]).stdout.split()[0]
        stuck = picluster("nodes", "upgrade", "node03", "--timeout", "10", "-i", path, timeout=600)
        one_line(stuck, 1, f"node03: apt's lock /var/lib/apt/lists/lock still held by process {held_by} (python3) after 10 s; "
                           "nothing was upgraded there")
        assert f"node03: waiting for apt's lock /var/lib/apt/lists/lock by process {held_by} (python3)" in stuck.stdout, stuck.stdout
        assert idle_within(node01, 30)["node03"] == "idle"  # drained for the upgrade, served again as nothing changed
        node03.run(["pkill", "-f", "^python3 -c import fcntl"], check=False)

        # The Ansible twin drains, waits for the job, reboots and resumes the same way ([users] is
        # picluster provision's only: the Ansible inventory is made from the file without it).
        hosts = tmp_path / "hosts.yml"
        path.write_text(path.read_text().split("\n[users]\n")[0])
        made = picluster("inventory", "--ansible", "-i", path, "--known-hosts", vm3.known_hosts_path, "--out", hosts)
        assert made.returncode == 0, made.stderr
        node03.run(["rm", "-f", DONE])
        job = submit_wrap(node01, "--nodelist=node03", f"sleep 30 && touch {DONE}")
        running_within(node01, job, 120)
        boot = node03.boot_id()
        played = subprocess.run([str(Path(sys.executable).with_name("ansible-playbook")), "-i", str(hosts), "reboot.yml", "--limit", "node03"],
                                cwd=ROOT / "ansible", capture_output=True, text=True, timeout=1800,
                                env=dict(os.environ, ANSIBLE_NOCOLOR="1", ANSIBLE_FORCE_COLOR="0"))
        assert played.returncode == 0, played.stdout[-4000:]
        assert node03.run(["test", "-e", DONE], check=False).returncode == 0 and node03.boot_id() != boot
        assert idle_within(node01, 60) == {name: "idle" for name in NAMES}
    finally:
        forget_key(vm3)


DONE = "/var/tmp/picluster-job-done"  # kept across a reboot


def running_within(host, job: str, seconds: float) -> None:
    deadline = time.monotonic() + seconds
    while (state := job_state(host, job)) != "RUNNING":
        assert time.monotonic() < deadline, f"job {job} still {state} after {seconds:.0f} s"
        time.sleep(2)


def ssh_as(vms, user: str, key, node: str, command: str) -> subprocess.CompletedProcess:
    """`command` run over OpenSSH's client as ``user`` with ``key`` on ``node``, host keys checked."""
    return subprocess.run(["ssh", "-i", str(key), "-o", "BatchMode=yes", "-o", "IdentitiesOnly=yes", "-o", "ConnectTimeout=30",
                           "-o", f"UserKnownHostsFile={vms.known_hosts_path}", "-o", "StrictHostKeyChecking=yes",
                           f"{user}@{vms.host(node).address}", command], capture_output=True, text=True, timeout=120)


def submit_wrap(host, *args: str, user: str | None = None) -> str:
    """sbatch --wrap on ``host`` (as root, or as ``user`` in their home): the job's id."""
    command = args[-1]
    who = ["runuser", "-u", user, "--"] if user else []
    where = [f"--chdir=/home/{user}"] if user else []
    done = host.run([*who, "sbatch", "--parsable", "--time=5", *where, *args[:-1], "--wrap", command], timeout=60)
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
