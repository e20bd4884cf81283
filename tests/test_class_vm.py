"""A class shares the cluster for a day, on 3 VM hosts (Debian 12's kernel and systemd, TCG):
one `picluster provision` with [slurm], accounting and [users] (alice and bob), then each person
logs in on the controller and types their jobs as written: the card's Monte-Carlo on the three
nodes, the card's training for one epoch, an SGE script of their own (`-cwd -V -l h=NODE -N -l
mem_free= -o -j y -l h_rt= -m be -M`, `source ~/.bashrc`), and a job over its memory.  The jobs
share nodes where they fit, the one over its memory is stopped while the others run, sacct records
each under its owner, a login to a node without a job of one's own is refused; then the workers
reboot one at a time (`picluster nodes reboot`) and the job still queued finishes afterwards.

Long: the VMs run TensorFlow under TCG (this machine's venv, read-only over virtiofs, so nothing
is installed again); they have 2 CPUs and 2.5 GiB each so that a TensorFlow job and another fit
on one node.  `./dev test --long tests/test_class_vm.py`; its times are in docs/test-hosts.md.
"""

import re
import sys
import time
from datetime import datetime

import pytest
from test_slurm_lab import as_person, forget_key, job_state
from test_slurm_vm import ended, ssh_as

from picluster.lab import HostOptions, Lab
from picluster.lab.keys import make_keypair
from picluster.model.nodeset import expand

from conftest import picluster
from vm_checks import inventory

pytestmark = [pytest.mark.vm, pytest.mark.long, pytest.mark.timeout(7200)]
NAMES = ["node01", "node02", "node03"]
# Two CPUs: two jobs of a CPU each on one node.  2.5 GiB: a job's TensorFlow server and client
# (about 560 MiB each when loaded) beside another job, under Slurm's confinement of memory.
SIZE = HostOptions(coordinator_python=True, vm_cpus=2, vm_memory_mib=2560)
MC_MEM = "1600M"  # the Monte-Carlo job's memory per node: its batch node runs a server and the client


def seed_script(node: str, address: str, seconds: int) -> str:
    """A person's script from their university's cluster, its body telling where it ran and what
    their ~/.bashrc set; it sleeps so that the others run beside it and the reboot waits for it."""
    return (f"#!/bin/bash\n#$ -cwd\n#$ -V\n#$ -l h={node}\n#$ -N seed\n#$ -l mem_free=256M\n#$ -o seed-$JOB_ID.out\n#$ -j y\n"
            f"#$ -l h_rt=0:40:0\n#$ -m be\n#$ -M {address}\nsource ~/.bashrc\n"
            f'echo "in $(pwd) on $(hostname), course $COURSE"\nsleep {seconds}\n')


# alice's on node02 beside her Monte-Carlo; bob's on node03 long enough that the training waits
# for it and the reboot of node03 waits for it too.
SEEDS = {"alice": ("node02", 300), "bob": ("node03", 1500)}


@pytest.fixture
def class_vms(vm_image, tmp_path, state):
    lab = Lab(nodes=3, vm=True, host_options={n: SIZE for n in NAMES}, say=print)
    lab.up()
    try:
        yield lab
    finally:
        lab.down()
        forget_key(lab)


def typed(title: str, done) -> None:
    """What was typed and seen, with its time, for the closing notes (pytest -s shows it)."""
    code = done.returncode if hasattr(done, "returncode") else done.exited
    print(f"\n$ {title}  (exit {code})\n{(done.stdout + done.stderr)[-4000:]}")


def seen(title: str, text: str) -> None:
    print(f"\n$ {title}\n{text}")


def states(lab, jobs: dict[str, str]) -> dict[str, str]:
    """slurm:ID -> JobState as slurmctld has it (root on the controller)."""
    return {name: job_state(lab.host("node01"), job.split(":")[1]) for name, job in jobs.items()}


def accounted_row(text: str, job: str) -> dict:
    """One job's sacct line (JobID,User,State,NodeList,Start,End) with its times as datetimes."""
    _, user, state, nodes, start, end = next(line.split("|") for line in text.splitlines() if line.split("|")[0] == job.split(":")[1])
    return {"user": user, "state": state, "nodes": nodes, "start": datetime.fromisoformat(start), "end": datetime.fromisoformat(end)}


def wait_for(what: str, check, seconds: float, every: float = 3.0):
    deadline = time.monotonic() + seconds
    while not (found := check()):
        assert time.monotonic() < deadline, f"{what}: not within {seconds:.0f} s"
        time.sleep(every)
    return found


def test_a_class_shares_the_cluster_for_a_day_through_a_rolling_reboot(class_vms, tmp_path):
    lab = class_vms
    took: dict[str, float] = {}
    alice, bob = make_keypair(tmp_path / "alice", "alice@laptop"), make_keypair(tmp_path / "bob", "bob@laptop")
    path = inventory(lab, tmp_path / "picluster.toml")
    text = path.read_text().replace("[cluster]\n", f'[cluster]\nvenv = "{sys.prefix}"\n', 1)
    path.write_text(text + f'\n[slurm]\naccounting = true\n\n[users]\nalice = "{alice.public_line}"\nbob = "{bob.public_line}"\n')
    node01, node02, node03 = (lab.host(n) for n in NAMES)

    # One provisioning, every step, as the teacher types it, once the VMs have finished booting.
    # One node at a time (--fanout 1): a TCG guest does SSH's cryptography instruction by
    # instruction, and three doing it at once on a loaded machine took longer than provision's
    # 10 s to open a channel (twice in three runs); one at a time, the others' qemus stay idle.
    for node in lab.hosts:
        node.run(["systemctl", "is-system-running", "--wait"], check=False, timeout=900)
    wait_for("the VMs' start-up work done", lambda: all(float(n.read_file("/proc/loadavg").split()[0]) < 1.0 for n in lab.hosts),
             900, every=15)
    started = time.monotonic()
    first = picluster("provision", "-i", path, "--fanout", "1", timeout=3600)
    took["provision"] = time.monotonic() - started
    typed(f"picluster provision -i picluster.toml --fanout 1  [{took['provision']:.0f} s]", first)
    assert first.returncode == 0, first.stdout[-4000:] + first.stderr[-2000:]
    assert "ProctrackType=proctrack/cgroup\n" in node01.read_file("/etc/slurm/slurm.conf")  # jobs confined
    assert node01.run(["nproc"]).stdout.strip() == "2"  # the VMs' size (HostOptions.vm_cpus)
    for node in (node02, node03):  # logins held to jobs on the workers
        assert "@include picluster-slurm-adopt\n" in node.read_file("/etc/pam.d/sshd"), node.name
    started = time.monotonic()
    data = picluster("data", "har", "-i", path, timeout=900)  # the data set into the share, which everyone reads
    took["data har"] = time.monotonic() - started
    assert data.returncode == 0, data.stdout[-2000:] + data.stderr[-2000:]
    for node in lab.hosts:  # what bob's ~/.bashrc sets on every node (his home there is the node's own)
        for person in ("alice", "bob"):
            node.run(["sed", "-i", "1i export COURSE=dl2026", f"/home/{person}/.bashrc"])
    for person in ("alice", "bob"):
        node01.run(["install", "-d", "-o", person, "-g", person, f"/home/{person}/course"])
        node01.write_file(f"/home/{person}/course/seed.sh", seed_script(SEEDS[person][0], f"{person}@example.org", SEEDS[person][1]))

    # Nobody without a job may log in to a worker; the controller is open to them.
    refused = ssh_as(lab, "bob", bob.private_path, "node03", "true")
    assert refused.returncode == 255 and "Access denied by pam_slurm_adopt" in refused.stderr, refused.stderr
    assert ssh_as(lab, "alice", alice.private_path, "node01", "true").returncode == 0

    # The jobs, typed by each person on the controller.
    jobs: dict[str, str] = {}

    def queue(name: str, person: str, key, command: str) -> list[str]:
        done = as_person(lab, person, key, command)
        typed(f"{person}@node01 $ {command}", done)
        assert done.exited == 0 and re.fullmatch(r"slurm:\d+\n", done.stdout), done.stdout + done.stderr
        jobs[name] = done.stdout.strip()
        return done.stderr.splitlines()

    # TensorFlow under TCG on a shared machine loads in minutes, not a Pi's seconds: the people
    # give their jobs' servers longer to answer, as docs/slurm.md says for slow nodes.
    slow = "PICLUSTER_START_TIMEOUT=1800 "
    queue("mc", "alice", alice, slow + f"picluster submit --nodes 3 --cpus 1 --mem {MC_MEM} --time 60 -- "
                                       "picluster run montecarlo --samples 1e8 --nodes 3")
    for person, key in (("alice", alice), ("bob", bob)):
        said = queue(f"seed-{person}", person, key, "cd ~/course && picluster submit seed.sh")
        assert said[0] == (f"seed.sh:2: #$ -cwd -> --chdir=/mnt/picluster/users/{person} (your work folder on the share: "
                           f"/home/{person}/course is not on the share the nodes mount)"), said
        assert any(line.startswith("seed.sh: mail: none will come") for line in said), said
    queue("hog", "alice", alice, "picluster submit --nodelist node01 --cpus 1 --mem 64M --time 5 -- "
                                 "python3 -c 'b = bytearray(512 * 2**20); import time; time.sleep(60)'")
    queue("har", "bob", bob, slow + "picluster submit --nodes 3 --time 180 -- picluster train har --layers 3 --epochs 1")

    # Logins: bob reaches node03 while his script runs there, inside its job; node02, where only
    # alice's jobs run, refuses him.
    wait_for("bob's script running", lambda: states(lab, {"s": jobs["seed-bob"]})["s"] == "RUNNING", 900)
    inside = ssh_as(lab, "bob", bob.private_path, "node03", "cat /proc/self/cgroup")
    assert inside.returncode == 0 and f"/job_{jobs['seed-bob'].split(':')[1]}/step_extern/" in inside.stdout, inside.stdout + inside.stderr
    refused = ssh_as(lab, "bob", bob.private_path, "node02", "true")
    assert refused.returncode == 255 and "Access denied by pam_slurm_adopt" in refused.stderr, refused.stderr
    # The job over its memory is stopped by Slurm (when it ended is compared with the others' below).
    assert ended(node01, jobs["hog"].split(":")[1], 900) == "OUT_OF_MEMORY"
    shown = node01.run(["squeue", "--noheader", "--format=%i %u %T %N %r"]).stdout
    seen("squeue (root on node01)", shown)
    # The Monte-Carlo ends; the training still waits for whole nodes (bob's script holds a CPU of node03).
    assert ended(node01, jobs["mc"].split(":")[1], 3600) == "COMPLETED"
    assert states(lab, {"har": jobs["har"]}) == {"har": "PENDING"}

    # The workers reboot one at a time, each drained and waited for; the training still queued
    # runs once they are back.  (Started once the controller runs no TensorFlow: under TCG a guest
    # whose CPUs a job keeps busy took longer than picluster's 10 s to open an SSH channel.)
    boots = {n: lab.host(n).boot_id() for n in ("node02", "node03")}
    started = time.monotonic()
    rebooted = picluster("nodes", "reboot", "node[02-03]", "-i", path, "--timeout", "1800", timeout=5400)
    took["nodes reboot"] = time.monotonic() - started
    typed(f"picluster nodes reboot node[02-03] -i picluster.toml  [{took['nodes reboot']:.0f} s]", rebooted)
    assert rebooted.returncode == 0, rebooted.stdout[-4000:] + rebooted.stderr[-2000:]
    lines = [line.strip() for line in rebooted.stdout.splitlines()]
    assert any(line.startswith(f"node03: drained in Slurm; waiting for job {jobs['seed-bob'].split(':')[1]} (bob; time limit ends ")
               for line in lines), rebooted.stdout
    for name in ("node02", "node03"):
        assert any(line.startswith(f"{name}: rebooted") and line.endswith("resumed in Slurm") for line in lines), rebooted.stdout
        assert lab.host(name).boot_id() != boots[name]
    started = time.monotonic()
    ended(node01, jobs["har"].split(":")[1], 5400)
    took["train har after the reboot"] = time.monotonic() - started

    # Every job ended as it should, recorded under its owner.
    accounted = node01.run(["sacct", "--noheader", "--parsable2", "--allusers", "--allocations",
                            "--jobs=" + ",".join(j.split(":")[1] for j in jobs.values()),
                            "--format=JobID,User,State,NodeList,Start,End"]).stdout
    seen("sacct --allusers (root on node01)", accounted)
    recorded = {line.split("|")[0]: tuple(line.split("|")[1:3]) for line in accounted.splitlines()}
    rows = {name: accounted_row(accounted, job) for name, job in jobs.items()}
    # Shared nodes: alice's script ran beside her Monte-Carlo on node02 (both of a CPU of its two),
    # and the job over its memory was stopped while bob's script ran on (it ran beside the
    # Monte-Carlo on node01 when their times overlapped: printed above).
    assert SEEDS["alice"][0] in expand(rows["mc"]["nodes"]) and rows["seed-alice"]["nodes"] == SEEDS["alice"][0], rows
    assert rows["mc"]["start"] < rows["seed-alice"]["end"] and rows["seed-alice"]["start"] < rows["mc"]["end"], rows
    assert rows["hog"]["nodes"] == "node01" and rows["seed-bob"]["start"] <= rows["hog"]["end"] < rows["seed-bob"]["end"], rows
    owners = {"mc": "alice", "seed-alice": "alice", "seed-bob": "bob", "hog": "alice", "har": "bob"}
    expected = {"mc": "COMPLETED", "seed-alice": "COMPLETED", "seed-bob": "COMPLETED", "hog": "OUT_OF_MEMORY", "har": "COMPLETED"}
    assert {name: recorded[job.split(":")[1]] for name, job in jobs.items()} == {
        name: (owners[name], expected[name]) for name in jobs}, accounted
    # What each person reads of their own jobs.
    for person in ("alice", "bob"):
        seed = jobs[f"seed-{person}"].split(":")[1]
        out = node01.read_file(f"/srv/picluster/users/{person}/seed-{seed}.out")
        node = SEEDS[person][0]
        assert out == f"in /mnt/picluster/users/{person} on {node}, course dl2026\n", out
    mc = as_person(lab, "alice", alice, f"picluster logs {jobs['mc']}")
    typed(f"alice@node01 $ picluster logs {jobs['mc']}", mc)
    assert re.search(rf"^Monte-Carlo pi on 3 node\(s\) \(Slurm job {jobs['mc'].split(':')[1]}'s allocation\): 100,000,000 samples",
                     mc.stdout, re.M), mc.stdout[-2000:]
    har = as_person(lab, "bob", bob, f"picluster logs {jobs['har']}")
    typed(f"bob@node01 $ picluster logs {jobs['har']}", har)
    assert "Traceback" not in har.stdout and re.search(r"^selected on validation: epoch 1 \(val [0-9.]+%\)  test accuracy [0-9.]+%",
                                                       har.stdout, re.M), har.stdout[-3000:]
    print("times: " + ", ".join(f"{k} {v:.0f} s" for k, v in took.items()))
