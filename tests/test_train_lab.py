"""Training across test hosts: the clients run on the worker nodes over SSH, beside their servers.

The kernel has no NFS, so the share every node would mount at data_dir is stood in for by a
copy of a tiny data set written into each worker host's /mnt/picluster/har.
"""

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from test_remote_cluster import picluster_processes

from picluster.cluster.nodecluster import RUN_DIR
from picluster.jobs.har.clients import node_run_name
from picluster.jobs.har.rundir import RunDir
from picluster.model.inventory import ALLREDUCE_PORTS

from conftest import command_line, picluster
from train_fixtures import TINY_MODEL, checkpointed_step, relaunched, write_tiny_har
from train_fixtures import error_line as _error_line

pytestmark = pytest.mark.lab

HAR = "/mnt/picluster/har"
# Enough tiny epochs to outlast a 30 s cut and the restarts around it on these hosts.
EPOCHS_THROUGH_A_CUT = "600"


CLIENTS = ("picluster.jobs.har.process", "picluster.cluster.door")  # a client process, or a knocker at the server's door


def _clients(host) -> list[str]:
    """The training clients on ``host`` (not the tethers they run under, whose command lines hold theirs)."""
    return [cmd for cmd in picluster_processes(host) if any(c in cmd for c in CLIENTS) and "picluster.cluster.tether" not in cmd]


def _tethers(host) -> list[str]:
    return [cmd for cmd in picluster_processes(host) if "picluster.cluster.tether" in cmd]


def _client_pid(host) -> int:
    for pid in subprocess.run(["ip", "netns", "pids", host.netns], capture_output=True, text=True).stdout.split():
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
            if any(c.encode() in cmdline for c in CLIENTS) and b"picluster.cluster.tether" not in cmdline:  # not its tether
                return int(pid)
        except OSError:
            continue
    raise AssertionError(f"no training client in {host.name}")


def _start_training(inventory, run, *extra) -> subprocess.Popen:
    return subprocess.Popen(
        [*command_line(), "train", "har", "-i", str(inventory), "--epochs", "50", *TINY_MODEL,
         "--run-dir", str(run), "--no-live", *extra],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
    )


def _wait_for_rows(run, proc, rows: int, checkpoint: bool = False) -> None:
    """Until ``rows`` epochs are recorded here (and with ``checkpoint``, a checkpoint copied whole)."""
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        if (run / "metrics.csv").exists() and len((run / "metrics.csv").read_text().splitlines()) > rows and (
                not checkpoint or RunDir(run).has_checkpoint()):
            return
        assert proc.poll() is None, proc.communicate()[1]
        time.sleep(0.5)
    raise AssertionError(f"fewer than {rows} epochs mirrored back from the chief's node")


@pytest.fixture(scope="module")
def lab_inventory(lab4, tmp_path_factory):
    path = lab4.write_inventory(tmp_path_factory.mktemp("lab") / "picluster.toml")
    # The hosts share this machine's /usr and /work: the coordinator's venv runs in them too.
    path.write_text(path.read_text().replace("[cluster]\n", f"[cluster]\nvenv = \"{sys.prefix}\"\n", 1))
    workers = lab4.hosts[1:]
    for host in workers:
        write_tiny_har(host.path(HAR))  # stand-in for the NFS share (no NFS in this kernel)
    up = picluster("cluster", "up", "-i", path)
    assert up.returncode == 0, up.stderr
    yield lab4, path
    picluster("cluster", "down", "-i", path)
    for host in workers:
        shutil.rmtree(host.path(HAR), ignore_errors=True)
    for host in lab4.hosts:
        assert picluster_processes(host) == []


def test_montecarlo_train_and_top_across_four_hosts(lab_inventory, tmp_path, state):
    lab, inventory = lab_inventory

    mc = picluster("run", "montecarlo", "-i", inventory, "--samples", "1e8", "--nodes", "3", "--seed", "3", "--json")
    assert mc.returncode == 0, mc.stderr
    assert json.loads(mc.stdout)["nodes"] == 3

    run = tmp_path / "run"
    server_pid = {host.name: host.read_file(f"{lab.user.home}/{RUN_DIR}/worker-{task}.pid").strip() for task, host in enumerate(lab.hosts[1:])}
    result = picluster("train", "har", "-i", inventory, "--epochs", "1", *TINY_MODEL, "--run-dir", run, "--json",
                       timeout=300)
    assert result.returncode == 0, result.stderr
    assert "could not free" not in result.stderr  # the run's variables were dropped from the ps
    out = json.loads(result.stdout)
    # Every worker of the inventory trained: 1 ps + 3 workers, the clients on node02..node04.
    assert out["config"]["workers"] == 3 and out["config"]["ps"] == 1 and out["epochs_run"] == 1
    assert out["test_accuracy"] is not None and out["best_epoch"] == 1
    # The chief's records came back from node02; each client's log from its node.
    assert len((run / "metrics.csv").read_text().splitlines()) == 2
    assert list((run / "checkpoints").glob("*.index")) and list((run / "tensorboard").iterdir())
    servers = {}
    for task, host in enumerate(lab.hosts[1:]):
        log = (run / f"worker-{task}.log").read_text()
        # On inventory nodes each client runs inside its node's worker server (its door): one
        # TensorFlow runtime per node, none imported for the run, no server stopped or started.
        # Its data set held: the server read it from the share once it served, before any run.
        assert re.search(rf"replica {task}: start-up: process \d+\.\d s, data \d+\.\d s \(held\), graph \d+\.\d s, session", log), log
        assert "serving worker" not in log, log
        server_log = host.read_file(f"{lab.user.home}/{RUN_DIR}/worker-{task}.log")
        assert f"worker:{task}: the HAR data set {HAR}/har.npz read ahead (240 training windows) in " in server_log, server_log
        # ... and gave back what the job held (a server lives through many jobs on a 1 GB board).
        assert re.search(r"worker:\d: job picluster\.jobs\.har\.replica:door_job ended, status 0; memory held \d+ MiB, \d+ MiB after collecting and trimming \(\d+\.\d\d s\)\n",
                         server_log), server_log
        # The same server process cluster up started serves on (its pid file, and alive).
        assert host.read_file(f"{lab.user.home}/{RUN_DIR}/worker-{task}.pid").strip() == server_pid[host.name]
        assert host.run(["kill", "-0", server_pid[host.name]], check=False).returncode == 0
        servers[host.name] = [c for c in picluster_processes(host) if c.startswith(f"{sys.prefix}/bin/python -m picluster.cluster.server")]
        assert len(servers[host.name]) == 1, servers  # and no other started for the run
    placed = json.loads((run / "layout.json").read_text())
    assert {r["node"] for r in placed["layout"] if r["job"] == "worker"} == {"node02", "node03", "node04"}
    assert placed["worker_runtime"] == "resident"
    for host in lab.hosts:
        assert _clients(host) == []
    # The nodes' own worker servers are back: the cluster is as the run found it.
    status = picluster("cluster", "status", "-i", inventory)
    assert status.returncode == 0 and status.stdout.count(" up") >= 4, status.stdout

    top = picluster("top", "-i", inventory, "--once")
    rows = {line.split()[0]: line for line in top.stdout.splitlines() if line.strip().startswith("node0")}
    assert set(rows) == {"node01", "node02", "node03", "node04"}, top.stdout
    assert all("unreachable" not in row for row in rows.values())


def test_a_node_without_the_data_set_is_named_in_one_line(lab_inventory, tmp_path, state):
    lab, inventory = lab_inventory
    node03 = lab.host("node03")
    moved = node03.path(HAR + ".away")
    node03.path(HAR).rename(moved)
    try:
        result = picluster("train", "har", "-i", inventory, "--epochs", "1", *TINY_MODEL, "--run-dir", tmp_path / "run",
                           timeout=300)
    finally:
        moved.rename(node03.path(HAR))
    assert result.returncode == 2, result.stderr
    line = _error_line(result.stderr)
    assert "node03" in line and "picluster data har" in line, result.stderr
    assert "Traceback" not in result.stderr
    for host in lab.hosts:
        assert _clients(host) == []


def test_sync_run_stops_when_a_node_client_dies_and_resumes_on_the_nodes(lab_inventory, tmp_path, state):
    lab, inventory = lab_inventory
    run = tmp_path / "run"
    coordinator = _start_training(inventory, run, "--max-restarts", "0")  # the run stops at the loss (else it goes on: test_elastic_lab.py)
    try:
        _wait_for_rows(run, coordinator, 2)
        os.kill(_client_pid(lab.host("node04")), signal.SIGKILL)
        err = coordinator.communicate(timeout=60)[1]
    finally:
        coordinator.kill()
    assert coordinator.returncode == 1, err
    line = _error_line(err)
    assert "worker 2 on node04 died" in line and "--resume" in line, err
    for host in lab.hosts:
        assert _clients(host) == []
    # The checkpoint was mirrored back each epoch, and once more after the clients stopped: the
    # local copy names the checkpoint the chief's node (which resumes from its own copy) has.
    checkpointed = checkpointed_step(run)
    node_run = lab.host("node02").path(f"{lab.user.home}/{RUN_DIR}/runs/{node_run_name(run)}")
    assert checkpointed_step(node_run) == checkpointed
    epochs = len((run / "metrics.csv").read_text().splitlines())  # rows done + 1
    # No --inventory: the run goes back to the cluster it trained on.
    result = picluster("train", "har", "--resume", run, "--epochs", str(epochs), "--json", timeout=300)
    assert result.returncode == 0, result.stderr
    out = json.loads(result.stdout)
    assert out["resumes"][0]["global_step"] == checkpointed and out["epochs_run"] == epochs


def _connected_ports(host) -> list[int]:
    """The ports of ``host``'s established TCP connections, at either end."""
    out = subprocess.run(["ip", "netns", "exec", host.netns, "ss", "-tnH", "state", "established"], capture_output=True, text=True).stdout
    return [int(end.rpartition(":")[2]) for line in out.splitlines() for end in line.split()[2:4]]


def _server_pids(host) -> list[int]:
    out = subprocess.run(["ip", "netns", "pids", host.netns], capture_output=True, text=True).stdout.split()
    found = []
    for pid in out:
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            continue
        if cmdline.split(b"\0")[1:3] == [b"-m", b"picluster.cluster.server"]:  # not its watcher shell (nodes._detached)
            found.append(int(pid))
    return found


def test_clients_inside_the_servers_stop_when_the_coordinator_is_killed_and_the_servers_serve_on(lab_inventory, tmp_path, state):
    lab, inventory = lab_inventory
    before = {h.name: _server_pids(h) for h in lab.hosts}
    run = tmp_path / "run"
    coordinator = _start_training(inventory, run)
    try:
        _wait_for_rows(run, coordinator, 1)
        assert all(len(_clients(h)) == 1 for h in lab.hosts[1:])  # each a knocker at its server's door
        # The sync default's all-reduce: the workers' connections to each other meet at a port the firewall admits.
        for host in lab.hosts[1:]:
            ports = _connected_ports(host)
            assert [p for p in ports if ALLREDUCE_PORTS[0] <= p <= ALLREDUCE_PORTS[1]], (host.name, ports)
        logs = [host.path(f"{lab.user.home}/{RUN_DIR}/worker-{task}.log") for task, host in enumerate(lab.hosts[1:])]
        before_kill = [len(log.read_text()) for log in logs]  # what the kill ends is written after this
        coordinator.send_signal(signal.SIGKILL)
        coordinator.wait(10)
        said = coordinator.communicate()[1]  # the coordinator's own lines, for a failure's message
        # SIGKILL leaves no time to stop anything: the SSH channels close, each tether stops its
        # knocker, and each server cancels the run inside it.
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and any(_clients(h) or _tethers(h) for h in lab.hosts):
            time.sleep(0.5)
        assert [c for h in lab.hosts for c in _clients(h) + _tethers(h)] == []
        for log, start in zip(logs, before_kill):
            while time.monotonic() < deadline and "(cancelled)" not in log.read_text()[start:]:
                time.sleep(0.5)
            after = log.read_text()[start:]
            assert re.search(r"job picluster\.jobs\.har\.replica:door_job ended, status \d+ \(cancelled\); memory held \d+ MiB, .*\n$", after), (
                f"{log.name} after the kill:\n{after}\nthe coordinator said:\n{said}")
        assert {h.name: _server_pids(h) for h in lab.hosts} == before  # the same servers, serving on
        status = picluster("cluster", "status", "-i", inventory)
        assert status.returncode == 0, status.stdout
    finally:
        if coordinator.poll() is None:
            coordinator.kill()


def test_shared_clients_stand_in_for_the_servers_and_put_them_back(lab_inventory, tmp_path, state):
    """--worker-runtime shared, and a node whose server has no door (one an older picluster
    started) falls back to it: the client process serves the task, the server is started again."""
    lab, inventory = lab_inventory
    node04 = lab.host("node04")
    node04.path(f"{lab.user.home}/{RUN_DIR}/worker-2.door").unlink()
    run = tmp_path / "run"
    coordinator = _start_training(inventory, run)
    try:
        _wait_for_rows(run, coordinator, 1)
        # node04's client stands in for its worker server (the bind shim in place before the one TensorFlow import)...
        assert [c for c in picluster_processes(node04) if "picluster.cluster.server" in c] == []
        assert any("picluster.jobs.har.process" in c for c in _clients(node04))
        # ...the others run inside theirs.
        assert all(any("picluster.cluster.door" in c for c in _clients(h)) for h in lab.hosts[1:3])
        coordinator.send_signal(signal.SIGINT)
        coordinator.communicate(timeout=120)
    finally:
        if coordinator.poll() is None:
            coordinator.kill()
    log = (run / "worker-2.log").read_text()
    assert "serving worker 2 in this process" in log and re.search(r"replica 2: start-up: process \d+\.\d s", log), log
    # The run's end started node04's worker server again, with its door.
    assert len(_server_pids(node04)) == 1 and node04.path(f"{lab.user.home}/{RUN_DIR}/worker-2.door").is_socket()
    status = picluster("cluster", "status", "-i", inventory)
    assert status.returncode == 0, status.stdout


def test_the_evaluator_beside_the_coordinator_reads_the_chiefs_checkpoints_from_its_node(lab_inventory, tmp_path, state):
    """No shared file system: the chief's checkpoints and trained.jsonl come back over SFTP, and the
    evaluator here checks that its copy of the data set is the one the workers train on."""
    lab, inventory = lab_inventory
    here = tmp_path / "data"
    env = dict(os.environ, PICLUSTER_DATA_DIR=str(here))  # this machine's default data folder
    write_tiny_har(here / "har", seed=1)  # another data set than the nodes'
    other = tmp_path / "other"
    result = picluster("train", "har", "-i", inventory, "--epochs", "2", *TINY_MODEL, "--run-dir", other, "--evaluator", "coordinator",
                       env=env, timeout=300)
    assert result.returncode == 2, result.stderr
    line = _error_line(result.stderr)
    assert f"the data set here ({here / 'har'}) is not the one the workers train on" in line and "--evaluator chief" in line, line
    assert "Traceback" not in result.stderr
    for host in lab.hosts:
        assert _clients(host) == []

    write_tiny_har(here / "har")  # the nodes' own
    run = tmp_path / "run"
    result = picluster("train", "har", "-i", inventory, "--epochs", "2", *TINY_MODEL, "--run-dir", run, "--evaluator", "coordinator",
                       "--json", env=env, timeout=300)
    assert result.returncode == 0, result.stderr
    out = json.loads(result.stdout)
    assert out["epochs_run"] == 2 and out["test_accuracy"] is not None and out["config"]["evaluator"] == "coordinator"
    rows = (run / "metrics.csv").read_text().splitlines()
    assert len(rows) == 3
    # The chief on node02 saved and recorded each epoch; its evaluation ran here.
    assert len((run / "trained.jsonl").read_text().splitlines()) == 4  # its beginning, 2 epochs, its end
    assert "evaluator: test: scored once" in (run / "evaluator.log").read_text()
    assert "test: scored" not in (run / "worker-0.log").read_text()
    node_run = lab.hosts[1].path(f"{lab.user.home}/{RUN_DIR}/runs/{node_run_name(run)}")
    assert not (node_run / "metrics.csv").exists() and not (node_run / "best").exists()
    assert list((run / "best").glob("*.index")) and len(list((run / "checkpoints").glob("*.index"))) == 2
    # Each epoch's checkpoint handed over to the evaluator was moved here (none left on the node)
    # and released once read.
    assert (node_run / "to-evaluate").is_dir() and not list((node_run / "to-evaluate").iterdir())
    assert not list((run / "to-evaluate").iterdir())
    for host in lab.hosts:
        assert _clients(host) == []


def test_auto_validates_beside_the_coordinator_on_a_copy_of_the_shares_data_set(lab_inventory, tmp_path, state, monkeypatch):
    """The share is not mounted here and this machine has prepared nothing: `auto` still keeps
    validation off the workers' path, on a copy of the share's data set fetched from the NFS
    master, once (fetched again only when the share's file changes)."""
    from picluster.cluster import sharecopy
    from picluster.cluster.nodecluster import open_node
    from picluster.model.inventory import load_inventory

    lab, inventory = lab_inventory
    inv = load_inventory(inventory)
    share = lab.hosts[0].path(f"{inv.share_dir}/har")  # node01, the NFS master: the export the nodes would mount
    write_tiny_har(share)
    here = tmp_path / "data"
    env = dict(os.environ, PICLUSTER_DATA_DIR=str(here))
    try:
        run = tmp_path / "run"
        result = picluster("train", "har", "-i", inventory, "--epochs", "1", *TINY_MODEL, "--run-dir", run, "--json", env=env, timeout=300)
        assert result.returncode == 0, result.stderr
        assert json.loads(result.stdout)["config"]["evaluator"] == "coordinator"
        assert "evaluator: test: scored once" in (run / "evaluator.log").read_text()
        kept = here / "shares" / inv.nfs_master / "har" / "har.npz"
        assert kept.read_bytes() == (share / "har.npz").read_bytes()
        before = kept.stat().st_ino
        monkeypatch.setenv("PICLUSTER_DATA_DIR", str(here))
        remote = open_node(inv, inv.node(inv.nfs_master))
        try:
            assert sharecopy.copy_here(inv, remote, "har/har.npz").stat().st_ino == before  # unchanged: not fetched again
            os.utime(share / "har.npz", (1, 1))
            assert sharecopy.copy_here(inv, remote, "har/har.npz").stat().st_ino != before  # changed: fetched
        finally:
            remote.close()
    finally:
        shutil.rmtree(share, ignore_errors=True)


def test_a_sync_run_goes_on_without_its_chiefs_cut_node_and_a_killed_chief_and_takes_the_node_back(lab_inventory, tmp_path, state):
    """The chief's host's link down for 30 s, and meanwhile the next chief's client killed: the run
    goes on with the workers that answer (the chief's role moving to the lowest of them), the cut
    node rejoins once its link is back and is the chief again, and the run finishes with every
    epoch, saying what it lost; nothing is left running on any node."""
    lab, inventory = lab_inventory
    run = tmp_path / "run"
    coordinator = _start_training(inventory, run, "--epochs", EPOCHS_THROUGH_A_CUT)
    seen: set[str] = set()
    try:
        _wait_for_rows(run, coordinator, 2, checkpoint=True)  # a checkpoint here to go on from (else it starts over)
        lab.make_unreachable("node02")  # the chief's cable pulled
        cut = time.monotonic()
        relaunched(run, coordinator, seen)  # on node03 (the chief now) and node04
        os.kill(_client_pid(lab.host("node03")), signal.SIGKILL)  # a second worker lost, one after the other: the chief
        relaunched(run, coordinator, seen)
        time.sleep(max(0.0, 30 - (time.monotonic() - cut)))
        lab.restore("node02")
        err = coordinator.communicate(timeout=600)[1]
    finally:
        lab.restore("node02")
        coordinator.kill()
    assert coordinator.returncode == 0, err
    assert re.search(r"^worker:0 on node02 lost during epoch \d+ \(stopped answering\): restart 1 of 3$", err, re.M), err
    assert "going on with 2 workers from the last checkpoint; worker:0 on node02 rejoins when it answers again" in err, err
    assert re.search(r"^worker:1 on node03 lost during epoch \d+ \(.*\): restart 2 of 3$", err, re.M), err
    assert re.search(r"^worker:0 on node02 answers again: it rejoins from the checkpoint of epoch \d+ \(3 workers\)$", err, re.M), err
    result = json.loads((run / "result.json").read_text())
    assert result["val_accuracy"] >= 0.96  # the target, on this tiny set
    lost = result["elastic"]
    assert [f["task"] for f in lost["failures"]] == ["worker:0", "worker:1"] and lost["restarts"] == 2
    per_epoch = [lost["workers_per_epoch"][str(e)] for e in range(1, result["epochs_run"] + 1)]
    assert per_epoch[0] == 3 and 2 in per_epoch and per_epoch[-1] == 3, per_epoch  # without node02, then with it again
    epochs = [int(line.split(",")[0]) for line in (run / "metrics.csv").read_text().splitlines()[1:]]
    assert epochs == list(range(1, result["epochs_run"] + 1))  # every epoch once: never back to an older checkpoint
    # node02's worker trained again, as the chief: a start-up after the cut in its log, a resumed checkpoint.
    log = (run / "worker-0.log").read_text()
    assert log.count("replica 0: start-up") >= 2 and "resuming from model.ckpt-" in log.split("replica 0: start-up")[-1], log[-2000:]
    for host in lab.hosts:
        assert _clients(host) == []
