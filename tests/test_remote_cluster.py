"""Servers started over SSH on test hosts (real sshd in network namespaces), used by the same jobs."""

import base64
import hashlib
import json
import math
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from picluster.cluster.nodecluster import RUN_DIR
from picluster.lab import keys

from conftest import command_line, picluster

pytestmark = pytest.mark.lab


def table_rows(text: str) -> list[list[str]]:
    """Cells of each task's row of `cluster status` as a pipe gets it: one row per line, no cell empty."""
    return [line.split() for line in text.splitlines() if re.match(r"(ps|worker|agent)\b", line)]


def picluster_processes(host) -> list[str]:
    """Command lines of picluster processes inside ``host``'s network namespace (not its sshd)."""
    pids = subprocess.run(["ip", "netns", "pids", host.netns], capture_output=True, text=True).stdout.split()
    lines = []
    for pid in pids:
        try:
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        if "picluster." in cmd:
            lines.append(cmd)
    return lines


@pytest.fixture
def lab_cluster(lab_factory, tmp_path, state):
    lab = lab_factory(3)
    path = lab.write_inventory(tmp_path / "picluster.toml")
    # The hosts share this machine's /usr and /work: the coordinator's venv runs in them too.
    path.write_text(path.read_text().replace("[cluster]\n", f"[cluster]\nvenv = \"{sys.prefix}\"\n", 1))
    yield lab, path
    picluster("cluster", "down", "-i", path)


def test_up_run_top_restart_down_over_ssh(lab_cluster):
    lab, inventory = lab_cluster
    node02, node03 = lab.host("node02"), lab.host("node03")

    up = picluster("cluster", "up", "-i", inventory)
    assert up.returncode == 0, up.stderr
    assert "started 6 process(es)" in up.stdout  # 3 servers + 3 agents

    # Each server listens on its node's cluster address only.
    listening = node02.run(["ss", "-Hltn", "sport = :2222"]).stdout
    assert f"[::ffff:{node02.address}]:2222" in listening and "*:2222" not in listening

    result = picluster("run", "montecarlo", "-i", inventory, "--samples", "4e6", "--nodes", "2", "--seed", "9", "--json")
    assert result.returncode == 0, result.stderr
    estimate = json.loads(result.stdout)
    assert estimate["cluster"] == "inventory" and estimate["nodes"] == 2
    assert abs(estimate["estimate"] - math.pi) < 5 * estimate["std_error"]
    # Every node draws, node01's ps standing in for the worker it does not run; as a user types it.
    every = picluster("run", "montecarlo", "-i", inventory, "--samples", "6e6", "--nodes", "3", "--no-live")
    assert every.returncode == 0, every.stderr
    assert "Monte-Carlo pi on 3 node(s) (" in every.stdout and "6,000,000 samples" in every.stdout, every.stdout
    assert "--nodes 4 is more than the 3 nodes with a TensorFlow server of the inventory: give --nodes 3 or fewer" in \
        picluster("run", "montecarlo", "-i", inventory, "--nodes", "4").stderr

    top = picluster("top", "-i", inventory, "--once")
    rows = {line.split()[0]: line for line in top.stdout.splitlines() if line.strip().startswith("node0")}
    assert set(rows) == {"node01", "node02", "node03"}, top.stdout
    assert all("unreachable" not in row and "%" in row for row in rows.values())
    assert rows["node03"].rstrip().endswith("worker:1 up") and rows["node01"].split()[1] == "ps,nfs"

    pid = node03.read_file(f"/home/pi/{RUN_DIR}/worker-1.pid").strip()
    node03.run(["kill", "-KILL", pid])
    try:
        psutil.Process(int(pid)).wait(10)  # the hosts share this machine's pid namespace
    except psutil.NoSuchProcess:
        pass
    status = picluster("cluster", "status", "-i", inventory)
    assert status.returncode == 3
    states = {cells[0]: cells[-1] for cells in table_rows(status.stdout)}
    assert states == {"ps:0": "up", "worker:0": "up", "worker:1": "down"}, status.stdout

    again = picluster("cluster", "up", "-i", inventory)
    assert again.returncode == 0 and "started 1 process(es)" in again.stdout, again.stdout + again.stderr

    down = picluster("cluster", "down", "-i", inventory)
    assert down.returncode == 0 and "stopped 6 process(es) on 3 node(s)" in down.stdout, down.stdout + down.stderr
    for host in (lab.host("node01"), node02, node03):
        assert picluster_processes(host) == []


def test_unreachable_node_is_named(lab_cluster):
    lab, inventory = lab_cluster
    lab.make_unreachable("node02")
    try:
        result = picluster("cluster", "up", "-i", inventory, timeout=120)
    finally:
        lab.restore("node02")
    assert result.returncode == 1
    assert "node02" in result.stderr and len(result.stderr.strip().splitlines()) == 1, result.stderr


def test_worker_killed_mid_run_names_the_node(lab_cluster):
    lab, inventory = lab_cluster
    assert picluster("cluster", "up", "-i", inventory).returncode == 0
    run = subprocess.Popen(
        [*command_line(), "run", "montecarlo", "-i", str(inventory), "--samples", "1e12",
         "--nodes", "2", "--no-live"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    try:
        node03 = lab.host("node03")
        pid = int(node03.read_file(f"/home/pi/{RUN_DIR}/worker-1.pid"))
        # The hosts share this machine's pid namespace: wait until that worker computes.
        worker = psutil.Process(pid)
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and worker.cpu_percent(interval=0.5) < 30:
            pass
        worker.kill()
        _out, err = run.communicate(timeout=60)
    finally:
        if run.poll() is None:
            run.kill()
    assert run.returncode == 1, err
    lines = [ln for ln in err.splitlines() if ln.startswith("picluster: error:")]
    assert len(lines) == 1 and "node03" in lines[0], err[-2000:]


def test_the_start_script_brings_back_what_a_reboot_took_and_down_removes_it(lab_cluster):
    """What picluster-node.service runs at boot (ExecStart=/bin/sh start.sh, as the cluster user):
    here the processes are killed and a pid file names a live stranger, as after a reboot."""
    lab, inventory = lab_cluster
    node03 = lab.host("node03")
    assert picluster("cluster", "up", "-i", inventory).returncode == 0
    run_dir = f"/home/pi/{RUN_DIR}"
    script = node03.read_file(f"{run_dir}/start.sh")
    assert "picluster.cluster.server" in script and "picluster.monitor.agent" in script
    pids = [int(node03.read_file(f"{run_dir}/{name}.pid")) for name in ("worker-1", "agent")]
    for pid in pids:
        node03.run(["kill", "-KILL", str(pid)])
    for pid in pids:
        try:
            psutil.Process(pid).wait(10)
        except psutil.NoSuchProcess:
            pass
    # Alive, the node user's, and even naming the agent's module on its command line, but not the agent
    # that was started: its pid must not count as one (its start time differs from the one recorded).
    runner = subprocess.Popen(["nsenter", "-t", str(node03.pid), "-m", "-u", "-n", "--", "runuser", "-u", "pi", "--",
                               sys.executable, "-c", "import time; time.sleep(300)", "picluster.monitor.agent"])
    try:
        stranger = _child_running(runner.pid, "picluster.monitor.agent")
        node03.write_file(f"{run_dir}/agent.pid", f"{stranger.pid}\n")
        booted = node03.run(["runuser", "-u", "pi", "--", "env", "HOME=/home/pi", "/bin/sh", f"{run_dir}/start.sh"], timeout=120)
        assert sorted(booted.stdout.split()) == ["agent", "started", "started", "worker:1"], booted.stdout
    finally:
        for proc in [*psutil.Process(runner.pid).children(recursive=True), runner]:
            proc.kill()
        runner.wait()
    deadline = time.monotonic() + 120  # the script starts them detached, as at boot: TensorFlow loads meanwhile
    while (status := picluster("cluster", "status", "-i", inventory)).returncode != 0 and time.monotonic() < deadline:
        time.sleep(1)
    assert status.returncode == 0, status.stdout  # worker:1 answers again
    top = picluster("top", "-i", inventory, "--once")
    assert "unreachable" not in next(line for line in top.stdout.splitlines() if line.strip().startswith("node03")), top.stdout

    assert picluster("cluster", "down", "-i", inventory).returncode == 0
    for host in lab.hosts:
        assert host.run(["test", "-e", f"{run_dir}/start.sh"], check=False).returncode == 1  # nothing starts at the next boot


def _child_running(parent: int, module: str, timeout: float = 30) -> psutil.Process:
    """The descendant of ``parent`` whose command line names ``module``, once it has exec'd."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for child in psutil.Process(parent).children(recursive=True):
            try:
                if module in child.cmdline():
                    return child
            except psutil.NoSuchProcess:
                continue
        time.sleep(0.05)
    raise AssertionError(f"no process of {module} under pid {parent}")


def _running(pid: int) -> bool:
    """True while the process exists and is not a zombie (the lab's hosts share this machine's PIDs)."""
    try:
        return "\nState:\tZ" not in Path(f"/proc/{pid}/status").read_text()
    except FileNotFoundError:
        return False


def test_a_node_with_a_new_host_key_is_refused_until_replaced_then_rejoins_the_running_cluster(lab_cluster, tmp_path):
    """The host-key half of a replaced card, on namespace hosts.  node03's sshd gets a new key and
    loses its tasks and run dir; the rest of the cluster keeps running."""
    lab, inventory = lab_cluster
    node03 = lab.host("node03")
    known = tmp_path / "known_hosts"
    known.write_text(lab.known_hosts_path.read_text())
    assert picluster("cluster", "up", "-i", inventory).returncode == 0
    run_dir = f"/home/pi/{RUN_DIR}"
    pids = [node03.run(["cat", f"{run_dir}/{name}.pid"]).stdout.strip() for name in ("worker-1", "agent")]
    node03.run(["kill", "-KILL", *pids])
    # SIGKILL is delivered, not yet done: a dying process may still write its log while rm walks the
    # folder, and each one's watcher shell (cluster/nodecluster.py, _detached) writes NAME.exit once it is
    # gone: rm only after every watcher has written it.
    deadline = time.monotonic() + 30
    exits = [f"{run_dir}/{name}.exit" for name in ("worker-1", "agent")]
    while (any(_running(int(pid)) for pid in pids) or node03.run(["ls", *exits], check=False).returncode != 0) and time.monotonic() < deadline:
        time.sleep(0.1)
    time.sleep(0.2)  # the watcher's last write done, the shell exits
    node03.run(["rm", "-rf", run_dir])
    new = keys.make_keypair(node03.sshd_dir / "ssh_host_ed25519_key", "root@node03-afresh")
    os.kill(node03.pid, signal.SIGHUP)  # sshd re-executes itself and reads its host key again
    time.sleep(1)

    refused = picluster("provision", "-i", inventory, "--known-hosts", known, "--only", "hostname", timeout=300)
    assert refused.returncode == 1
    assert "host key of 10." in refused.stdout + refused.stderr and "'picluster provision --replaced node03' pins the new key" in refused.stdout, refused.stdout

    fixed = picluster("provision", "-i", inventory, "--known-hosts", known, "--only", "hostname", "--replaced", "node03", timeout=600)
    assert fixed.returncode == 0, fixed.stdout + fixed.stderr
    fingerprint = "SHA256:" + base64.b64encode(hashlib.sha256(base64.b64decode(new.public_key.split()[1])).digest()).decode().rstrip("=")
    assert f"new host key ssh-ed25519 {fingerprint} pinned in {known}" in " ".join(fixed.stdout.split()), fixed.stdout
    assert "node03: started worker:1, agent" in fixed.stdout, fixed.stdout
    assert [line for line in known.read_text().splitlines() if line.startswith(node03.address + " ")] == [f"{node03.address} {new.public_key}"]
    status = picluster("cluster", "status", "-i", inventory)
    assert status.returncode == 0, status.stdout
    again = picluster("provision", "-i", inventory, "--known-hosts", known, "--only", "hostname", timeout=300)
    assert again.returncode == 0, again.stdout  # pinned for good
