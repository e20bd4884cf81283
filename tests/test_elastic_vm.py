"""A sync training goes on while `picluster nodes reboot` takes a worker's node down, on 3 VM hosts
(Debian 12's kernel and systemd, TCG): the run loses the node's worker, goes on with the other,
and takes it back once the node's server answers again (started at boot by the node's unit, as
`cluster up` left it); it finishes every epoch, reaches validation 96 % (the tiny set), says what
it lost, and leaves nothing running on any VM.

Long: provisioning and TensorFlow under TCG.  `./dev test --long tests/test_elastic_vm.py`; its
times are in docs/training.md.  The VMs run this machine's venv read-only (virtiofs), so
TensorFlow is not installed again.
"""

import json
import math
import re
import statistics
import sys
import time

import pytest
from test_class_vm import typed, wait_for

from picluster.jobs.har import metrics
from picluster.lab import HostOptions, Lab

from conftest import picluster, picluster_popen
from train_fixtures import TINY_MODEL, write_tiny_har
from vm_checks import inventory

pytestmark = [pytest.mark.vm, pytest.mark.long, pytest.mark.timeout(5400)]
NAMES = ["node01", "node02", "node03"]  # node01: the ps and NFS master; node02-03: worker:0-1
SHARE_HAR = "/srv/picluster/har"  # the export on node01, which every node mounts at /mnt/picluster/har
OUTLAST_S = 900  # the run's length: a TCG guest's reboot (about 3-4 min) and its servers' start after it


@pytest.fixture
def vms(vm_image, tmp_path, state):
    lab = Lab(nodes=3, vm=True, host_options={n: HostOptions(coordinator_python=True) for n in NAMES}, say=print)
    lab.up()
    path = None
    try:
        path = inventory(lab, tmp_path / "picluster.toml")
        path.write_text(path.read_text().replace("[cluster]\n", f'[cluster]\nvenv = "{sys.prefix}"\n', 1))
        yield lab, path
    finally:
        if path is not None:
            picluster("cluster", "down", "-i", path, timeout=600)
        lab.down()


def _put_tiny_set(lab: Lab, tmp_path) -> None:
    """The tiny HAR set into node01's export, owned as the share is (the nodes read it over NFS):
    copied over SFTP as the lab's user, then moved there as root."""
    local = write_tiny_har(tmp_path / "tiny") / "har.npz"
    node01 = lab.host("node01")
    with node01.connect(timeout=60) as conn:
        conn.put(str(local), "har.npz")
        home = conn.run("pwd", hide=True).stdout.strip()
    node01.run(["sh", "-c", f'install -d -o "$(stat -c %U /srv/picluster)" {SHARE_HAR} && '
                f'install -o "$(stat -c %U /srv/picluster)" -m 0644 {home}/har.npz {SHARE_HAR}/har.npz && rm -f {home}/har.npz'])
    assert node01.run(["stat", "-c", "%s", f"{SHARE_HAR}/har.npz"]).stdout.strip() == str(local.stat().st_size)


def _left_on(host) -> str:
    """Training processes left on a VM (a client inside its server would be a thread: none shows)."""
    return host.run(["sh", "-c", "pgrep -af '[p]icluster[.](jobs|cluster[.]tether)' || true"]).stdout.strip()


def test_a_sync_run_goes_on_through_a_workers_reboot_and_takes_it_back(vms, tmp_path):
    lab, path = vms
    for node in lab.hosts:  # provision one node at a time once the guests are idle (test_class_vm.py says why)
        node.run(["systemctl", "is-system-running", "--wait"], check=False, timeout=900)
    wait_for("the VMs' start-up work done", lambda: all(float(n.read_file("/proc/loadavg").split()[0]) < 1.0 for n in lab.hosts),
             900, every=15)
    done = picluster("provision", "-i", path, "--fanout", "1", timeout=3600)
    typed("picluster provision -i picluster.toml --fanout 1", done)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    _put_tiny_set(lab, tmp_path)
    done = picluster("cluster", "up", "-i", path, "--timeout", "1200", timeout=1500)
    typed("picluster cluster up -i picluster.toml --timeout 1200", done)
    assert done.returncode == 0, done.stderr

    # How long an epoch takes here (TCG): the run must outlast the reboot and the node's return.
    calibration = picluster("train", "har", "-i", path, *TINY_MODEL, "--epochs", "3", "--run-dir", tmp_path / "calibration",
                            "--json", timeout=1800)
    assert calibration.returncode == 0, calibration.stderr
    epoch_s = statistics.median(float(r["epoch_s"]) for r in metrics.read_rows(tmp_path / "calibration" / "metrics.csv"))
    epochs = min(3000, max(60, math.ceil(OUTLAST_S / epoch_s)))
    print(f"\nan epoch of 2 workers: {epoch_s:.2f} s here; the run: {epochs} epochs")

    run = tmp_path / "run"
    coordinator = picluster_popen("train", "har", "-i", path, *TINY_MODEL, "--epochs", str(epochs), "--run-dir", run)
    try:
        wait_for("two epochs and a checkpoint here", lambda: coordinator.poll() is not None or (
            len(metrics.read_rows(run / "metrics.csv")) >= 2 and any((run / "checkpoints").glob("*.index"))), 1800)
        assert coordinator.poll() is None, coordinator.communicate()[1]
        started = time.monotonic()
        rebooted = picluster("nodes", "reboot", "node03", "-i", path, "--yes", "--timeout", "1800", timeout=2400)
        typed(f"picluster nodes reboot node03 -i picluster.toml --yes  [{time.monotonic() - started:.0f} s]", rebooted)
        assert rebooted.returncode == 0, rebooted.stdout[-3000:] + rebooted.stderr[-2000:]
        assert coordinator.poll() is None, coordinator.communicate()[1]  # the run went on meanwhile
        _out, err = coordinator.communicate(timeout=3600)
    finally:
        coordinator.kill()
    print(f"\n$ picluster train har -i picluster.toml (tiny model, {epochs} epochs)  (exit {coordinator.returncode})\n"
          + "\n".join(line for line in err.splitlines() if not line.lstrip().startswith("epoch ")))
    assert coordinator.returncode == 0, err[-4000:]
    assert re.search(r"^worker:1 on node03 lost during epoch \d+ \(.+\): restart 1 of 3$", err, re.M), err[-4000:]
    assert "going on with 1 worker from the last checkpoint; worker:1 on node03 rejoins when it answers again" in err, err[-4000:]
    assert re.search(r"^worker:1 on node03 answers again: it rejoins from the checkpoint of epoch \d+ \(2 workers\)$", err, re.M), err[-4000:]
    result = json.loads((run / "result.json").read_text())
    assert result["val_accuracy"] >= 0.96
    lost = result["elastic"]
    print(f"result.json elastic: {json.dumps(lost)}")
    assert [f["task"] for f in lost["failures"]] == ["worker:1"] and lost["restarts"] == 1
    per_epoch = [lost["workers_per_epoch"][str(e)] for e in range(1, result["epochs_run"] + 1)]
    assert per_epoch[0] == 2 and 1 in per_epoch and per_epoch[-1] == 2, per_epoch  # without node03, then with it again
    assert [int(r["epoch"]) for r in metrics.read_rows(run / "metrics.csv")] == list(range(1, epochs + 1))
    log = (run / "worker-1.log").read_text()  # node03's worker trained again after its reboot
    assert log.count("replica 1: start-up") >= 2, log[-2000:]
    for host in lab.hosts:
        assert _left_on(host) == "", host.name
