"""docs/first-cluster.md walked on test hosts standing in for Pis, its commands typed as written.

Three namespace hosts with real sshd stand in for the Pis, reached by the page's `.local` names:
the CLI's resolver reads a hosts file of this test's own (nss_wrapper, Debian's libnss-wrapper),
as a coordinator's resolves them through mDNS, and no resolver off this machine is asked.  The
inventory is the page's, with the lab's user, key and three names; the one key added is `venv`:
the hosts share this machine's /usr and tree, so the runtime is the coordinator's own venv and
TensorFlow is not installed again (the runtime step's own install: test_provision_lab.py).  The
hosts have no NFS (a shared kernel): node01's /srv/picluster is the same directory as every
host's /mnt/picluster, as the NFS export and its mounts are on Pis; the first training puts the
data set there, as the page says.

The commands come from the page itself, in its order, so a page that drifts fails here.  The
walk takes minutes (a 60-epoch training on two workers): `--long`; its output is in the closing
notes and docs/test-hosts.md.  The page's list of commands is checked in every run.
"""

import os
import re
import signal
import subprocess
import sys
import threading
import time
from functools import partial
from pathlib import Path

import pytest

from picluster.lab import HostOptions, Lab

from conftest import picluster, picluster_popen

ROOT = Path(__file__).resolve().parents[1]
PAGE = ROOT / "docs" / "first-cluster.md"
NAMES = ["node01", "node02", "node03"]
EPOCH_WAIT_S = 2400  # the first epoch of the card's training on three TCG VMs (measured: see the docs)


def page_commands() -> list[str]:
    """The page's indented command lines (sections 5 to 8), comments dropped, in order."""
    text = PAGE.read_text().split("## 5.", 1)[1]
    lines = [line[4:].split("  #")[0].strip() for line in text.splitlines() if line.startswith("    ")]
    return [line for line in lines if line.startswith("picluster ")]


def test_the_page_lists_the_walk_this_test_takes():  # a unit test: every run checks the page
    assert page_commands() == [
        "picluster provision --dry-run",
        "picluster provision",
        "picluster cluster up",
        "picluster run montecarlo --samples 1e8 --nodes 8",
        "picluster train har --layers 3",
        "picluster top",
    ]


def page_folder(lab: Lab, tmp_path: Path) -> tuple[Path, dict]:
    """The folder the page has the user make, with its inventory (the example's, with the lab's
    user, key and three names, and `venv` naming this machine's), and the environment the page's
    commands run in: the names resolved from a hosts file of this test's own."""
    folder = tmp_path / "pis"
    folder.mkdir()
    example = (ROOT / "examples" / "first-cluster.toml").read_text()
    inventory = (example.replace('user = "pi"', f'user = "{lab.user.name}"')
                 .replace('"node[01-04]"', '"node[01-03]"').replace('"node[01-04].local"', '"node[01-03].local"')
                 .replace('"~/.ssh/id_ed25519"', f'"{lab.key_path}"')
                 .replace("[cluster]\n", f'[cluster]\nvenv = "{sys.prefix}"\n', 1))
    (folder / "picluster.toml").write_text(inventory)
    hosts = tmp_path / "hosts"
    hosts.write_text("".join(f"{lab.host(n).address} {n}.local\n" for n in NAMES))
    env = {k: v for k, v in os.environ.items() if k != "PICLUSTER_INVENTORY"}
    env.update(LD_PRELOAD="libnss_wrapper.so", NSS_WRAPPER_HOSTS=str(hosts), NSS_WRAPPER_PASSWD="/etc/passwd",
               NSS_WRAPPER_GROUP="/etc/group", COLUMNS="120",
               PICLUSTER_DATA_DIR=str(tmp_path / "data"))  # a newcomer's machine: no data set prepared yet
    return folder, env


@pytest.fixture
def pis(lab_support, tmp_path, state):
    share = tmp_path / "share"
    share.mkdir()
    shared = HostOptions(share=str(share))
    master = HostOptions(share=str(share), exports_share=True)
    lab = Lab(nodes=3, host_options={n: master if n == NAMES[0] else shared for n in NAMES})
    lab.up()
    env = None
    try:
        os.chown(share, lab.user.uid, lab.user.gid)
        folder, env = page_folder(lab, tmp_path)
        yield lab, folder, env, share
    finally:
        if env is not None:
            picluster("cluster", "down", cwd=folder, env=env, timeout=120)
        lab.down()


def say(title: str, result: subprocess.CompletedProcess) -> None:
    """The walk's output, for the notes (pytest -s shows it)."""
    print(f"\n$ {title}  (exit {result.returncode})\n{result.stdout}{result.stderr}")


def type_line(folder: Path, env: dict, line: str, timeout: float = 1200) -> subprocess.CompletedProcess:
    """A command line of the page, typed as written in the inventory's folder; said with its time."""
    started = time.monotonic()
    done = picluster(*line.split()[1:], cwd=folder, env=env, timeout=timeout)
    say(f"{line}  [{time.monotonic() - started:.0f} s]", done)
    return done


@pytest.mark.lab
@pytest.mark.long
@pytest.mark.timeout(3600)
def test_a_newcomer_walks_the_page_from_the_inventory_to_the_cards_commands(pis):
    _lab, folder, env, share = pis
    typed = partial(type_line, folder, env)

    plan = typed("picluster provision --dry-run")
    assert plan.returncode == 0, plan.stderr
    assert "using the inventory ./picluster.toml in this folder" in plan.stderr
    assert "unreachable" not in plan.stdout and "failed" not in plan.stdout

    first = typed("picluster provision")
    assert first.returncode == 0, first.stdout[-3000:] + first.stderr[-3000:]
    again = typed("picluster provision")
    assert again.returncode == 0 and re.search(r"node\[01-03\]: +ok", again.stdout), again.stdout[-3000:]

    up = typed("picluster cluster up")
    assert up.returncode == 0, up.stderr
    for label, node in (("ps:0", "node01"), ("worker:0", "node02"), ("worker:1", "node03")):
        assert re.search(rf"^{re.escape(label)} +{node} +[\d.]+:2222 +up$", up.stdout, re.M), up.stdout

    refused = typed("picluster run montecarlo --samples 1e8 --nodes 8")  # the page's own line, on three "Pis"
    assert refused.returncode == 2
    assert refused.stderr.strip().endswith("picluster: error: --nodes 8 is more than the 3 nodes with a TensorFlow server of the inventory: "
                                           "give --nodes 3 or fewer"), refused.stderr
    mc = typed("picluster run montecarlo --samples 1e8 --nodes 3")  # "else --nodes 4 on four": three here
    assert mc.returncode == 0, mc.stderr
    assert "Monte-Carlo pi on 3 node(s) (" in mc.stdout and "100,000,000 samples" in mc.stdout, mc.stdout

    assert not (share / "har").exists()
    har = typed("picluster train har --layers 3", timeout=3000)
    assert har.returncode == 0, har.stdout[-3000:] + har.stderr[-3000:]
    # The first training found no data set where the workers read it: prepared here, copied to node01.
    assert ("picluster: no HAR data set on the cluster's share yet: preparing it from the offline HAPT recordings for "
            "node01:/srv/picluster/har/har.npz") in har.stderr
    assert re.search(r"picluster: prepared in [\d.]+ s: node01:/srv/picluster/har/har.npz, which every node reads at /mnt/picluster/har", har.stderr)
    assert (share / "har" / "har.npz").is_file()  # every host's /mnt/picluster/har
    ahead = typed("picluster data har")  # what the page offers for doing it ahead: already there now
    assert ahead.returncode == 0 and "already prepared" in ahead.stdout and "copied to" not in ahead.stdout, ahead.stdout
    assert "1 ps + 2 workers, 60 epochs" in har.stderr  # the run's line, with the progress, on stderr
    accuracy = re.search(r"test accuracy ([\d.]+)%", har.stdout)
    assert accuracy and float(accuracy.group(1)) > 90, har.stdout[-3000:]

    top = typed("picluster top --once")
    assert top.returncode == 0
    rows = {line.split()[0]: line for line in top.stdout.splitlines() if line.strip().startswith("node0")}
    assert set(rows) == set(NAMES) and rows["node01"].split()[1] == "ps,nfs", top.stdout

    jobs = typed("picluster jobs")
    assert jobs.returncode == 0 and "montecarlo" in jobs.stdout and "har" in jobs.stdout, jobs.stdout
    uptime = picluster("exec", "all", "--", "uptime", cwd=folder, env=env)
    say("picluster exec all -- uptime", uptime)
    assert uptime.returncode == 0 and all(n in uptime.stdout or "node[01-03]" in uptime.stdout for n in NAMES)
    down = typed("picluster cluster down")
    assert down.returncode == 0, down.stderr


# -- the same walk on VM test hosts -----------------------------------------------------------


@pytest.fixture
def vm_pis(vm_image, tmp_path, state):
    """Three VMs with Debian's own kernel and systemd, standing in for Pis with fresh cards: real
    NFS, firewall and units, so nothing is skipped.  They run this machine's venv read-only at its
    own path (virtiofs), as the namespace hosts do, so TensorFlow is not installed again."""
    lab = Lab(nodes=3, vm=True, host_options={n: HostOptions(coordinator_python=True) for n in NAMES}, say=print)
    lab.up()
    env = None
    try:
        folder, env = page_folder(lab, tmp_path)
        yield lab, folder, env
    finally:
        if env is not None:
            picluster("cluster", "down", cwd=folder, env=env, timeout=300)
        lab.down()


@pytest.mark.vm
@pytest.mark.long
@pytest.mark.timeout(3600)
def test_a_newcomer_walks_the_page_on_vm_hosts_to_the_cards_commands(vm_pis):
    lab, folder, env = vm_pis
    typed = partial(type_line, folder, env)

    plan = typed("picluster provision --dry-run")
    assert plan.returncode == 0 and "unreachable" not in plan.stdout, plan.stdout + plan.stderr
    first = typed("picluster provision")
    assert first.returncode == 0, first.stdout[-3000:] + first.stderr[-3000:]
    # Real kernels and systemd: the one item skipped is the NFS server's on the nodes that are not its master.
    skipped = [line for line in first.stdout.splitlines() if ": skipped (" in line]
    assert skipped == ["nfs-server server: skipped (not the NFS master, node01 is): node[02-03]"], first.stdout
    again = typed("picluster provision")
    assert again.returncode == 0 and "node[01-03]: ok" in again.stdout, again.stdout[-3000:]

    up = typed("picluster cluster up")
    if up.returncode != 0:
        # A TCG guest reads and runs TensorFlow far slower than a Pi: the first start may outlast
        # the default wait, and then the page says to run the command the message names.
        assert "still starting" in up.stderr, up.stderr
        waits = re.search(r"'(picluster cluster up --timeout \d+)'", up.stderr)
        assert waits, up.stderr
        up = typed(waits.group(1))
    assert up.returncode == 0, up.stderr
    for label, node in (("ps:0", "node01"), ("worker:0", "node02"), ("worker:1", "node03")):
        assert re.search(rf"^{re.escape(label)} +{node} +{re.escape(lab.host(node).address)}:2222 +up$", up.stdout, re.M), up.stdout

    refused = typed("picluster run montecarlo --samples 1e8 --nodes 8")
    assert refused.returncode == 2 and "give --nodes 3 or fewer" in refused.stderr, refused.stderr
    mc = typed("picluster run montecarlo --samples 1e8 --nodes 3")
    assert mc.returncode == 0, mc.stderr
    assert "Monte-Carlo pi on 3 node(s) (" in mc.stdout and "100,000,000 samples" in mc.stdout, mc.stdout

    # The card's training, typed as written: it prepares the data set, copies it to node01's export
    # and every VM reads it over NFS.  Sixty epochs of TensorFlow under TCG would take hours, so
    # the walk stops it with Ctrl-C once its first epoch is done, as a user may.
    har = picluster_popen("train", "har", "--layers", "3", cwd=folder, env=env,
                          preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    lines: list[str] = []
    reader = threading.Thread(target=lambda: lines.extend(har.stderr), daemon=True)
    reader.start()
    deadline = time.monotonic() + EPOCH_WAIT_S
    while har.poll() is None and time.monotonic() < deadline and not any(re.search(r"epoch\s+1\b", ln) for ln in lines):
        time.sleep(2)
    assert har.poll() is None, "".join(lines)[-3000:]
    har.send_signal(signal.SIGINT)
    har.wait(timeout=300)
    reader.join(10)
    out = har.stdout.read()
    err = "".join(lines)
    print(f"\n$ picluster train har --layers 3   (Ctrl-C after its first epoch; exit {har.returncode})\n{out}{err}")
    assert re.search(r"picluster: prepared in [\d.]+ s: node01:/srv/picluster/har/har.npz, which every node reads at /mnt/picluster/har", err), err
    assert any(re.search(r"epoch\s+1\b", ln) for ln in lines), err[-3000:]
    assert har.returncode == 130 and err.strip().splitlines()[-1] == "picluster: error: interrupted", err[-3000:]
    for node in NAMES:  # the data set over NFS on every VM; no training process left behind
        host = lab.host(node)
        assert host.run(["test", "-s", "/mnt/picluster/har/har.npz"], check=False).returncode == 0, node
        # A worker's client runs inside its node's server; a tether would hold any process the job started.
        left = host.run(["sh", "-c", "pgrep -af '[p]icluster[.](jobs|cluster[.]tether)' || true"]).stdout.strip()
        assert left == "", (node, left)

    status = typed("picluster cluster status")  # the servers outlive the interrupted job, ready for the next
    assert status.returncode == 0 and sum(line.split()[-1:] == ["up"] for line in status.stdout.splitlines()) == 3, status.stdout
    top = typed("picluster top --once")
    assert top.returncode == 0
    rows = {line.split()[0]: line for line in top.stdout.splitlines() if line.strip().startswith("node0")}
    assert set(rows) == set(NAMES) and rows["node01"].split()[1] == "ps,nfs", top.stdout
    down = typed("picluster cluster down")
    assert down.returncode == 0, down.stderr
