"""picluster launch across four test hosts (real sshd in network namespaces): both examples with a
killed worker and a killed ps, a killed coordinator, staging by SFTP and through a share, and a
node that lacks the staged files."""

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil
import pytest
from test_remote_cluster import picluster_processes

from picluster.cluster.nodecluster import RUN_DIR
from picluster.cluster.staging import node_job_name
from picluster.util.paths import state_dir

from conftest import picluster
from launch_fixtures import EXAMPLES, job_record, kill_worker_script, wait_gone, write_script

pytestmark = pytest.mark.lab


@pytest.fixture(scope="module")
def lab_cluster(lab4, tmp_path_factory):
    """lab4 (node01 ps, node02-04 workers) with its servers up, for the module, in its own state directory."""
    folder = tmp_path_factory.mktemp("launch-lab")
    path = lab4.write_inventory(folder / "picluster.toml")
    # The hosts share this machine's /usr and /work: the coordinator's venv runs in them too.
    path.write_text(path.read_text().replace("[cluster]\n", f"[cluster]\nvenv = \"{sys.prefix}\"\n", 1))
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("PICLUSTER_STATE_DIR", str(folder / "state"))
        mp.delenv("PICLUSTER_INVENTORY", raising=False)
        # Given too little time, `cluster up` says the servers are still starting and how to wait
        # for them; they go on starting, and the command it names finds them and waits.
        hurried = picluster("cluster", "up", "-i", path, "--timeout", "1")
        assert hurried.returncode == 1 and hurried.stderr.strip().splitlines()[-1] == (
            "picluster: error: node[01-04]: not answering after 1 s (ps:0, worker:0, worker:1, worker:2: still starting); "
            "they go on starting: 'picluster cluster up --timeout 300' waits for them, 'picluster cluster down' stops them"), hurried.stderr
        up = picluster("cluster", "up", "-i", path, "--timeout", "300")
        assert up.returncode == 0, up.stderr
        assert up.stdout.strip().endswith("already up"), up.stdout  # the same servers, not started twice
        try:
            yield lab4, path
        finally:
            picluster("cluster", "down", "-i", path)
            for host in lab4.hosts:
                assert picluster_processes(host) == []


def _left(lab, hosts=None) -> list[str]:
    """The job's processes still in the hosts: tethers and the scripts they run (servers are not the job's)."""
    found = []
    for host in hosts or lab.hosts:
        for pid in subprocess.run(["ip", "netns", "pids", host.netns], capture_output=True, text=True).stdout.split():
            try:
                cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
            except OSError:
                continue
            if "picluster.cluster.tether" in cmd or any(name in cmd for name in SCRIPTS):
                found.append(cmd)
    return found


SCRIPTS = ("between_graph.py", "ps_coordinator.py", "stubborn.py", "where.py")


def _server_pid(host, name: str) -> int:
    return int(host.read_file(f"/home/pi/{RUN_DIR}/{name}.pid"))


def test_coordinator_example_survives_a_killed_worker_server(launch, lab_cluster):
    lab, inventory = lab_cluster
    run = launch("-i", inventory, "--restart-limit", "1", EXAMPLES / "ps_coordinator.py", "--steps", "3000", "--log-every", "500")
    run.wait_for("chief: step 1/3000", 180)
    # The chief listens on this machine's address on the cluster network, and only there.
    chief = next(p for p in psutil.process_iter(["cmdline"]) if any(a.endswith("ps_coordinator.py") for a in p.info["cmdline"] or [])
                 and "picluster.cluster.tether" not in p.info["cmdline"] and "launch" not in p.info["cmdline"])
    listening = {c.laddr.ip for c in chief.net_connections("inet") if c.status == psutil.CONN_LISTEN}
    assert listening and listening <= {lab.gateway, f"::ffff:{lab.gateway}"}, listening
    psutil.Process(_server_pid(lab.host("node03"), "worker-1")).kill()
    assert run.finish(240) == 0, run.text()
    assert any("worker:1 on node03 stopped answering; restarting its server (restart 1 of 1)" in ln for ln in run.err), run.text()
    job = job_record(run.job_id())
    assert job.state == "COMPLETED" and job.restarts == 1 and job.nodes == "node[01-04]"
    assert picluster("cluster", "status", "-i", inventory).returncode == 0
    assert wait_gone(lambda: _left(lab)) == []


def test_each_worker_example_survives_a_killed_worker(launch, lab_cluster):
    lab, inventory = lab_cluster
    run = launch("-i", inventory, "--mode", "each-worker", "--restart-limit", "1", EXAMPLES / "between_graph.py",
                   "--steps", "1200", "--log-every", "400")
    run.wait_for("node03: worker 1: step 1 ", 180)
    kill_worker_script("between_graph.py", 1)  # the hosts share this machine's pid namespace
    assert run.finish(240) == 0, run.text()
    assert "  node[02-04]: done: global step 1200 reached" in run.out, run.text()
    job = job_record(run.job_id())
    assert {t.label: (t.node, t.exit_codes) for t in job.tasks} == {
        "worker:0": ("node02", [0]), "worker:1": ("node03", [137, 0]), "worker:2": ("node04", [0])}
    # Without a share, each node got its own copy over SFTP.
    staged = f"/home/pi/{RUN_DIR}/jobs/{node_job_name(job.id, state_dir())}/between_graph.py"
    assert lab.host("node04").read_file(staged) == (EXAMPLES / "between_graph.py").read_text()
    assert wait_gone(lambda: _left(lab)) == []


STUBBORN = ("import signal, time\n"
            "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
            "print('ready', flush=True)\n"
            "while True:\n    time.sleep(1)\n")


def test_a_killed_coordinator_leaves_nothing_on_the_nodes(launch, lab_cluster, tmp_path):
    lab, inventory = lab_cluster
    run = launch("-i", inventory, "--mode", "each-worker", "--grace", "1", write_script(tmp_path / "stubborn.py", STUBBORN))
    for node in ("node02", "node03", "node04"):  # node04's line says nothing of the others' scripts
        run.wait_for(f"{node}: ready", 60)
    assert len(_left(lab)) == 6  # a tether and its script on each worker
    run.proc.send_signal(signal.SIGKILL)
    run.finish(10)
    # No time to stop anything: sshd closes each channel, each tether's stdin ends, and it stops its task.
    assert wait_gone(lambda: _left(lab), 30) == []
    job = job_record(run.job_id())
    assert job.state == "FAILED" and "coordinator" in job.reason


def test_a_node_cut_off_mid_job_fails_it_and_its_task_stops_itself(launch, lab_cluster, tmp_path):
    lab, inventory = lab_cluster
    run = launch("-i", inventory, "--mode", "each-worker", "--grace", "1", write_script(tmp_path / "stubborn.py", STUBBORN))
    run.wait_for("node04: ready", 60)
    cut = time.monotonic()
    lab.make_unreachable("node03")
    try:
        assert run.finish(60) == 1, run.text()
        (line,) = run.error_lines()
        assert "node03: worker:1 stopped answering; its task cannot go on without its server" in line, run.text()
        assert time.monotonic() - cut < 20  # noticed by the next probes, not waited on
        assert wait_gone(lambda: _left(lab, [lab.host("node02"), lab.host("node04")]), 15) == []
        # node03 hears neither the end of its SSH channel nor any heartbeat: its tether stops the task.
        assert wait_gone(lambda: _left(lab), 60) == []
        assert time.monotonic() - cut < 60
    finally:
        lab.restore("node03")


def test_a_node_without_the_staged_files_is_named_before_anything_starts(launch, lab_cluster, tmp_path):
    lab, inventory = lab_cluster
    node01, node03 = lab.host("node01"), lab.host("node03")
    # Something else is mounted where the share belongs: picluster stages on the share (node01's
    # export, owned by the cluster user as provision leaves it), which node03 cannot see.
    node03.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", "/mnt/picluster"])
    node01.run(["chown", lab.user.name, "/srv/picluster"])
    try:
        run = launch("-i", inventory, "--mode", "each-worker", write_script(tmp_path / "where.py", "print('started')\n"))
        assert run.finish(120) == 2, run.text()
    finally:
        node03.run(["umount", "/mnt/picluster"])
        node01.run(["rm", "-rf", "/srv/picluster/jobs"])
        node01.run(["chown", "root", "/srv/picluster"])
    (line,) = [ln for ln in run.err if ln.strip()]  # one line, nothing before it
    assert line.startswith("picluster: error: node03: staged files missing or different in the share (where.py)"), run.text()
    assert "is /mnt/picluster the share of node01?" in line
    assert not any("started" in ln for ln in run.out) and _left(lab) == []


def test_a_mounted_share_is_staged_once_for_every_node(launch, lab_cluster, tmp_path):
    """MOCK NFS: this kernel has no NFS, so one directory bind-mounted into every host stands in for
    node01's export (at /srv/picluster) and the workers' mounts of it (at /mnt/picluster)."""
    lab, inventory = lab_cluster
    share = tempfile.mkdtemp(prefix="picluster-share-", dir="/dev/shm")  # /dev is the machine's in every host
    os.chown(share, lab.user.uid, lab.user.gid)
    mounted = []
    try:
        for host, target in [(lab.host("node01"), "/srv/picluster")] + [(h, "/mnt/picluster") for h in lab.hosts[1:]]:
            host.run(["mount", "--bind", share, target])
            mounted.append((host, target))
        where = write_script(tmp_path / "where.py", "import os\nprint('cwd', os.getcwd())\n")
        run = launch("-i", inventory, "--mode", "each-worker", where)
        assert run.finish(120) == 0, run.text()
        folder = f"/mnt/picluster/jobs/{node_job_name(run.job_id(), state_dir())}"
        assert "  node[02-04]: cwd " + folder in run.out, run.text()
        assert os.listdir(share) == ["jobs"] and os.listdir(f"{share}/jobs/{node_job_name(run.job_id(), state_dir())}") == ["where.py"]
    finally:
        for host, target in mounted:
            host.run(["umount", target])
        shutil.rmtree(share, ignore_errors=True)


def test_a_killed_ps_fails_both_jobs_and_leaves_nothing_on_the_nodes(launch, lab_cluster):
    """Last in the module: its ps stays dead.  Two jobs at once, one of each mode, on node01's ps."""
    lab, inventory = lab_cluster
    coordinator = launch("-i", inventory, "--restart-limit", "3", EXAMPLES / "ps_coordinator.py", "--steps", "1000000", "--log-every", "100000")
    each = launch("-i", inventory, "--mode", "each-worker", "--restart-limit", "3", EXAMPLES / "between_graph.py",
                  "--steps", "1000000", "--log-every", "100000")
    coordinator.wait_for("chief: step 1/", 180)
    each.wait_for("node04: worker 2: step 1 ", 180)
    killed = time.monotonic()
    psutil.Process(_server_pid(lab.host("node01"), "ps-0")).kill()
    for run in (coordinator, each):
        assert run.finish(60) == 1, run.text()
        lines = run.error_lines()
        assert len(lines) == 1 and "node01: ps:0 stopped answering; the job cannot go on without its parameter server" in lines[0], run.text()
    assert time.monotonic() - killed < 20
    assert wait_gone(lambda: _left(lab)) == []
