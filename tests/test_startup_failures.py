"""A server, agent or client that exits during start-up is reported within seconds with its node, its
exit status and the last lines of its log, by cluster up, run, train and launch alike."""

import os
import sys
import time

import pytest

from conftest import picluster, server_processes
from launch_fixtures import write_script
from train_fixtures import TINY_MODEL, write_tiny_har

pytestmark = pytest.mark.lab

BROKEN_TF = "ImportError: MOCK: this TensorFlow install is broken"


def _error(result) -> tuple[str, list[str]]:
    """The error line and the indented lines under it."""
    lines = result.stderr.splitlines()
    at = next(i for i, ln in enumerate(lines) if ln.startswith("picluster: error: "))
    assert not any(ln.startswith("picluster: error: ") for ln in lines[at + 1:]), result.stderr
    assert "Traceback" not in lines[at], result.stderr
    return lines[at], [ln for ln in lines[at + 1:] if ln.startswith("  ")]


def test_local_servers_that_die_at_start_are_reported_at_once(state, tmp_path):
    """MOCK: a TensorFlow that cannot be imported (a package shadowing it on PYTHONPATH) stands in
    for a broken install; the coordinator of cluster up, run and train never imports it."""
    shadow = tmp_path / "shadow" / "tensorflow"
    shadow.mkdir(parents=True)
    (shadow / "__init__.py").write_text(f'raise ImportError("{BROKEN_TF.split(": ", 1)[1]}")\n')
    env = dict(os.environ, PYTHONPATH=str(shadow.parent))
    data = write_tiny_har(tmp_path / "har")
    for args, tasks in ((["cluster", "up"], "ps:0,worker:[0-1]"),
                        (["run", "montecarlo", "--samples", "1e6", "--nodes", "2"], "worker:[0-1]"),
                        (["train", "har", "--data-dir", data, "--run-dir", tmp_path / "run", *TINY_MODEL, "--epochs", "1"], "ps:0,worker:[0-1]")):
        start = time.monotonic()
        result = picluster(*args, env=env, timeout=120)
        took = time.monotonic() - start
        assert result.returncode == 1, result.stderr
        line, details = _error(result)
        assert line == f"picluster: error: local cluster: localhost: {tasks} exited during start-up (exit code 1): {BROKEN_TF}", args
        assert details[0] == f"  last lines of the log of localhost {tasks}:" and details[-1] == f"    {BROKEN_TF}"
        assert took < 30, (args, took)  # before: up to the 120 s start-up timeout
        assert server_processes(state) == [] and server_processes(state, "picluster.monitor.agent") == []


@pytest.fixture
def broken_lab(lab_factory, tmp_path, state):
    """Three hosts (node01 ps, node02-03 workers) and two inventories: ``good`` runs this machine's
    venv, ``broken`` a venv whose python cannot import picluster on node02 and node03 (a python
    without the package, as a node that provisioning left without picluster)."""
    lab = lab_factory(3)
    good = lab.write_inventory(tmp_path / "good.toml")
    good.write_text(good.read_text().replace("[cluster]\n", f"[cluster]\nvenv = \"{sys.prefix}\"\n", 1))
    broken = lab.write_inventory(tmp_path / "broken.toml")
    broken.write_text(broken.read_text().replace("[cluster]\n", "[cluster]\nvenv = \"picluster-venv\"\n", 1))
    bare = f"/usr/bin/python{sys.version_info.major}.{sys.version_info.minor}"
    for host in lab.hosts:
        venv = host.path(f"{lab.user.home}/picluster-venv")
        if host.name == "node01":
            venv.symlink_to(sys.prefix)
        else:
            (venv / "bin").mkdir(parents=True)
            (venv / "bin" / "python").symlink_to(bare)
    yield lab, good, broken
    picluster("cluster", "down", "-i", good)


def test_nodes_without_picluster_are_named_by_cluster_up_launch_and_train(broken_lab, tmp_path):
    lab, good, broken = broken_lab
    missing = "No module named 'picluster'"

    start = time.monotonic()
    up = picluster("cluster", "up", "-i", broken, timeout=180)
    assert up.returncode == 1 and time.monotonic() - start < 30, up.stderr
    line, _ = _error(up)
    assert line.startswith("picluster: error: cluster up: node[02-03]: worker:[0-1] exited during start-up (exit code 1): "), line
    assert "'picluster.cluster.server'" in line and missing in line
    assert "; node[02-03]: agent exited during start-up (exit code 1): " in line and "'picluster.monitor.agent'" in line

    assert picluster("cluster", "up", "-i", good, timeout=180).returncode == 0  # node02-03 with this machine's venv
    start = time.monotonic()
    launch = picluster("launch", "-i", broken, "--mode", "each-worker", write_script(tmp_path / "where.py", "print('up')\n"), timeout=120)
    assert launch.returncode == 1 and time.monotonic() - start < 30, launch.stderr
    line, _ = _error(launch)
    assert "failed: node[02-03]: worker:[0-1] exited (exit code 1): " in line and "'picluster.cluster.tether'" in line and missing in line

    for host in lab.hosts[1:]:
        write_tiny_har(host.path("/mnt/picluster/har"))  # stand-in for the share (no NFS in this kernel)
    start = time.monotonic()
    train = picluster("train", "har", "-i", broken, *TINY_MODEL, "--epochs", "1", "--run-dir", tmp_path / "run", timeout=180)
    assert train.returncode == 1 and time.monotonic() - start < 60, train.stderr
    line, _ = _error(train)
    assert line.startswith("picluster: error: train har: node[02-03]: worker:[0-1] client exited during start-up (exit code 1): "), line
    assert "'picluster.cluster.tether'" in line and missing in line  # clients start under the tether, as launch's tasks do
