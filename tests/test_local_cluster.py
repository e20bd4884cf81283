"""The embedded local cluster through the real CLI: real servers, real gRPC, real processes."""

import csv
import json
import os
import signal
import socket
import subprocess
import time

import psutil
import pytest

from conftest import ROOT, command_line, picluster, server_processes

pytestmark = pytest.mark.e2e


def wait_for(predicate, timeout=60.0, interval=0.1):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    return predicate()


def test_up_status_run_restart_down(state, tmp_path):
    # MOCK: a Pi firmware's get_throttled file (none exists here), under-voltage and throttled
    # now, for the agent this `cluster up` starts.
    mock = tmp_path / "MOCK-soc-firmware-get_throttled"
    mock.write_text("50005\n")
    up = picluster("cluster", "up", "--ps", "1", "--workers", "2", env=dict(os.environ, PICLUSTER_THROTTLED_FILE=str(mock)))
    assert up.returncode == 0, up.stderr
    servers = server_processes(state)
    # The bind shim re-executes each server once, so each task is exactly one process.
    assert len(servers) == 3

    # Every server listens on 127.0.0.1 only, never on the wildcard address.
    for proc in servers:
        listening = {c.laddr.ip for c in proc.net_connections("inet") if c.status == psutil.CONN_LISTEN}
        assert listening and listening <= {"127.0.0.1", "::ffff:127.0.0.1"}, listening

    status = picluster("cluster", "status")
    assert status.returncode == 0
    assert status.stdout.count(" up ") == 4, status.stdout  # 3 tasks and the agent

    # The node agent serves this machine's metrics; `top` shows them with the task states.
    assert len(server_processes(state, "picluster.monitor.agent")) == 1
    top = picluster("top", "--once")
    assert top.returncode == 0, top.stderr
    row = next(line for line in top.stdout.splitlines() if "localhost" in line)
    assert "3/3 up" in row and "%" in row and "ps,worker" in row
    assert "localhost under-voltage" in row and "localhost: now under-voltage, throttled" in top.stdout

    first = json.loads(picluster("run", "montecarlo", "--samples", "2e6", "--nodes", "2", "--seed", "7", "--json").stdout)
    again = json.loads(picluster("run", "montecarlo", "--samples", "2e6", "--nodes", "2", "--seed", "7", "--json").stdout)
    assert first["cluster"] == "local" and first["cluster_start_s"] == 0.0
    assert first["hits"] == again["hits"]
    assert abs(first["estimate"] - 3.141592653589793) < 5 * first["std_error"]

    too_many = picluster("run", "montecarlo", "--samples", "1e6", "--nodes", "3")
    assert too_many.returncode == 2 and "--nodes 3 is more than the 2 nodes with a TensorFlow server of the running local cluster" in too_many.stderr

    victim = max(servers, key=lambda p: " ".join(p.cmdline()).count("worker") and "--task" in p.cmdline() and p.cmdline()[p.cmdline().index("--task") + 1] == "1")
    victim.kill()
    victim.wait(10)
    status = picluster("cluster", "status")
    assert status.returncode == 3 and "down" in status.stdout

    restart = picluster("cluster", "up", "--ps", "1", "--workers", "2")
    assert restart.returncode == 0, restart.stderr
    assert "restarted 1 task(s)" in restart.stdout
    survivors = {p.pid for p in servers if p.pid != victim.pid}
    assert survivors <= {p.pid for p in server_processes(state)}

    down = picluster("cluster", "down")
    assert down.returncode == 0 and "stopped 3 task(s)" in down.stdout
    assert wait_for(lambda: not server_processes(state), timeout=10)
    assert picluster("cluster", "status").returncode == 3


def test_configured_port_taken(state):
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        result = picluster("cluster", "up", "--ps", "0", "--workers", "2", "--port", port)
    assert result.returncode == 2
    assert f"port {port}" in result.stderr and "in use" in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1
    assert not server_processes(state)


def _free_range(count: int) -> int:
    """A first port with ``count`` free ports from it (outside the ephemeral range)."""
    for base in range(21000, 30000, 97):
        try:
            socks = []
            for port in range(base, base + count):
                s = socket.socket()
                socks.append(s)
                s.bind(("127.0.0.1", port))
            return base
        except OSError:
            continue
        finally:
            for s in socks:
                s.close()
    raise AssertionError("no free port range")


def test_configured_port_places_the_tasks_and_then_the_agent(state):
    import urllib.request

    base = _free_range(4)
    up = picluster("cluster", "up", "--ps", "1", "--workers", "2", "--port", base)
    try:
        assert up.returncode == 0, up.stderr
        status = picluster("cluster", "status")
        assert status.returncode == 0, status.stdout
        cells = [line.replace("│", " ").split() for line in status.stdout.splitlines()]
        rows = {c[0]: c for c in cells if c and c[0] in ("ps:0", "worker:0", "worker:1", "agent")}
        for i, name in enumerate(("ps:0", "worker:0", "worker:1", "agent")):
            assert rows[name][2] == f"127.0.0.1:{base + i}" and rows[name][4] == "up", status.stdout
        metrics = urllib.request.urlopen(f"http://127.0.0.1:{base + 3}/metrics", timeout=10).read().decode()
        assert "node_cpu_seconds_total{" in metrics and "picluster_task_up{" in metrics
    finally:
        picluster("cluster", "down")


def start_long_run(state):
    proc = subprocess.Popen(
        [*command_line(), "run", "montecarlo", "--samples", "1e13", "--nodes", "2"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT, env=os.environ.copy(),
        # pytest started as a background job (`cmd &` without job control) passes SIGINT on ignored: undo that.
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL),
    )
    # Wait until both tasks serve (from one server process) and the coordinator is computing.
    started = wait_for(lambda: len(server_processes(state)) == 1 and
                       len(list((state / "tmp").glob("*/worker-*.ready"))) == 2, timeout=120)
    if not started:
        proc.kill()
        pytest.fail(f"servers did not start: {proc.communicate()[1]}")
    time.sleep(3)
    return proc


@pytest.fixture
def long_run(state):
    procs = []
    yield lambda: procs.append(start_long_run(state)) or procs[-1]
    for proc in procs:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)


def test_killed_coordinator_leaves_no_server(state, long_run):
    proc = long_run()
    proc.kill()
    proc.wait(10)
    assert wait_for(lambda: not server_processes(state), timeout=10), "servers outlived a SIGKILLed coordinator"


@pytest.mark.parametrize("sig,code", [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_interrupted_run_stops_its_servers(state, long_run, sig, code):
    proc = long_run()
    proc.send_signal(sig)
    _out, err = proc.communicate(timeout=30)
    assert proc.returncode == code, (proc.returncode, err[-2000:])
    assert "Traceback" not in err
    assert not server_processes(state)
    assert not any((state / "tmp").iterdir()), "temporary run directory left behind"


def test_a_temporary_cluster_serves_every_task_from_one_process_on_loopback_only(state, long_run):
    """TensorFlow imported once: one server process holds both workers' servers, each listening
    on 127.0.0.1 alone (the bind shim takes every task's port), nothing on another address."""
    long_run()
    (server,) = server_processes(state)
    (cluster_file,) = (state / "tmp").glob("*/cluster.json")
    ports = {t["port"] for t in json.loads(cluster_file.read_text())["layout"]}
    listening = {(c.laddr.ip, c.laddr.port) for c in server.net_connections(kind="inet") if c.status == psutil.CONN_LISTEN}
    assert ports == {port for _, port in listening}, (ports, listening)
    assert {ip for ip, _ in listening} <= {"127.0.0.1", "::ffff:127.0.0.1"}, listening


def test_a_task_of_a_temporary_cluster_that_cannot_serve_is_named(state):
    """worker:1's port taken while the server process starts: the error names worker:1 (ps:0 and
    worker:0, started before it, had served), and nothing of the cluster is left."""
    from picluster.cluster.exits import Exited
    from picluster.cluster.inprocess import InProcessCluster

    held = []

    def take_worker_1_port():
        (cluster_file,) = (state / "tmp").glob("*/cluster.json")
        port = next(t["port"] for t in json.loads(cluster_file.read_text())["layout"] if t["job"] == "worker" and t["index"] == 1)
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.bind(("127.0.0.1", port))
        sock.listen()
        held.append(sock)

    try:
        with pytest.raises(Exited) as failed:
            InProcessCluster.start(ps=1, workers=2, temporary=True, meanwhile=take_worker_1_port)
    finally:
        for sock in held:
            sock.close()
    line = str(failed.value)
    assert line.startswith("local cluster: localhost: worker:1 exited during start-up (exit code 1): "), line
    assert line.endswith("worker:1 error: cannot serve: Could not start gRPC server"), line
    assert not server_processes(state) and not server_processes(state, "picluster.monitor.agent")
    assert not any((state / "tmp").iterdir()), "temporary run directory left behind"


def test_sweep_writes_csv_and_table(state, tmp_path):
    out = tmp_path / "sweep.csv"
    result = picluster("run", "montecarlo", "--sweep", "1e5,3e5", "--nodes-list", "1,2", "--seed", "3", "--csv", out)
    assert result.returncode == 0, result.stderr
    rows = list(csv.DictReader(out.open()))
    assert [(r["samples"], r["nodes"]) for r in rows] == [("100000", "1"), ("300000", "1"), ("100000", "2"), ("300000", "2")]
    assert all(abs(float(r["estimate"]) - 3.14159265) < 5 * float(r["std_error"]) for r in rows)
    assert "1 node" in result.stdout and "2 nodes" in result.stdout
    assert not server_processes(state)


def test_default_command_on_temporary_cluster(state):
    result = picluster("run", "montecarlo", "--samples", "1e6", "--nodes", "2", "--seed", "1")
    assert result.returncode == 0, result.stderr
    assert "temporary local cluster" in result.stdout
    assert "cluster start" in result.stdout and "graph build" in result.stdout and "compute" in result.stdout
    assert not server_processes(state)
