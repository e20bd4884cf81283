"""Trust against real sshd test hosts: host keys checked on every connection, the munge key never
readable on its way, one munge key per cluster whichever machine provisions.

- An impostor (the same address answering with another host key) is refused by every command
  that connects, and its sshd's log shows no login and no session.
- An observer polling the nodes' /tmp and /var/tmp as another account throughout a
  `provision --only slurm,queue` never reads a byte of the key (and does read a file uploaded
  the way the key used to travel, so it would have).
- A second coordinator (another state directory) provisions the same cluster and every node keeps
  the first key; a node given a foreign key is repaired and named; --rotate-munge-key makes one
  new key everywhere, and Slurm runs across the nodes after each.

The CLI runs as users type it; the sshds log at VERBOSE ("Connection from", "Accepted publickey",
"Starting session: command") into each host's log file.
"""

import base64
import hashlib
import io
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from picluster.cluster.ssh import reach
from picluster.lab import Lab, keys
from picluster.lab.limits import Limits
from picluster.util.errors import ClusterError

from conftest import ROOT, one_line, picluster
from train_fixtures import TINY_MODEL, write_tiny_har

pytestmark = pytest.mark.lab

VENV = sys.prefix  # the hosts share /usr and this tree: nothing to install
NAMES = ["node01", "node02", "node03"]
KEY = "/etc/munge/munge.key"


def inventories(lab, folder):
    """The lab's inventory (venv: this one), and the same with [slurm] (controller node01)."""
    plain = lab.write_inventory(folder / "picluster.toml")
    plain.write_text(plain.read_text().replace("[cluster]\n", f'[cluster]\nvenv = "{VENV}"\n', 1))
    slurm = folder / "slurm.toml"
    slurm.write_text(plain.read_text() + '\n[slurm]\npartition = "pis"\n')
    return plain, slurm


def verbose_sshd(host, new_key: bool = False) -> int:
    """The host's sshd logs every connection and session; with ``new_key``, it presents a new host
    key: the same address now answers as an impostor.  Returns the log's length once it answers
    again (after the line of this check's own connection)."""
    config = host.sshd_dir / "sshd_config"
    if "LogLevel VERBOSE" not in config.read_text():
        config.write_text(config.read_text() + "LogLevel VERBOSE\n")
    if new_key:
        keys.make_keypair(host.sshd_dir / "ssh_host_ed25519_key", f"root@impostor-{host.name}")
    os.kill(host.pid, signal.SIGHUP)  # sshd re-executes itself: its config and key read again
    time.sleep(0.5)
    deadline = time.monotonic() + 20
    while True:
        try:
            reach(host.address, 22, 2.0).close()
            time.sleep(0.5)  # sshd logs the reset of that connection
            return host.log_path.stat().st_size
        except ClusterError:
            assert time.monotonic() < deadline, f"{host.name}'s sshd did not come back: {host.log_tail()}"
            time.sleep(0.2)


def sshd_log(host, since: int) -> str:
    return host.log_path.read_bytes()[since:].decode(errors="replace")


def ansible_ping(inventory, control_dir) -> subprocess.CompletedProcess:
    """`ansible all -m ping` with the inventory `picluster inventory --ansible` wrote, from ansible/
    (its ansible.cfg), with no SSH master connection kept from an earlier call."""
    return subprocess.run(
        [str(Path(sys.executable).with_name("ansible")), "all", "-i", str(inventory), "-m", "ping"],
        cwd=ROOT / "ansible", capture_output=True, text=True, timeout=300,
        env=dict(os.environ, ANSIBLE_NOCOLOR="1", ANSIBLE_SSH_CONTROL_PATH_DIR=str(control_dir)),
    )  # fmt: skip


def fingerprint_of(public_line: str) -> str:
    blob = base64.b64decode(public_line.split()[1])
    return "SHA256:" + base64.b64encode(hashlib.sha256(blob).digest()).decode().rstrip("=")


# -- host keys --------------------------------------------------------------------------------------

def test_an_impostor_is_refused_by_every_command_that_connects_and_nothing_reaches_it(lab_factory, tmp_path, state):
    lab = lab_factory(3)
    plain, slurm = inventories(lab, tmp_path)
    for host in lab.hosts[1:]:
        write_tiny_har(host.path("/mnt/picluster/har"))
    own = state / "known_hosts"
    # The lab pinned its hosts' keys in picluster's file (a lab made earlier at these addresses had others).
    assert sorted(own.read_text().splitlines()) == sorted(lab.known_hosts_path.read_text().splitlines())
    own.unlink()

    # First contact: each node's key is accepted, pinned and printed once.
    up = picluster("cluster", "up", "-i", plain)
    assert up.returncode == 0, up.stderr
    lab_keys = dict(line.split(" ", 1) for line in lab.known_hosts_path.read_text().splitlines())
    for host in lab.hosts:
        said = f"picluster: first contact with {host.address}: its host key ssh-ed25519 {fingerprint_of(lab_keys[host.address])} is now pinned in {own}"
        assert up.stderr.count(said) == 1, up.stderr
    assert sorted(own.read_text().splitlines()) == sorted(lab.known_hosts_path.read_text().splitlines())
    again = picluster("cluster", "up", "-i", plain)
    assert again.returncode == 0 and "first contact" not in again.stderr, again.stderr
    # The Ansible twin's inventory checks the same keys (OpenSSH, accept-new, picluster's file first).
    ansible_inv = tmp_path / "inventory.yml"
    assert picluster("inventory", "--ansible", "-i", plain, "--out", ansible_inv).returncode == 0
    pinged = ansible_ping(ansible_inv, tmp_path / "cp1")
    assert pinged.returncode == 0 and pinged.stdout.count("SUCCESS") == 3, pinged.stdout + pinged.stderr

    # Every address now answers with another key; the cluster's servers run on (launch and train
    # check them before they connect).
    since = {host.name: verbose_sshd(host, new_key=True) for host in lab.hosts}
    script = tmp_path / "hello.py"
    script.write_text("print('hello')\n")
    commands = [
        ("provision", "-i", plain, "--only", "hostname"),
        ("cluster", "up", "-i", plain),
        ("cluster", "down", "-i", plain),
        ("nodes", "reboot", "node02", "-i", plain),
        ("nodes", "upgrade", "node02", "-i", plain),
        ("nodes", "shutdown", "node02", "-i", plain, "--yes"),
        ("launch", "-i", plain, "--mode", "each-worker", "--no-live", script),
        ("train", "har", "-i", plain, "--epochs", "1", *TINY_MODEL, "--run-dir", tmp_path / "run", "--no-live"),
        ("submit", "-i", slurm, "--", "hostname"),
        ("jobs", "-i", slurm),
        ("logs", "-i", slurm, "slurm:1"),
        ("cancel", "-i", slurm, "slurm:1"),
    ]
    for args in commands:
        result = picluster(*args, timeout=300)
        line = one_line(result, 1, "host key of 10.", " changed: it offers ssh-ed25519 SHA256:", "known ssh-ed25519 SHA256:",
                        f"({own}:", "if its card was written afresh, 'picluster provision --replaced node0")
        assert "first contact" not in result.stderr, (args, line)
    refused = ansible_ping(ansible_inv, tmp_path / "cp2")
    assert refused.returncode != 0 and refused.stdout.count("UNREACHABLE") == 3, refused.stdout
    assert "REMOTE HOST IDENTIFICATION HAS CHANGED" in refused.stdout + refused.stderr, refused.stdout + refused.stderr
    assert sorted(own.read_text().splitlines()) == sorted(lab.known_hosts_path.read_text().splitlines())  # nothing pinned
    for host in lab.hosts:
        log = sshd_log(host, since[host.name])
        assert "Connection from " in log, log  # they knocked...
        assert not re.search(r"Accepted |Starting session|session opened|User child", log), log  # ...and got no further

    # The control: once the new keys are pinned, the same logs show each login and command.
    fixed = picluster("provision", "-i", plain, "--only", "hostname", "--replaced", "node[01-03]", timeout=300)
    assert fixed.returncode == 0, fixed.stdout + fixed.stderr
    for host in lab.hosts:
        new = (host.sshd_dir / "ssh_host_ed25519_key.pub").read_text()
        assert f"new host key ssh-ed25519 {fingerprint_of(new)} pinned in {own}" in " ".join(fixed.stdout.split()), fixed.stdout
        log = sshd_log(host, since[host.name])
        assert re.search(r"Accepted publickey for pi from ", log) and re.search(r"Starting session: command for pi from ", log), log
    assert picluster("cluster", "down", "-i", plain).returncode == 0


def test_a_bad_known_hosts_or_replaced_or_rotate_is_one_line_and_nothing_is_sent(lab_factory, tmp_path, state):
    lab = lab_factory(2)
    plain, slurm = inventories(lab, tmp_path)
    since = {host.name: verbose_sshd(host) for host in lab.hosts}
    bad = tmp_path / "known_hosts"
    bad.write_text(lab.known_hosts_path.read_text() + "10.0.0.9 ssh-ed25519 not*base64\n")
    cases = [
        (("provision", "-i", plain, "--known-hosts", tmp_path / "missing"), "'--known-hosts': File"),
        (("provision", "-i", plain, "--known-hosts", bad), f"{bad}, line 3: not a known_hosts entry (the key is not base64)"),
        (("inventory", "--ansible", "-i", plain, "--known-hosts", bad), f"{bad}, line 3: not a known_hosts entry"),
        (("provision", "-i", plain, "--known-hosts", tmp_path), "'--known-hosts'"),
        (("provision", "-i", plain, "--replaced", "node09"), "node09"),
        (("provision", "-i", plain, "--rotate-munge-key"), "--rotate-munge-key: the inventory has no [slurm] table"),
        (("provision", "-i", slurm, "--rotate-munge-key", "--only", "hostname"), "--rotate-munge-key: the slurm step installs the key"),
    ]
    for args, needle in cases:
        one_line(picluster(*args), 2, needle)
    (state / "known_hosts").write_text("garbage\n")  # picluster's own file, damaged by hand
    one_line(picluster("cluster", "up", "-i", plain), 2, f"{state / 'known_hosts'}, line 1: not a known_hosts entry")
    for host in lab.hosts:
        assert "Connection from " not in sshd_log(host, since[host.name])


# -- the munge key ----------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def munge_lab(lab_support, tmp_path_factory):
    """3 hosts limited as slurmd wants them (it reads cgroups at start), with the inventories."""
    lab = Lab(nodes=3, limits=Limits(cpu=0.3, memory=2**30))
    lab.up()
    try:
        folder = tmp_path_factory.mktemp("munge")
        lab.plain, lab.slurm = inventories(lab, folder)
        lab.coordinators = {name: folder / name for name in ("first", "second")}
        yield lab
    finally:
        lab.down()


def provision_as(lab, coordinator: str, *extra):
    """`picluster provision -i slurm.toml --only slurm,queue` from one coordinator's state directory."""
    env = dict(os.environ, PICLUSTER_STATE_DIR=str(lab.coordinators[coordinator]))
    env.pop("PICLUSTER_INVENTORY", None)
    result = picluster("provision", "-i", lab.slurm, "--only", "slurm,queue", *extra, env=env, timeout=600)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-2000:]
    return result.stdout


def copy_of(lab, coordinator: str) -> bytes:
    path = lab.coordinators[coordinator] / "slurm" / f"lab-{lab.id}" / "munge.key"
    assert oct(path.stat().st_mode & 0o777) == "0o400" and oct(path.parent.stat().st_mode & 0o777) == "0o700"
    return path.read_bytes()


def held(host) -> tuple[str, str, str]:
    """(the key's SHA-256, the hash recorded beside it, owner and mode) on a host."""
    sha = host.run(["sh", "-c", f"sha256sum < {KEY} | cut -d' ' -f1"]).stdout.strip()
    return sha, host.read_file(KEY + ".sha256").strip(), host.run(["stat", "-c", "%U:%G %a", KEY]).stdout.strip()


_OBSERVER = r"""
import hashlib, json, os, sys
stop, seen = sys.argv[1], {}

def files(top, depth=0):
    # What a program stages in /tmp: files there and a few levels down.  Not the trees bound in
    # from this machine (a checkout and its venv under /tmp, as in CI), which are not staging.
    try:
        entries = list(os.scandir(top))
    except OSError:
        return
    for entry in entries:
        if entry.is_dir(follow_symlinks=False):
            if depth < 3 and not os.path.ismount(entry.path):
                yield from files(entry.path, depth + 1)
        elif entry.is_file(follow_symlinks=False):
            yield entry.path

while not os.path.exists(stop):
    for top in ("/tmp", "/var/tmp"):
        for path in files(top):
            try:
                fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW)
            except OSError:
                continue
            try:
                data = os.read(fd, 1 << 16)
            except OSError:
                data = b""
            finally:
                os.close(fd)
            if data:
                seen[path + " " + hashlib.sha256(data).hexdigest()] = data.hex()
print(json.dumps(seen))
"""


class Observer:
    """Another account (nobody) on a host, reading every file it can in /tmp and /var/tmp, over and
    over, until told to stop; then what it read, file by file."""

    def __init__(self, host):
        self.host, self.stop = host, f"/tmp/.observer-stop-{os.urandom(4).hex()}"
        self.proc = subprocess.Popen(
            ["nsenter", "-t", str(host.pid), "-n", "-m", "-u", "--", "runuser", "-u", "nobody", "--",
             "/usr/bin/python3", "-c", _OBSERVER, self.stop],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

    def finish(self) -> dict[str, bytes]:
        self.host.write_file(self.stop, "")
        out, err = self.proc.communicate(timeout=60)
        assert self.proc.returncode == 0, err
        return {name: bytes.fromhex(data) for name, data in json.loads(out).items()}


def test_the_key_is_never_readable_on_its_way_and_a_second_coordinator_keeps_it(munge_lab):
    lab = munge_lab
    observers = [Observer(host) for host in lab.hosts]
    try:
        # The control: a file uploaded as the key used to be (SFTP to /tmp, the server's default
        # mode), for a second, is read by the observer.
        with lab.connect("node02") as conn:
            conn.put(io.BytesIO(b"picluster-control-0123456789"), remote="/tmp/picluster-control")
            time.sleep(1.0)
            conn.run("rm /tmp/picluster-control", hide=True)
        out = provision_as(lab, "first")
    finally:
        seen = [observer.finish() for observer in observers]
    assert any(data == b"picluster-control-0123456789" for data in seen[1].values()), sorted(seen[1])

    key = copy_of(lab, "first")
    sha = hashlib.sha256(key).hexdigest()
    read = b"".join(data for found in seen for data in found.values())
    assert not any(key[i:i + 16] in read for i in range(len(key) - 15)), "an observer read part of the munge key"
    assert all(held(host) == (sha, sha, "munge:munge 400") for host in lab.hosts)
    assert (f"node[01-03]: munge_key: installed the cluster's key (sha256 {sha[:12]}, a new key: no node held one, nor did this machine) "
            "in place of the one its package made") in " ".join(out.split()), out
    assert key.decode().strip() not in out

    # A second coordinator, with no copy: it takes the controller's key, and no node's changes.
    again = provision_as(lab, "second")
    assert copy_of(lab, "second") == key
    assert all(held(host) == (sha, sha, "munge:munge 400") for host in lab.hosts)
    assert "munge_key:" not in again, again
    assert f"node01: munge_copy: the key node01 keeps, copied to this machine: {lab.coordinators['second']}" in " ".join(again.split()), again


def test_a_node_with_a_foreign_key_is_repaired_and_named(munge_lab):
    lab = munge_lab
    provision_as(lab, "first")
    sha = hashlib.sha256(copy_of(lab, "first")).hexdigest()
    node03 = lab.host("node03")
    node03.path(KEY).write_bytes(os.urandom(128))  # another key, as a card from another cluster holds
    out = provision_as(lab, "first")
    assert f"node03: munge_key: repaired: it held another key; installed the cluster's (sha256 {sha[:12]}, kept by the controller, node01)" in out, out
    assert "node[01-02]" not in out.split("munge_key")[0].splitlines()[-1]  # only node03 is named
    assert all(held(host) == (sha, sha, "munge:munge 400") for host in lab.hosts)


def test_rotating_makes_one_new_key_on_every_node_and_slurm_runs_with_it(munge_lab):
    lab = munge_lab
    provision_as(lab, "first")
    old = copy_of(lab, "first")
    out = provision_as(lab, "first", "--rotate-munge-key", "--yes")  # the queue step ran srun on every node with it
    new = copy_of(lab, "first")
    sha = hashlib.sha256(new).hexdigest()
    assert new != old and all(held(host) == (sha, sha, "munge:munge 400") for host in lab.hosts)
    assert f"node[01-03]: munge_key: installed a new key (sha256 {sha[:12]}): rotated" in out, out
    ran = lab.host("node03").run(["srun", "--nodes=3", "--time=1", "hostname"], timeout=120)
    assert sorted(ran.stdout.split()) == NAMES
