"""`picluster provision` with [slurm] against the test lab: munge, slurmctld and slurmd for real;
then jobs through that queue: `picluster submit`, `jobs`, `logs` and `cancel` on Slurm's jobs, and
Monte-Carlo, HAR training and a launched script run inside their allocations.

The hosts have no init, so the daemons run as the step starts them there (test_provision_vm.py
covers systemd hosts).  slurmd reads cgroups at start even with the plugins chosen here, so the
lab's hosts are limited ones: those see this machine's cgroup hierarchies (read-only).  Every
host sees one directory of this machine at /mnt/picluster, the inventory's data_dir, where real
nodes mount the NFS share (these hosts cannot mount NFS).
"""

import json
import os
import re
import shlex
import shutil
import stat
import sys
import time
from types import SimpleNamespace

import psutil
import pytest

from picluster.cluster.server import step_ports
from picluster.lab import Lab
from picluster.lab.host import HostOptions
from picluster.lab.limits import Limits
from picluster.model.inventory import load_inventory
from picluster.provision.result import Status
from picluster.provision.runner import provision
from picluster.provision.steps import Options
from picluster.provision.steps import slurm as slurm_step
from picluster.provision.steps.munge import key_path

from conftest import ansible_playbook, assert_converged, picluster

pytestmark = pytest.mark.lab

VENV = sys.prefix  # the hosts share /usr and this tree: no runtime to install
NAMES = ["node01", "node02", "node03"]


@pytest.fixture(scope="module")
def slurm_lab(lab_support, tmp_path_factory):
    share = tmp_path_factory.mktemp("share")
    shared = HostOptions(share=str(share))
    master = HostOptions(share=str(share), exports_share=True)  # node01: the NFS master, its export the share
    # A memory limit gives each host the cgroup slurmd needs.  No CPU share: these tests are about
    # the queue, not a Pi's speed, and at 0.3 of a core each the jobs in them took 2.8 minutes more.
    lab = Lab(nodes=3, limits=Limits(memory=2**30), host_options={name: master if name == NAMES[0] else shared for name in NAMES})
    lab.up()
    try:
        os.chown(share, lab.user.uid, lab.user.gid)
        lab.share = share
        yield lab
    finally:
        lab.down()
        forget_key(lab)


def forget_key(lab):
    """The munge key provisioning made on this machine for the lab's cluster (named after the lab)."""
    shutil.rmtree(key_path(SimpleNamespace(name=f"lab-{lab.id}")).parent, ignore_errors=True)


def inventory(lab, tmp_path):
    return load_inventory(inventory_file(lab, tmp_path))


def inventory_file(lab, tmp_path):
    """The lab's inventory with [slurm], and the venv the hosts share with this machine."""
    path = lab.write_inventory(tmp_path / "picluster.toml")
    text = path.read_text().replace("[cluster]\n", f'[cluster]\nvenv = "{VENV}"\n', 1)
    path.write_text(text + '\n[slurm]\npartition = "pis"\n')
    return path


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
    assert queue["confined"] == (Status.SKIPPED, "jobs are not confined here (the slurm step's containment line says why)")
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
        assert "\nCgroupPlugin=cgroup/v1\n" in host.read_file("/etc/slurm/cgroup.conf")
        # The MOCK boot partition's command line, as a Pi's: the memory cgroup on from the next boot.
        assert host.read_file("/boot/firmware/cmdline.txt").endswith(" rootwait cgroup_enable=memory cgroup_memory=1\n")
        rules = host.run(["nft", "list", "table", "inet", "picluster"]).stdout
        # With a range in it the set is an interval set, and nft shows neighbours as ranges.
        assert f"ip saddr {slurm_lab.subnet} tcp dport {{ 111, 2049, 2222-2287, 6817-6818, 19100, 20048, 23300-23363, 60001-60100 }} accept" in rules
    cpus = os.cpu_count()
    for name, host in zip(NAMES, slurm_lab.hosts):
        assert f"NodeName={name} NodeAddr={host.address} CPUs={cpus} RealMemory=" in conf
    assert conf.endswith("PartitionName=pis Nodes=ALL Default=YES DefaultTime=0-01:00:00 MaxTime=1-00:00:00 State=UP\n")
    # These hosts see this machine's cgroup v1 hierarchies, read-only: jobs are tracked, not confined, and the report says so.
    assert "\nProctrackType=proctrack/linuxproc\n" in conf and "\nMpiParams=ports=2224-2287\n" in conf
    assert items(first[0], "slurm")["containment"] == (Status.OK, "jobs tracked through their parents, not confined "
                                                       "(proctrack/linuxproc): node[01-03]: cgroup v1, not v2")
    # Slurm reads it as written: a job without --mem gets DefMemPerCPU per CPU, not the whole node.
    shown = node03.run(["scontrol", "show", "config"]).stdout
    assert re.search(r"^DefMemPerCPU\s+= \d+$", shown, re.M) and re.search(r"^MpiParams\s+= ports=2224-2287$", shown, re.M), shown
    assert f"SlurmctldHost=node01({slurm_lab.host('node01').address})" in conf

    second = provision(inv, options(slurm_lab))
    for report in second:
        assert report.changes == 0 and not report.failed, report
    assert items(second[0], "slurm")["slurmctld"] == (Status.OK, "running, configuration unchanged")
    assert items(second[0], "queue")["nodes"] == (Status.OK, "3 idle in partition pis")


def test_a_stopped_slurmd_is_seen_and_the_next_run_starts_it(slurm_lab, tmp_path, monkeypatch):
    path = inventory_file(slurm_lab, tmp_path)
    inv = load_inventory(path)
    assert not any(r.failed for r in provision(inv, options(slurm_lab, only=("slurm", "queue"))))
    node02 = slurm_lab.host("node02")
    node02.run(["sh", "-c", "kill $(cat /run/slurmd.pid)"])
    controller = slurm_lab.host("node01")
    # slurmctld notices on its next ping of the node; ask it to look now instead of waiting minutes.
    controller.run(["scontrol", "update", "NodeName=node02", "State=DOWN", "Reason=test-stopped"])
    assert sinfo(controller)["node02"] == "down"
    assert controller.run(["srun", "--nodes=3", "--time=1", "--immediate=5", "true"], check=False, timeout=60).returncode != 0
    # picluster says so: a job that needs it is refused with the node named, nothing queued...
    before = queue_states(path)
    whole = picluster("submit", "-i", path, "--nodes", "3", "--", "hostname")
    assert whole.returncode == 2 and len(whole.stderr.splitlines()) == 1, whole.stderr
    assert re.search(r"; not available now: node02 down\*? \(test-stopped\) \(bring it back with .*; nothing was queued$",
                     whole.stderr), whole.stderr
    assert queue_states(path) == before
    # ...a job that fits runs on the other nodes, with a note, and `jobs` lists the node.
    beside = picluster("submit", "-i", path, "--nodes", "2", "--", "hostname")
    assert beside.returncode == 0, beside.stderr
    assert re.fullmatch(r"note: not available now: node02 down\*? \(test-stopped\): Slurm starts no job there",
                        beside.stderr.splitlines()[-1]), beside.stderr
    job = beside.stdout.strip()
    assert wait_state(path, job, ENDED, 60) == "COMPLETED"
    shown = picluster("jobs", "-i", path, job).stdout
    assert re.search(rf"{job}\s+hostname\s+pi\s+COMPLETED\s+node\[01,03\]", shown), shown
    assert re.search(r"^not available: node02 down\*? \(test-stopped\): Slurm starts no job there$",
                     picluster("jobs", "-i", path).stdout, re.M)
    # provision's read-back says which node and why, after waiting for it to register: 60 s for a
    # user, whose node may be booting; 10 s here, where nothing will bring it back.
    monkeypatch.setattr(slurm_step, "REGISTER_WAIT", 10.0)
    seen = provision(inv, options(slurm_lab, only=("queue",)))
    status, detail = items(seen[0], "queue")["nodes"]
    # "down*" once slurmctld's own ping of the node has gone unanswered too.
    assert status is Status.FAILED and re.fullmatch(r"not serving after 10 s: node02 down\*? \(test-stopped\)", detail), detail
    monkeypatch.undo()

    again = provision(inv, options(slurm_lab, only=("slurm", "queue")))
    assert items(again[1], "slurm")["slurmd"] == (Status.CHANGED, "start slurmd")
    assert items(again[0], "slurm")["slurmd"] == (Status.OK, "running, configuration unchanged")
    assert items(again[0], "queue")["nodes"] == (Status.OK, "3 idle in partition pis")
    assert sinfo(controller) == {name: "idle" for name in NAMES}


def test_a_stopped_slurmctld_is_one_line_and_the_next_run_starts_it(slurm_lab, tmp_path):
    path = inventory_file(slurm_lab, tmp_path)
    inv = load_inventory(path)
    assert not any(r.failed for r in provision(inv, options(slurm_lab, only=("slurm", "queue"))))
    before = queue_states(path)
    controller = slurm_lab.host("node01")
    controller.run(["sh", "-c", "kill $(cat /run/slurmctld.pid)"])
    deadline = time.monotonic() + 30
    while "UP" in controller.run(["scontrol", "ping"], check=False).stdout:
        assert time.monotonic() < deadline, "slurmctld still answers 30 s after SIGTERM"
        time.sleep(0.5)

    said = ("picluster: error: Slurm's controller daemon on node01 does not answer (slurmctld stopped?): "
            "'picluster provision -i INVENTORY --only slurm,queue' starts it")
    done = picluster("submit", "-i", path, "--", "hostname")
    assert done.returncode == 2 and done.stderr == said + "; nothing was queued\n", done.stderr
    listed = picluster("jobs", "-i", path)
    assert listed.returncode == 2 and listed.stderr == said + "\n", listed.stderr

    again = provision(inv, options(slurm_lab, only=("slurm", "queue")))
    assert items(again[0], "slurm")["slurmctld"] == (Status.CHANGED, "start slurmctld")
    assert items(again[0], "queue")["nodes"] == (Status.OK, "3 idle in partition pis")
    # The refused job was never queued: the only new job is the read-back's own srun.
    names = dict(re.findall(r"^\s*(slurm:\d+)\s+(\S+)", picluster("jobs", "-i", path).stdout, re.M))
    assert {names[job] for job in names.keys() - before.keys()} == {"picluster-check"}, names


@pytest.mark.long  # about 7 minutes; the twin's provisioning roles converge on namespace hosts in every run (test_provision_lab.py)
def test_the_ansible_twin_brings_up_the_same_slurm(lab_support, tmp_path):
    lab = Lab(nodes=3, limits=Limits(cpu=0.3, memory=2**30))
    lab.up()
    try:
        path = lab.write_inventory(tmp_path / "picluster.toml")
        path.write_text(path.read_text() + '\n[slurm]\ncontroller = "node02"\n')
        ansible_inv = tmp_path / "inventory.yml"
        made = picluster("inventory", "--ansible", "-i", path, "--known-hosts", lab.known_hosts_path, "--out", ansible_inv)
        assert made.returncode == 0, made.stderr
        first = ansible_playbook(ansible_inv, "-e", f"venv={VENV}", "--diff")
        assert first.returncode == 0, first.stdout[-4000:] + first.stderr[-2000:]
        # The first key of this cluster, made on this machine; --diff shows nothing of it.
        key = key_path(load_inventory(path)).read_text()
        assert oct(key_path(load_inventory(path)).stat().st_mode & 0o777) == "0o400"
        assert key.strip() not in first.stdout + first.stderr
        assert "+++ after: /etc/munge/munge.key.sha256" in first.stdout  # --diff shows what may be shown...
        assert "+++ after: /etc/munge/munge.key\n" not in first.stdout  # ...and not the key
        assert sinfo(lab.host("node01")) == {name: "idle" for name in NAMES}
        second = ansible_playbook(ansible_inv, "-e", f"venv={VENV}")
        assert_converged(second, lab.hosts)
        # Same end state, byte for byte: the Fabric path finds nothing to change or restart.
        reports = provision(load_inventory(path), options(lab))
        for report in reports:
            assert not report.failed and report.changes == 0, [
                (s.step, i) for s in report.steps for i in s.items if i.status in (Status.CHANGED, Status.FAILED)
            ]
        assert items(reports[1], "queue")["srun"] == (Status.OK, "hostname ran on all 3 nodes")
        assert "SlurmctldHost=node02(" in lab.host("node03").read_file("/etc/slurm/slurm.conf")
    finally:
        lab.down()
        forget_key(lab)


# -- jobs through the queue ------------------------------------------------------------------------

LAUNCHED = '''import json, os, socket
task = json.loads(os.environ["TF_CONFIG"])["task"]
print(f"task {task['type']}:{task['index']} on {socket.gethostname()}", flush=True)
'''
ENDED = {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT"}


def submit(path, *args) -> str:
    done = picluster("submit", "-i", path, *args)
    assert done.returncode == 0, done.stderr
    assert re.fullmatch(r"slurm:\d+\n", done.stdout), done.stdout
    return done.stdout.strip()


def queue_states(path) -> dict[str, str]:
    """slurm:ID -> "STATE" or "STATE (Reason)", as `picluster jobs` shows them."""
    done = picluster("jobs", "-i", path)
    assert done.returncode == 0, done.stderr
    found = re.findall(r"^\s*(slurm:\d+)\s+\S+\s+\S+\s+([A-Z_]+(?: \([A-Za-z]+\))?)", done.stdout, re.M)
    return dict(found)


def wait_state(path, job: str, wanted: set[str], timeout: float) -> str:
    deadline = time.monotonic() + timeout
    while True:
        state = queue_states(path).get(job, "")
        if state.split(" ")[0] in wanted:
            return state
        assert time.monotonic() < deadline, f"{job} still {state!r} after {timeout:.0f} s"
        time.sleep(2)


def job_processes() -> list[str]:
    """Servers, clients and tasks that a Slurm job of picluster's started (pid namespace shared)."""
    found = []
    for proc in psutil.process_iter(["cmdline"]):
        cmd = " ".join(proc.info["cmdline"] or [])
        if "--slurm-node" in cmd or "/mnt/picluster/runs/" in cmd or "/mnt/picluster/task.py" in cmd:
            found.append(cmd[:120])
    return found


def none_left(timeout: float = 15.0) -> list[str]:
    """The job's processes still there after ``timeout`` s (Slurm signals them as the job ends)."""
    deadline = time.monotonic() + timeout
    while (left := job_processes()) and time.monotonic() < deadline:
        time.sleep(0.5)
    return left


def wait_reason(path, job: str, timeout: float = 30.0) -> str:
    """A pending job's state once slurmctld has given it a reason."""
    deadline = time.monotonic() + timeout
    while (state := queue_states(path).get(job, "")) == "PENDING" and time.monotonic() < deadline:
        time.sleep(1)
    return state


# `picluster train har --layers 3` (the recipe) made short: the options added after the card's words.
SHORT_HAR = ["--conv-filters", "8", "--rnn-hidden", "8", "--batch", "20", "--lr", "0.01", "--epochs", "2"]


def test_montecarlo_har_and_launch_run_inside_their_allocations(slurm_lab, tmp_path):
    from train_fixtures import write_tiny_har

    path = inventory_file(slurm_lab, tmp_path)
    assert not any(r.failed for r in provision(load_inventory(path), options(slurm_lab, only=("slurm", "queue"))))
    write_tiny_har(slurm_lab.share / "har")
    (slurm_lab.share / "task.py").write_text(LAUNCHED)
    for item in [slurm_lab.share / "har", *(slurm_lab.share / "har").iterdir(), slurm_lab.share / "task.py"]:
        os.chown(item, slurm_lab.user.uid, slurm_lab.user.gid)

    # The commands as a user types them, each showing its human-readable report.  The first takes
    # two nodes, the others every node: they run one after the other, in the order they came.
    mc = submit(path, "--nodes", "2", "--time", "10", "--", "picluster", "run", "montecarlo", "--samples", "1e7", "--nodes", "1")
    har = submit(path, "--nodes", "3", "--time", "10", "--name", "har", "--", "picluster", "train", "har", "--layers", "3",
                 *SHORT_HAR)
    launched = submit(path, "--nodes", "3", "--time", "10", "--", "picluster", "launch", "--mode", "each-worker",
                      "/mnt/picluster/task.py")
    first = queue_states(path)
    assert first[har].startswith("PENDING") and first[launched].startswith("PENDING"), first
    # `logs -f` follows the first job's output file as it is written and ends with the job, exit 0.
    followed = picluster("logs", "-f", "-i", path, mc)
    assert followed.returncode == 0 and followed.stderr.endswith(f"{mc} COMPLETED\n"), followed.stderr[-2000:]
    logs = {mc: followed.stdout}
    for job in (har, launched):
        state = wait_state(path, job, ENDED, 300)
        logs[job] = picluster("logs", "-i", path, job).stdout
        assert state == "COMPLETED", logs[job][-3000:]
    assert not any("Traceback" in log for log in logs.values()), logs
    # The queue as a script reads it: one JSON document, Slurm's times and the partition in it.
    listed = json.loads(picluster("jobs", "-i", path, "--json").stdout)
    rows = {row["id"]: row for row in listed["jobs"]}
    assert listed["schema"] == "picluster.jobs/1" and listed["slurm"]["partition"] == "pis", listed
    assert all(rows[j]["state"] == "COMPLETED" and rows[j]["started"] <= rows[j]["ended"] for j in (mc, har, launched)), rows

    # Monte-Carlo: one worker of the job's two nodes, the allocation named in the report.
    log = logs[mc]
    number = mc.split(":")[1]
    assert re.search(rf"^Monte-Carlo pi on 1 node\(s\) \(Slurm job {number}'s allocation\): 10,000,000 samples, seed \d+$",
                     log, re.M), log[-2000:]
    estimate = float(re.search(r"^  estimate +([0-9.]+)$", log, re.M).group(1))
    assert abs(estimate - 3.14159265) < 0.01, log[-2000:]  # 1e7 samples: one standard error is 5.2e-4

    # HAR: the ps on the first node, a worker client on each of the others, the run on the share.
    log = logs[har]
    assert "convlstm: 3 convolutions x 8" in log and "cluster: slurm, 1 ps + 2 workers" in log, log[-2000:]
    assert re.search(r"^selected on validation: epoch \d+ \(val [0-9.]+%\)  test accuracy [0-9.]+%", log, re.M), log[-2000:]
    (run,) = (slurm_lab.share / "runs").iterdir()
    assert run.name.endswith(f"-slurm{har.split(':')[1]}")
    layout = json.loads((run / "layout.json").read_text())["layout"]
    assert [(t["job"], t["node"]) for t in layout] == [("ps", "node01"), ("worker", "node02"), ("worker", "node03")]
    assert json.loads((run / "result.json").read_text())["test_accuracy"] > 0.3

    # launch: each worker's copy ran on its own node, with its task in TF_CONFIG.
    log = logs[launched]
    for index, node in enumerate(["node02", "node03", "node01"]):
        assert f"worker:{index}: task worker:{index} on {node}" in log, log[-2000:]
    assert none_left() == []


def test_the_queue_holds_backfills_times_out_and_cancels(slurm_lab, tmp_path):
    path = inventory_file(slurm_lab, tmp_path)
    assert not any(r.failed for r in provision(load_inventory(path), options(slurm_lab, only=("slurm", "queue"))))

    # A picluster job on two nodes for up to 5 minutes, and a 1-minute job on the third.
    long = submit(path, "--nodelist", "node[01-02]", "--time", "5", "--name", "long", "--",
                  "picluster", "run", "montecarlo", "--samples", "1e13", "--no-live")
    over = submit(path, "--nodelist", "node03", "--time", "1", "--name", "overtime", "--", "sleep", "600")
    wait_state(path, long, {"RUNNING"}, 60)
    wait_state(path, over, {"RUNNING"}, 60)
    # FIFO would keep the short job behind the big one; backfill starts it on node03 as soon as
    # that is free, since it ends before the long job would let the big one start.
    big = submit(path, "--nodes", "3", "--time", "5", "--name", "big", "--", "sleep", "1")
    short = submit(path, "--nodes", "1", "--time", "1", "--name", "short", "--", "sleep", "1")
    assert wait_state(path, big, {"PENDING"}, 5) and wait_reason(path, big) == "PENDING (Resources)"
    assert wait_state(path, over, ENDED, 180) == "TIMEOUT (TimeLimit)"
    assert wait_state(path, short, {"RUNNING", "COMPLETED"}, 120)
    assert queue_states(path)[big].startswith("PENDING")

    # Cancelling the running picluster job leaves no server of it on any node; the big job then runs.
    deadline = time.monotonic() + 120
    while not job_processes():  # its servers, up
        assert time.monotonic() < deadline and queue_states(path)[long] == "RUNNING", picluster("logs", "-i", path, long).stdout
        time.sleep(1)
    done = picluster("cancel", "-i", path, long)
    assert done.returncode == 0 and done.stdout == f"{long} CANCELLED (was RUNNING)\n", done.stdout + done.stderr
    assert queue_states(path)[long] == "CANCELLED"
    assert none_left() == []
    assert wait_state(path, big, ENDED, 120) == "COMPLETED"
    again = picluster("cancel", "-i", path, big)
    assert again.returncode == 0 and again.stdout == f"{big} is already COMPLETED; nothing to cancel\n"


def test_jobs_share_a_node_on_ports_slurm_reserves_and_an_sge_script_runs_as_written(slurm_lab, tmp_path):
    path = inventory_file(slurm_lab, tmp_path)
    assert not any(r.failed for r in provision(load_inventory(path), options(slurm_lab, only=("slurm", "queue"))))

    # Two picluster jobs on one node, a CPU each: the first runs until cancelled, the second starts
    # beside it and completes.  Their servers listen on the ports Slurm reserved for each job's
    # step, so the second's do not meet the first's (on fixed ports its servers could not bind).
    # The first holds its servers idle (a launched task that sleeps): a Pi-shaped host's 0.3 core
    # is not also spent on it, so the second's progress is not starved out.
    (slurm_lab.share / "idle.py").write_text("import time\ntime.sleep(600)\n")
    os.chown(slurm_lab.share / "idle.py", slurm_lab.user.uid, slurm_lab.user.gid)
    held = submit(path, "--nodelist", "node02", "--cpus", "1", "--time", "5", "--name", "held", "--",
                  "picluster", "launch", "--mode", "each-worker", "/mnt/picluster/idle.py")
    wait_state(path, held, {"RUNNING"}, 60)
    node01 = slurm_lab.host("node01")
    deadline = time.monotonic() + 120
    while not (first := servers_ports(node01).get(held)):
        assert time.monotonic() < deadline and queue_states(path)[held] == "RUNNING", picluster("logs", "-i", path, held).stdout
        time.sleep(1)
    assert len(first) == 2 and set(first) <= set(range(2224, 2288)), first  # MpiParams=ports, above tf_port 2222 and 2223
    beside = submit(path, "--nodelist", "node02", "--cpus", "1", "--time", "5", "--", "picluster", "run", "montecarlo",
                    "--samples", "1e6", "--nodes", "1")
    seen = {}
    deadline = time.monotonic() + 240
    while (state := queue_states(path)[beside]).split(" ")[0] not in ENDED:
        seen |= servers_ports(node01)
        assert time.monotonic() < deadline, f"{beside} still {state}"
        time.sleep(1)
    assert state == "COMPLETED", (state, first, seen, picluster("logs", "-i", path, beside).stdout[-3000:])
    assert queue_states(path)[held] == "RUNNING"  # side by side on node02, not one after the other
    log = picluster("logs", "-i", path, beside).stdout
    assert re.search(r"^  estimate +3\.1", log, re.M), log[-2000:]
    if beside in seen:  # its servers' step, when a look caught it: two other ports of the range
        assert len(seen[beside]) == 2 and not set(seen[beside]) & set(first), (seen, first)
    assert picluster("cancel", "-i", path, held).returncode == 0
    assert none_left() == []

    # A job script of SGE's, submitted as it is: each #$ line said as what it became, the job run
    # with picluster on its PATH, its output where -o put it (stdout and stderr together: -j y).
    (tmp_path / "mc.sh").write_text(
        "#!/bin/sh\n#$ -N sge-mc\n#$ -l h=node03,mem_free=256M\n#$ -l h_rt=600\n#$ -o sge-$JOB_ID.out -j y\n"
        "picluster run montecarlo --samples 1e6 --nodes 1\necho on stderr >&2\n")
    done = picluster("submit", "-i", path, "mc.sh", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    job = done.stdout.strip()
    assert re.fullmatch(r"slurm:\d+", job), done.stdout
    said = done.stderr.splitlines()
    assert said[:5] == [
        "mc.sh:2: #$ -N sge-mc -> --job-name=sge-mc",
        "mc.sh:3: #$ -l h=node03,mem_free=256M -> --nodelist=node03 --mem=256M",
        "mc.sh:4: #$ -l h_rt=600 -> --time=00:10:00",
        "mc.sh:5: #$ -o sge-$JOB_ID.out -> --output=sge-%j.out",
        "mc.sh:5: #$ -j y -> stdout and stderr in one file (sbatch's default without --error)",
    ], said
    assert said[5].startswith(f"queued as Slurm job {job.split(':')[1]} (sge-mc); ")
    assert wait_state(path, job, ENDED, 240) == "COMPLETED"
    listed = picluster("jobs", "-i", path).stdout
    assert re.search(rf"^\s*{job}\s+sge-mc\s", listed, re.M), listed
    out = slurm_lab.host("node03").read_file(f"{slurm_lab.user.home}/sge-{job.split(':')[1]}.out")
    assert re.search(r"^  estimate +3\.1", out, re.M) and out.rstrip().endswith("on stderr"), out[-2000:]
    # One the cluster cannot honour is one line naming it, and nothing is queued.
    before = queue_states(path)
    (tmp_path / "gpu.sh").write_text("#!/bin/sh\n#$ -l gpus=1\nnvidia-smi\n")
    refused = picluster("submit", "-i", path, "gpu.sh", cwd=tmp_path)
    assert refused.returncode == 2 and refused.stderr == "picluster: error: gpu.sh:2: #$ -l gpus=1: the cluster has no GPUs; remove the request\n"
    assert queue_states(path) == before


@pytest.mark.long  # the card's sixty epochs on the full data set: minutes (docs/test-hosts.md)
@pytest.mark.timeout(3600)
def test_the_cards_training_runs_through_the_queue_as_typed(slurm_lab, tmp_path):
    """`picluster train har --layers 3`, the card's command as written, queued on the three hosts:
    the data set prepared into the share as docs/slurm.md says, then the training on 1 ps and 2
    workers for its sixty epochs, its report read back with `picluster logs`."""
    path = inventory_file(slurm_lab, tmp_path)
    assert not any(r.failed for r in provision(load_inventory(path), options(slurm_lab, only=("slurm", "queue"))))
    data, tiny = slurm_lab.share / "har", slurm_lab.share / "har-tiny"
    if data.exists():  # another test's tiny set: kept aside, put back after
        data.rename(tiny)
    try:
        started = time.monotonic()
        prepared = picluster("data", "har", "-i", path, timeout=900)
        assert prepared.returncode == 0, prepared.stdout[-2000:] + prepared.stderr[-2000:]
        took = {"data har": time.monotonic() - started}
        started = time.monotonic()
        job = submit(path, "--nodes", "3", "--", "picluster", "train", "har", "--layers", "3")
        state = wait_state(path, job, ENDED, 3000)
        took["train har"] = time.monotonic() - started
        log = picluster("logs", "-i", path, job).stdout
        assert state == "COMPLETED" and "Traceback" not in log, log[-3000:]
        assert "cluster: slurm, 1 ps + 2 workers" in log and "60 epochs" in log, log[-3000:]
        accuracy = re.search(r"^selected on validation: epoch \d+ \(val [0-9.]+%\)  test accuracy ([0-9.]+)%", log, re.M)
        assert accuracy and float(accuracy.group(1)) > 90, log[-3000:]
        print(f"the card's training through the queue: {job}, test accuracy {accuracy.group(1)} %; "
              + ", ".join(f"{k} {v:.0f} s" for k, v in took.items()))
    finally:
        shutil.rmtree(data, ignore_errors=True)
        shutil.rmtree(slurm_lab.share / "runs", ignore_errors=True)
        if tiny.exists():
            tiny.rename(data)


def servers_ports(host) -> dict[str, list[int]]:
    """slurm:ID -> the ports Slurm reserved for that job's servers' step, as scontrol shows steps."""
    found = {}
    for line in host.run(["scontrol", "-o", "show", "step"], check=False).stdout.splitlines():
        fields = dict(w.split("=", 1) for w in line.split() if "=" in w)
        if fields.get("Name") == "picluster-servers" and fields.get("ResvPorts"):
            job = fields["StepId"].split(".")[0]
            found[f"slurm:{job}"] = step_ports(fields["ResvPorts"])
    return found


def test_requests_slurm_refuses_are_one_line_and_queue_nothing(slurm_lab, tmp_path):
    path = inventory_file(slurm_lab, tmp_path)
    assert not any(r.failed for r in provision(load_inventory(path), options(slurm_lab, only=("slurm", "queue"))))
    before = queue_states(path)
    done = picluster("submit", "-i", path, "--mem", "900G", "--", "hostname")
    assert done.returncode == 2 and done.stderr == (
        "picluster: error: Slurm refused the job: allocation failure: Requested node configuration is not available; "
        "nothing was queued\n"), done.stderr
    assert queue_states(path) == before
    gone = picluster("logs", "-i", path, "slurm:999999")
    assert gone.returncode == 2 and "slurm:999999" not in gone.stdout and len(gone.stderr.splitlines()) == 1


def scontrol_node(host, name: str) -> tuple[str, str]:
    """(State, Reason) of ``name`` as slurmctld has it."""
    line = host.run(["scontrol", "-o", "show", "node", name]).stdout.strip()
    state = re.search(r"\bState=(\S+)", line).group(1)
    reason = re.search(r" Reason=(.*?)(?= [A-Za-z]+=|$)", line)
    return state, reason.group(1) if reason else ""


def sbatch(host, *args: str) -> str:
    return host.run(["sbatch", "--parsable", *args], timeout=60).stdout.strip().split(";")[0]


def job_state(host, job: str) -> str:
    shown = host.run(["scontrol", "-o", "show", "job", job], check=False).stdout
    return next((w.split("=", 1)[1] for w in shown.split() if w.startswith("JobState=")), "")


def test_a_busy_cluster_provisions_and_a_chore_drains_a_node_waits_for_its_job_and_resumes_it(slurm_lab, tmp_path):
    """What `picluster nodes reboot|upgrade|shutdown` does in the queue around a node (the reboot
    itself needs an init: test_slurm_vm.py), and `provision` while users' jobs run."""
    from picluster.cluster import hostkeys
    from picluster.upkeep.drain import Queue

    inv = inventory(slurm_lab, tmp_path)
    assert not any(r.failed for r in provision(inv, options(slurm_lab, only=("slurm", "queue"))))
    node01 = slurm_lab.host("node01")
    job = sbatch(node01, "--nodelist=node02", "--exclusive", "--time=2", "--wrap", "sleep 20")
    deadline = time.monotonic() + 60
    while job_state(node01, job) != "RUNNING":
        assert time.monotonic() < deadline, job_state(node01, job)
        time.sleep(1)

    # provision on a busy cluster: the node running a job is not waited for nor tried.
    busy = provision(inv, options(slurm_lab, only=("slurm", "queue")))
    assert not any(r.failed for r in busy), [r.first_failure() for r in busy]
    read = items(busy[0], "queue")
    assert read["nodes"] == (Status.OK, "3 serving in partition pis: node02 allocated (running jobs)")
    assert read["srun"] == (Status.OK, "hostname ran on the 2 idle nodes (node[01,03]); node02 not tried (running jobs)")
    assert job_state(node01, job) == "RUNNING"

    hostkeys.use(hostkeys.strict(slurm_lab.known_hosts_path))
    try:
        queue = Queue.of(inv)
        said: list[str] = []
        started = time.monotonic()
        held = queue.hold(inv.node("node02"), "reboot", requeue=False, say=said.append)
        waited = time.monotonic() - started
        # Drained with the chore's reason, and back only once the job ended by itself.
        assert job_state(node01, job) == "COMPLETED" and waited > 5, (job_state(node01, job), waited)
        assert len(said) == 1 and re.fullmatch(rf"node02: drained in Slurm; waiting for job {job} \(root; time limit ends \d\d:\d\d:\d\d\)",
                                                said[0]), said
        assert scontrol_node(node01, "node02")[0] == "IDLE+DRAIN"
        assert scontrol_node(node01, "node02")[1].startswith("picluster nodes reboot [root@")
        pinned = sbatch(node01, "--nodelist=node02", "--time=1", "--wrap", "true")
        time.sleep(3)
        assert job_state(node01, pinned) == "PENDING"  # nothing starts on a drained node
        assert queue.release(held, rebooted=False, timeout=60) == "resumed in Slurm"
        assert scontrol_node(node01, "node02")[0] in ("IDLE", "ALLOCATED", "MIXED")

        # --requeue: a batch job on the node goes back to the queue at once instead of being waited for.
        long = sbatch(node01, "--nodelist=node03", "--time=5", "--wrap", "sleep 300")
        deadline = time.monotonic() + 60
        while job_state(node01, long) != "RUNNING":
            assert time.monotonic() < deadline, job_state(node01, long)
            time.sleep(1)
        said.clear()
        started = time.monotonic()
        held = queue.hold(inv.node("node03"), "upgrade", requeue=True, say=said.append)
        assert time.monotonic() - started < 60 and said == [f"node03: job {long} (root) requeued"], said
        requeued = node01.run(["scontrol", "-o", "show", "job", long]).stdout
        assert "Restarts=1" in requeued and "JobState=PENDING" in requeued, requeued
        assert queue.release(held, rebooted=False, timeout=60) == "resumed in Slurm"
        node01.run(["scancel", long])

        # A node drained by someone else, for something else, is left as it was.
        node01.run(["scontrol", "update", "nodename=node03", "state=drain", "reason=fan noise"])
        said.clear()
        held = queue.hold(inv.node("node03"), "reboot", requeue=False, say=said.append)
        assert said == ["node03: idle+drain in Slurm already (fan noise [root@" + said[0].split("[root@", 1)[-1]], said
        assert queue.release(held, rebooted=False, timeout=60).startswith("left idle+drain: fan noise [root@")
        assert scontrol_node(node01, "node03")[1].startswith("fan noise")
    finally:
        hostkeys.use(None)
        node01.run(["scontrol", "update", "nodename=node[02-03]", "state=resume"], check=False)
        node01.run(["scancel", "--user=root"], check=False)


def test_accounting_records_jobs_enforces_registered_users_and_keeps_its_password_private(slurm_lab, tmp_path):
    """`[slurm] accounting = true`: MariaDB and slurmdbd on the controller, run here without init
    (test_slurm_vm.py runs them under systemd).  Last in this module: it leaves accounting on."""
    from picluster.provision.steps.accounting import SLURMDBD_CONF, password_path

    path = inventory_file(slurm_lab, tmp_path)
    path.write_text(path.read_text() + "accounting = true\n")
    inv = load_inventory(path)
    first = provision(inv, options(slurm_lab, only=("slurm", "queue")))
    logs = "".join(slurm_lab.host("node01").run(["tail", "-n", "15", f], check=False).stdout for f in
                   ("/var/log/slurm/slurmctld.log", "/var/log/slurm/slurmdbd.log"))
    assert not any(r.failed for r in first), [r.first_failure() for r in first] + [logs]
    made = items(first[0], "slurm")
    assert made["database"][0] is Status.CHANGED and made["database"][1].startswith("slurm_acct_db and its user slurm (password: ")
    assert made["slurmdbd_conf"] == (Status.CHANGED, f"wrote {SLURMDBD_CONF} (0600, slurm)")
    assert made["registered"] == (Status.CHANGED, f"registered cluster {inv.name}, account picluster, users {inv.user} ({inv.user} an operator)")
    assert "database" not in items(first[1], "slurm")  # the controller only
    read = items(first[0], "queue")
    assert read["accounting"][0] is Status.OK and read["accounting"][1].endswith(
        "(COMPLETED); priorities by fair share (priority/multifactor)"), read["accounting"]

    # The password: made here 0600, in slurmdbd.conf 0600 owned by slurm, and nowhere else.
    secret = password_path(inv).read_text().strip()
    assert stat.S_IMODE(os.stat(password_path(inv)).st_mode) == 0o600
    assert stat.S_IMODE(os.stat(password_path(inv).parent).st_mode) == 0o700
    conf = slurm_lab.host("node01").path(SLURMDBD_CONF)
    info = os.stat(conf)
    assert stat.S_IMODE(info.st_mode) == 0o600 and str(info.st_uid) == slurm_lab.host("node01").run(["id", "-u", "slurm"]).stdout.strip()
    assert f"StoragePass={secret}\n" in conf.read_text()
    said = "\n".join(f"{i.name} {i.detail}" for r in first for s in r.steps for i in s.items)
    assert secret not in said and secret not in slurm_lab.host("node01").path("/etc/slurm/slurm.conf").read_text()
    assert secret not in slurm_lab.host("node01").run(["ps", "-eo", "args"]).stdout

    again = provision(inv, options(slurm_lab, only=("slurm", "queue")))
    assert [r.changes for r in again] == [0, 0, 0], [[(i.name, i.detail) for s in r.steps for i in s.items if i.status is Status.CHANGED]
                                                     for r in again]

    # A job through picluster is recorded; sacct on another node asks slurmdbd for it.
    job = submit(path, "--nodes", "2", "--", "hostname")
    assert wait_state(path, job, ENDED, 120) == "COMPLETED"
    recorded = slurm_lab.host("node03").run(["sacct", "--noheader", "--parsable2", "--allocations", f"--jobs={job.split(':')[1]}",
                                             "--format=JobID,User,State,NNodes"]).stdout
    assert recorded == f"{job.split(':')[1]}|{inv.user}|COMPLETED|2\n", recorded
    assert queue_states(path)[job] == "COMPLETED"
    # A user slurmdbd does not know cannot submit (AccountingStorageEnforce=associations).
    refused = slurm_lab.host("node01").run(["runuser", "-u", "nobody", "--", "sbatch", "--time=1", "--chdir=/tmp", "--wrap", "true"],
                                           check=False)
    assert refused.returncode != 0 and "Invalid account" in refused.stderr, refused.stderr
    rss = slurm_lab.host("node01").run(["ps", "-o", "rss=,comm=", "-C", "mariadbd,slurmdbd"]).stdout
    print(f"accounting on the controller (resident KiB): {' '.join(rss.split())}")


# The kind of script a university cluster's user brings (SGE's directives, their shell's set-up),
# with a body the test can read back: where it ran, and what ~/.bashrc set.
SGE_SEED = """#!/bin/bash
#$ -cwd
#$ -V
#$ -l h=node03
#$ -N seed
#$ -l mem_free=256M
#$ -o sge-$JOB_ID.out
#$ -j y
#$ -l h_rt=0:05:00
#$ -m be
#$ -M bob@example.org
source ~/.bashrc
echo "in $(pwd) on $(hostname), course $COURSE"
"""


def as_person(lab, user: str, key, command: str, node: str = "node01"):
    """`command` typed by `user` in a login shell on `node`, logged in over SSH with their own key."""
    from picluster.cluster import hostkeys
    from picluster.cluster.ssh import connect

    with connect(lab.host(node).address, user, key.private_path, 10.0, hostkeys.strict(lab.known_hosts_path)) as conn:
        return conn.run(f"bash -lc {shlex.quote(command)}", hide=True, warn=True, timeout=300, in_stream=False)


def person_states(lab, user: str, key, everyone: bool = False) -> dict[str, str]:
    """slurm:ID -> STATE as `picluster jobs` shows them to `user` on the controller."""
    done = as_person(lab, user, key, "picluster jobs" + (" --all" if everyone else ""))
    assert done.exited == 0, done.stderr
    return dict(re.findall(r"^\s*(slurm:\d+)\s+\S+\s+\S+\s+([A-Z_]+)", done.stdout, re.M))


def test_people_of_users_log_in_queue_as_themselves_and_see_and_cancel_only_their_own(slurm_lab, tmp_path):
    """[users] with accounting (left on by the test before): each person an account with one uid on
    every node, their key, a work folder on the share, a Slurm association; on the controller they
    type picluster's commands as written, with no inventory, and Slurm runs their jobs as them."""
    from picluster.lab.keys import make_keypair
    from picluster.provision.steps.users import FIRST_UID

    alice, bob = make_keypair(tmp_path / "alice", "alice@laptop"), make_keypair(tmp_path / "bob", "bob@laptop")
    path = inventory_file(slurm_lab, tmp_path)
    path.write_text(path.read_text() + f'accounting = true\n\n[users]\nalice = "{alice.public_line}"\n'
                                       f'bob = {{ key = "{bob.public_line}", uid = 2345 }}\n')
    inv = load_inventory(path)
    # Every step, as a teacher provisions a class: the packages step finds pam_slurm_adopt's
    # package on the workers (the hosts see this machine's packages: scripts/lab-deps.sh).
    first = provision(inv, options(slurm_lab))
    assert not any(r.failed for r in first), [r.first_failure() for r in first]
    assert items(first[1], "packages")["libpam-slurm-adopt"] == (Status.OK, "installed")
    assert "libpam-slurm-adopt" not in items(first[0], "packages")  # the controller stays open: people queue there
    made = items(first[0], "users")
    assert made["alice"] == (Status.CHANGED, f"made alice: account uid {FIRST_UID}, key")
    assert made["bob"] == (Status.CHANGED, "made bob: account uid 2345, key")
    assert made["work alice"] == (Status.CHANGED, "make /srv/picluster/users/alice (alice, 0700)")
    assert "work alice" not in items(first[1], "users")  # on the NFS master only
    assert items(first[0], "slurm")["registered"][1].endswith(f"users {inv.user}, alice, bob ({inv.user} an operator)")
    for name in NAMES:  # one number per person on every node: NFS and munge carry numbers
        assert slurm_lab.host(name).run(["id", "alice"]).stdout.strip() == f"uid={FIRST_UID}(alice) gid={FIRST_UID}(alice) groups={FIRST_UID}(alice)"
        assert slurm_lab.host(name).run(["id", "-u", "bob"]).stdout.strip() == "2345"
    # The second run typed as a teacher types it: nothing to change on any node.
    again = picluster("provision", "-i", path, "--known-hosts", slurm_lab.known_hosts_path, timeout=600)
    assert again.returncode == 0 and "changed" not in again.stdout and "failed" not in again.stdout, again.stdout + again.stderr
    assert len(re.findall(r"\bok\b", again.stdout)) >= 1, again.stdout
    work = slurm_lab.share / "users"
    assert {p.name: (p.stat().st_uid, stat.S_IMODE(p.stat().st_mode)) for p in work.iterdir()} == {
        inv.user: (slurm_lab.user.uid, 0o700), "alice": (FIRST_UID, 0o700), "bob": (2345, 0o700)}

    # Bob queues with plain sbatch, a CPU of node02; Alice logs in with her key and types the
    # card's command, a CPU on each of two nodes: node02 is shared by the two of them.
    held = as_person(slurm_lab, "bob", bob, "sbatch --parsable --nodes 1 --nodelist node02 --cpus-per-task 1 --time 15 "
                                            "--output /mnt/picluster/users/bob/sleeper-%j.out --wrap 'echo started; sleep 900'")
    assert held.exited == 0, held.stderr
    sleeper = f"slurm:{held.stdout.strip()}"
    deadline = time.monotonic() + 60
    while job_state(slurm_lab.host("node01"), held.stdout.strip()) != "RUNNING":
        assert time.monotonic() < deadline, "bob's job did not start"
        time.sleep(1)
    # Its output goes where his script said (his folder on the share): picluster logs reads it there.
    deadline = time.monotonic() + 30
    while (shown := as_person(slurm_lab, "bob", bob, f"picluster logs {sleeper}")).stdout != "started\n":
        assert time.monotonic() < deadline, shown.stdout + shown.stderr
        time.sleep(1)
    queued = as_person(slurm_lab, "alice", alice, "picluster submit --nodes 2 --cpus 1 --nodelist node[02-03] --time 10 -- "
                                                  "picluster run montecarlo --samples 1e7 --nodes 1")
    assert queued.exited == 0 and re.fullmatch(r"slurm:\d+\n", queued.stdout), queued.stderr
    mc = queued.stdout.strip()
    # Bob's training: the card's command (made short), data from the share everyone reads.
    if not (slurm_lab.share / "har").is_dir():
        from train_fixtures import write_tiny_har

        write_tiny_har(slurm_lab.share / "har")
    trained = as_person(slurm_lab, "bob", bob, "picluster submit --nodes 2 --time 10 -- picluster train har --layers 3 " + " ".join(SHORT_HAR))
    assert trained.exited == 0, trained.stderr
    har = trained.stdout.strip()
    # Alice's script on every node through launch, as she types it (the script in the share).
    task = slurm_lab.share / "task.py"
    task.write_text(LAUNCHED)
    os.chown(task, slurm_lab.user.uid, slurm_lab.user.gid)
    os.chmod(task, 0o644)
    queued = as_person(slurm_lab, "alice", alice, "picluster submit --nodes 3 --cpus 1 --time 10 -- picluster launch --mode each-worker "
                                                  "/mnt/picluster/task.py")
    assert queued.exited == 0, queued.stderr
    launched = queued.stdout.strip()

    mine = person_states(slurm_lab, "alice", alice)
    assert mc in mine and sleeper not in mine, mine  # her own jobs...
    assert {mc, sleeper} <= set(person_states(slurm_lab, "alice", alice, everyone=True))  # ...and with --all, everyone's
    refused = as_person(slurm_lab, "alice", alice, f"picluster cancel {sleeper}")
    assert refused.exited == 2 and refused.stderr.strip().splitlines() == [
        f"picluster: error: {sleeper} is bob's job: only its owner, or the cluster's operator ({inv.user}), can cancel it"], refused.stderr
    assert job_state(slurm_lab.host("node01"), sleeper.split(":")[1]) == "RUNNING"

    deadline = time.monotonic() + 300
    while (state := person_states(slurm_lab, "alice", alice).get(mc)) not in ENDED:
        assert time.monotonic() < deadline, state
        time.sleep(2)
    log = as_person(slurm_lab, "alice", alice, f"picluster logs {mc}")
    assert state == "COMPLETED" and log.exited == 0, log.stdout[-2000:] + log.stderr
    assert re.search(rf"^Monte-Carlo pi on 1 node\(s\) \(Slurm job {mc.split(':')[1]}'s allocation\)", log.stdout, re.M), log.stdout[-2000:]
    out = work / "alice" / f"picluster-slurm-{mc.split(':')[1]}.out"
    assert out.stat().st_uid == FIRST_UID  # written by Slurm as alice, in her folder, which bob cannot open
    assert slurm_lab.host("node01").run(["runuser", "-u", "bob", "--", "cat", str(out).replace(str(slurm_lab.share), "/mnt/picluster")],
                                        check=False).returncode != 0
    accounted = as_person(slurm_lab, "alice", alice, f"sacct --noheader --parsable2 --allocations --jobs={mc.split(':')[1]} --format=User,State,NodeList")
    assert accounted.stdout == "alice|COMPLETED|node[02-03]\n", accounted.stdout
    assert job_state(slurm_lab.host("node01"), sleeper.split(":")[1]) == "RUNNING"  # beside hers on node02 all along

    # Bob's training ran as him; its run is in his folder, not in the share's runs/.
    while (state := person_states(slurm_lab, "bob", bob).get(har)) not in ENDED:
        assert time.monotonic() < deadline + 300, state
        time.sleep(2)
    log = as_person(slurm_lab, "bob", bob, f"picluster logs {har}")
    assert state == "COMPLETED" and "Traceback" not in log.stdout, log.stdout[-3000:] + log.stderr
    assert re.search(r"^selected on validation: epoch \d+ \(val [0-9.]+%\)  test accuracy [0-9.]+%", log.stdout, re.M), log.stdout[-2000:]
    (run,) = (work / "bob" / "runs").iterdir()
    assert run.name.endswith(f"-slurm{har.split(':')[1]}") and run.stat().st_uid == 2345

    # Alice's launch: each worker's copy ran, as her, on its own node.
    while (state := person_states(slurm_lab, "alice", alice).get(launched)) not in ENDED:
        assert time.monotonic() < deadline + 600, state
        time.sleep(2)
    log = as_person(slurm_lab, "alice", alice, f"picluster logs {launched}")
    assert state == "COMPLETED" and "Traceback" not in log.stdout, log.stdout[-3000:] + log.stderr
    ran = set(re.findall(r"worker:(\d): task worker:(\d) on (node0\d)\b", log.stdout))  # streamed, then folded again
    assert sorted((a, b) for a, b, _ in ran) == [("0", "0"), ("1", "1"), ("2", "2")] and {n for *_, n in ran} == set(NAMES), log.stdout[-2000:]
    accounted = as_person(slurm_lab, "alice", alice, f"sacct --noheader --parsable2 --allocations --jobs={launched.split(':')[1]} --format=User,State")
    assert accounted.stdout == "alice|COMPLETED\n", accounted.stdout

    # Bob's SGE script as he brought it, typed in a folder of his home on the controller, which no
    # other node has: -cwd runs it in his work folder on the share, its mail is mapped and said to
    # go nowhere, and `source ~/.bashrc` reads his home on node03.
    node01, node03 = slurm_lab.host("node01"), slurm_lab.host("node03")
    node01.run(["install", "-d", "-o", "bob", "-g", "bob", "/home/bob/course"])
    node01.write_file("/home/bob/course/sge.sh", SGE_SEED)
    node03.run(["sed", "-i", "1i export COURSE=dl2026", "/home/bob/.bashrc"])  # his set-up, on the node that runs it
    queued = as_person(slurm_lab, "bob", bob, "cd ~/course && picluster submit sge.sh")
    assert queued.exited == 0, queued.stderr
    said = queued.stderr.splitlines()
    assert said[0] == ("sge.sh:2: #$ -cwd -> --chdir=/mnt/picluster/users/bob (your work folder on the share: /home/bob/course is "
                       "not on the share the nodes mount)"), said
    assert "sge.sh:10: #$ -m be -> --mail-type=BEGIN,END" in said and "sge.sh:11: #$ -M bob@example.org -> --mail-user=bob@example.org" in said
    assert ("sge.sh: mail: none will come: the cluster sends no mail ([slurm] has no mail_prog); the job runs all the same: "
            "follow it with 'picluster jobs'") in said
    seed = queued.stdout.strip()
    while (state := person_states(slurm_lab, "bob", bob).get(seed)) not in ENDED:
        assert time.monotonic() < deadline + 700, state
        time.sleep(2)
    out = (work / "bob" / f"sge-{seed.split(':')[1]}.out").read_text()
    assert state == "COMPLETED" and out == "in /mnt/picluster/users/bob on node03, course dl2026\n", (state, out)
    # A job that cannot open its output file fails before its script runs: `logs` says why and the
    # fix, to its owner from Slurm's records and the share, to the teacher from node02's own log.
    node01.write_file("/home/bob/course/lost.sh", "#!/bin/bash\n#$ -l h=node02\n#$ -o /mnt/picluster/users/bob/results/x.out\nhostname\n")
    lost = as_person(slurm_lab, "bob", bob, "cd ~/course && picluster submit lost.sh").stdout.strip()
    while (state := person_states(slurm_lab, "bob", bob).get(lost)) not in ENDED:
        assert time.monotonic() < deadline + 760, state
        time.sleep(1)
    listed = as_person(slurm_lab, "bob", bob, "picluster jobs")
    assert re.search(rf"^\s*{lost}\s+lost\s+bob\s+FAILED \(JobLaunchFailure\)", listed.stdout, re.M), listed.stdout
    assert (f"{lost} failed before its script ran (JobLaunchFailure): 'picluster logs {lost}' says why and what to do"
            in listed.stdout.splitlines()), listed.stdout
    head = f"picluster: error: {lost} FAILED at launch on node02 (JobLaunchFailure), before its script ran: "
    shown = as_person(slurm_lab, "bob", bob, f"picluster logs {lost}")
    assert shown.exited == 1 and shown.stderr == (
        f"{head}there is no folder /mnt/picluster/users/bob/results for /mnt/picluster/users/bob/results/x.out: make it "
        "(mkdir -p /mnt/picluster/users/bob/results) or give the output a folder that exists\n"), shown.stderr
    shown = picluster("logs", "-i", path, lost)
    assert shown.returncode == 1 and shown.stderr == (
        f"{head}there is no folder /mnt/picluster/users/bob/results for its stdout file (node02's slurmd: Could not open stdout "
        "file /mnt/picluster/users/bob/results/x.out: No such file or directory): make it (mkdir -p "
        "/mnt/picluster/users/bob/results) or give the output a folder that exists, and submit again\n"), shown.stderr

    # Fair share: who ran more now comes after who ran less.  Slurm 22.05 adds a running job's
    # use to its owner at each recalculation (every minute: PriorityCalcPeriod=1) and drops what
    # ran after the last one, so Alice's 30 s job counts 0 to 60 CPU-seconds; Bob's sleeper, still
    # running, adds a CPU-minute every minute and passes her within two.
    deadline = time.monotonic() + 180
    while True:
        rows = slurm_lab.host("node01").run(["sshare", "--all", "--noheader", "--parsable2", "--format=User,RawUsage,FairShare"]).stdout
        share = {u: (int(raw), float(fair)) for u, raw, fair in (line.split("|") for line in rows.splitlines()) if u in ("alice", "bob")}
        if len(share) == 2 and share["bob"][0] > max(share["alice"][0], 60):
            break
        assert time.monotonic() < deadline, rows
        time.sleep(5)
    assert share["bob"][1] < share["alice"][1], share
    print(f"fair share after the two people's jobs (raw use in CPU-seconds, factor): {share}")

    # The teacher (the inventory's user, a Slurm operator) may cancel anyone's job.
    done = picluster("cancel", "-i", path, sleeper)
    assert done.returncode == 0 and done.stdout.startswith(f"{sleeper} CANCELLED"), done.stdout + done.stderr


def test_accounting_turned_off_stops_slurmdbd_and_the_queue_serves_on(slurm_lab, tmp_path):
    """After the tests above left accounting on: `accounting = false` (or no key) stops slurmdbd,
    which slurmctld no longer sends anything, says MariaDB was left with the records, and a
    second run finds it stopped."""
    from picluster.provision.steps.accounting import SLURMDBD

    inv = inventory(slurm_lab, tmp_path)  # [slurm] without accounting
    node01 = slurm_lab.host("node01")
    assert node01.run(["sh", "-c", SLURMDBD.running()], check=False).returncode == 0  # the tests before left it up
    first = provision(inv, options(slurm_lab, only=("slurm", "queue")))
    assert not any(r.failed for r in first), [r.first_failure() for r in first]
    done = items(first[0], "slurm")
    assert done["slurmdbd"] == (Status.CHANGED, "stop slurmdbd: accounting is off ([slurm] accounting = false)"), done
    assert done["mariadb"][1].startswith("left running with the records"), done
    assert "slurmdbd" not in items(first[1], "slurm")  # the controller's only
    assert node01.run(["sh", "-c", SLURMDBD.running()], check=False).returncode != 0
    assert "AccountingStorageType" not in node01.read_file("/etc/slurm/slurm.conf")
    assert items(first[0], "queue")["srun"][0] is Status.OK  # the queue serves on, unaccounted
    again = provision(inv, options(slurm_lab, only=("slurm", "queue")))
    assert items(again[0], "slurm")["slurmdbd"] == (Status.OK, "stopped")
    assert [r.changes for r in again] == [0, 0, 0]
