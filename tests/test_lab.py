"""The test lab: real SSH hosts in namespaces on this machine, and nothing left behind by them."""

import ipaddress
import json
import os
import re
import signal
import socket
import subprocess
import sys
import textwrap
import time
import tomllib
from pathlib import Path

import paramiko
import psutil
import pytest

from picluster.lab import Host, HostOptions, Lab, commands, keys, links, naming, netns, procs, reap_orphans, snapshot, teardown
from picluster.lab.registry import known_ids, state_root
from picluster.model import nodeset
from picluster.util.errors import ClusterError, UsageError

from conftest import picluster

REPO = Path(__file__).resolve().parents[1]


def cli(*args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return picluster(*args, timeout=timeout, env=dict(os.environ, COLUMNS="200"))


def lab_processes(lab: Lab) -> list[psutil.Process]:
    """Every process in the lab's namespaces, as psutil objects (safe against pid reuse)."""
    pids = procs.in_namespaces([h.net_inode for h in lab.hosts], [h.mnt_inode for h in lab.hosts])
    return [psutil.Process(pid) for pid in pids]


def running(proc: psutil.Process) -> bool:
    try:
        return proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def assert_nothing_left(lab_id: str, run_dir: Path, processes=(), inodes=((), ())) -> None:
    assert [n for n in netns.netns_names() if naming.lab_of_netns(n) == lab_id] == []
    assert [n for n in netns.link_names() if naming.lab_of_link(n) == lab_id] == []
    assert naming.nft_table(lab_id) not in links.tables()
    mounts = commands.run(["findmnt", "-rn", "-o", "TARGET,SOURCE,OPTIONS"]).stdout
    assert str(run_dir) not in mounts
    assert naming.netns(lab_id, "") not in mounts
    assert [p.pid for p in processes if running(p)] == []
    assert procs.in_namespaces(*inodes) == []
    assert not run_dir.exists()
    assert lab_id not in known_ids()


def download_seconds(lab: Lab, host: str, size: int) -> float:
    with lab.connect(host) as conn:
        conn.run("true", hide=True)  # connection set up outside the timed part
        started = time.perf_counter()
        out = conn.run(f"head -c {size} /dev/zero | base64 -w0 | head -c {size}", hide=True).stdout
        elapsed = time.perf_counter() - started
    assert len(out) == size
    return elapsed


def upload_seconds(lab: Lab, host: str, size: int) -> float:
    with lab.connect(host) as conn:
        conn.run("true", hide=True)
        sftp = conn.sftp()
        started = time.perf_counter()
        with sftp.open("/tmp/upload", "wb") as f:
            f.set_pipelined(True)
            f.write(os.urandom(size))
        elapsed = time.perf_counter() - started
        assert sftp.stat("/tmp/upload").st_size == size
    return elapsed


# -- without a lab ---------------------------------------------------------------------------


def test_pick_subnet_avoids_every_network_in_use():
    used = [ipaddress.ip_network(n) for n in ("10.213.1.0/24", "10.213.2.7/32", "192.0.2.0/24")]
    assert netns.pick_subnet(used) == ipaddress.ip_network("10.213.3.0/24")
    assert netns.pick_subnet([ipaddress.ip_network("10.0.0.0/8")]) == ipaddress.ip_network("172.31.1.0/24")
    with pytest.raises(ClusterError, match="no free /24"):
        netns.pick_subnet([ipaddress.ip_network("10.0.0.0/8"), ipaddress.ip_network("172.16.0.0/12")])


def test_names_fit_the_kernel_and_map_back_to_their_lab():
    assert naming.bridge("a1") == "pcl-a1"
    assert naming.netns("a1", "node01") == "pcl-a1-node01"
    assert len(naming.veth("abcdef", 99)) <= 15  # IFNAMSIZ - 1
    assert naming.lab_of_netns("pcl-a12-node01") == "a12"
    assert naming.lab_of_link("pcl-a12-07") == "a12"
    assert naming.lab_of_link("pcl-a12") == "a12"
    # Lab a1 must never claim lab a12's objects, nor anybody else's.
    assert naming.lab_of_link("pcl-a12-07") != "a1"
    assert naming.lab_of_link("eth0") is None
    assert naming.lab_of_netns("other-ns") is None
    with pytest.raises(UsageError, match="1-6 lowercase"):
        naming.check_id("Lab!")


def test_lab_rejects_bad_arguments_before_touching_anything():
    with pytest.raises(UsageError, match="1 to 99"):
        Lab(nodes=0)
    with pytest.raises(UsageError, match="user name"):
        Lab(nodes=2, user="Root Beer")
    with pytest.raises(UsageError, match="node07"):
        Lab(nodes=2, host_options={"node07": HostOptions()})
    with pytest.raises(UsageError, match="rate"):
        links.qdisc_args("fast", None, None)
    with pytest.raises(UsageError, match="delay"):
        links.qdisc_args(None, "soon", None)
    assert links.qdisc_args("100mbit", None, None)[:3] == ["tbf", "rate", "100mbit"]
    assert links.qdisc_args("100mbit", "0.3ms", None) == ["netem", "delay", "0.3ms", "rate", "100mbit"]


@pytest.mark.lab  # a network namespace: root
def test_a_lab_that_never_came_up_tears_down_nothing(tmp_path):
    """Lab(lab_id=X).down() must not destroy another process's lab X: its state and its namespace."""
    others = tmp_path / "labs"
    (others / "zz9").mkdir(parents=True)
    (others / "zz9" / "state.json").write_text("{}")
    namespace = naming.netns("zz9", "node01")
    netns.create_netns(namespace)
    try:
        Lab(nodes=1, lab_id="zz9", root=others).down()
        assert (others / "zz9" / "state.json").exists()
        assert namespace in netns.netns_names()
    finally:
        netns.delete_netns(namespace)


def test_snapshot_diff_reports_added_modified_deleted_and_mode(tmp_path):
    (tmp_path / "keep").write_text("same")
    (tmp_path / "edit").write_text("old")
    (tmp_path / "gone").write_text("x")
    (tmp_path / "mode").write_text("m")
    before = snapshot.take([str(tmp_path)])
    (tmp_path / "keep").write_text("same")  # rewritten, same bytes: no change
    (tmp_path / "edit").write_text("new")
    (tmp_path / "gone").unlink()
    (tmp_path / "mode").chmod(0o600)
    (tmp_path / "new").write_text("n")
    changes = snapshot.diff(before, snapshot.take([str(tmp_path)]))
    assert [str(c) for c in changes] == [
        f"modified {tmp_path}/edit",
        f"deleted {tmp_path}/gone",
        f"modified {tmp_path}/mode",
        f"added {tmp_path}/new",
    ]


def test_keypair_is_usable_by_paramiko(tmp_path):
    pair = keys.make_keypair(tmp_path / "id_ed25519", "test")
    assert (tmp_path / "id_ed25519").stat().st_mode & 0o777 == 0o600
    loaded = paramiko.Ed25519Key.from_private_key_file(str(pair.private_path))
    assert pair.public_key == f"ssh-ed25519 {loaded.get_base64()}"
    assert keys.load_keypair(pair.private_path) == pair


# -- against real hosts ----------------------------------------------------------------------


@pytest.mark.lab
def test_lab_deps_script_is_idempotent_and_leaves_no_sshd_on_the_machine():
    script = REPO / "scripts" / "lab-deps.sh"
    proc = subprocess.run(["bash", str(script)], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    listening = [
        c for c in psutil.net_connections("tcp") if c.status == psutil.CONN_LISTEN and c.laddr.port == 22
    ]
    assert listening == []  # lab hosts' sshds listen in their own namespaces only


@pytest.mark.lab
def test_hosts_have_their_own_names_addresses_and_routes(lab4):
    assert [h.name for h in lab4.hosts] == ["node01", "node02", "node03", "node04"]
    assert len({h.address for h in lab4.hosts}) == 4
    assert len({h.netns for h in lab4.hosts}) == 4
    assert lab4.gateway == str(lab4.subnet.network_address + 1)
    for host in lab4.hosts:
        assert ipaddress.ip_address(host.address) in lab4.subnet
        with lab4.connect(host) as conn:
            assert conn.run("hostname", hide=True).stdout.strip() == host.name
        assert host.run(["hostname"]).stdout.strip() == host.name
        assert host.read_file("/etc/hostname") == host.name + "\n"
        assert f"inet {host.address}/24" in host.run(["ip", "-4", "-o", "addr", "show", "dev", "eth0"]).stdout
        # The lab subnet and nothing else: no default route, no way out.
        routes = host.run(["ip", "-4", "route", "show", "table", "all"]).stdout
        assert "default" not in routes
        assert str(lab4.subnet) in routes
    assert socket.gethostname() not in {h.name for h in lab4.hosts}


@pytest.mark.lab
def test_run_key_logs_in_and_other_ways_in_are_refused(lab4, tmp_path):
    host = lab4.host("node02")
    with lab4.connect(host) as conn:
        assert conn.run("id -un", hide=True).stdout.strip() == "pi"
        assert conn.run("sudo -n id -un", hide=True).stdout.strip() == "root"

    wrong = keys.make_keypair(tmp_path / "wrong", "not-the-run-key")
    with pytest.raises(paramiko.AuthenticationException):
        lab4.connect(host, key=wrong.private_path).open()

    client = paramiko.SSHClient()
    client.load_host_keys(str(lab4.known_hosts_path))
    with pytest.raises(paramiko.AuthenticationException):
        client.connect(host.address, username="pi", password="raspberry", look_for_keys=False, allow_agent=False)
    with pytest.raises(paramiko.AuthenticationException):
        client.connect(host.address, username="root", key_filename=str(lab4.key_path), look_for_keys=False)
    client.close()


@pytest.mark.lab
def test_venv_python_runs_as_the_cluster_user(lab4):
    # Later tests start TensorFlow servers this way; the venv's interpreter may live under /root.
    root_mode = os.stat("/root").st_mode
    host = lab4.host("node03")
    before = host.manifest()
    with lab4.connect(host) as conn:
        code = "import sys, getpass; print(sys.prefix, getpass.getuser())"
        out = conn.run(f"{sys.executable} -c '{code}'", hide=True)
    assert out.stdout.split() == [sys.prefix, "pi"]
    assert os.stat("/root").st_mode == root_mode  # only the hosts see /root as enterable
    assert host.changes(since=before) == []


@pytest.mark.lab
def test_writes_stay_in_the_writing_hosts_overlay(lab4):
    real_before = snapshot.take()
    writer, others = lab4.host("node02"), [lab4.host(n) for n in ("node01", "node03", "node04")]
    others_before = {h.name: h.manifest() for h in others}
    writer_before = writer.manifest()
    with lab4.connect(writer) as conn:
        conn.run("echo probe | sudo tee /etc/picluster-lab-probe >/dev/null", hide=True)
        conn.run("echo dtparam=probe=on | sudo tee -a /boot/firmware/config.txt >/dev/null", hide=True)
        conn.run("sudo rm /etc/motd && echo private >/tmp/private-tmp", hide=True)
    try:
        changed = {(c.kind, c.path) for c in writer.changes(since=writer_before)}
        assert changed == {
            ("added", "/etc/picluster-lab-probe"),
            ("modified", "/boot/firmware/config.txt"),
            ("deleted", "/etc/motd"),
        }
        assert (writer.upper_dir("/etc") / "picluster-lab-probe").read_text() == "probe\n"
        assert writer.read_file("/boot/firmware/config.txt").endswith("dtparam=probe=on\n")
        assert writer.read_file("/tmp/private-tmp") == "private\n"
        assert not Path("/etc/picluster-lab-probe").exists()
        assert Path("/etc/motd").exists()
        assert not Path("/tmp/private-tmp").exists()
        for host in others:
            assert not host.path("/etc/picluster-lab-probe").exists()
            assert not host.path("/tmp/private-tmp").exists()
            assert "probe" not in host.read_file("/boot/firmware/config.txt")
            assert host.changes(since=others_before[host.name]) == []
        assert snapshot.diff(real_before, snapshot.take()) == []
    finally:
        writer.path("/etc/picluster-lab-probe").unlink(missing_ok=True)
        config = writer.read_file("/boot/firmware/config.txt").replace("dtparam=probe=on\n", "")
        writer.write_file("/boot/firmware/config.txt", config)
    assert {c.path for c in writer.changes(since=writer_before)} == {"/etc/motd"}


@pytest.mark.lab
def test_hosts_carry_a_mock_pi_boot_partition_and_model(lab4):
    assert not Path("/srv/picluster").exists() and not Path("/mnt/picluster").exists()
    for host in lab4.hosts:
        config = host.read_file("/boot/firmware/config.txt")
        assert config.startswith("# MOCK Raspberry Pi boot partition") and "arm_64bit=1" in config
        assert "rootwait" in host.read_file("/boot/firmware/cmdline.txt")
        assert host.read_file("/sys/firmware/devicetree/base/model") == "Raspberry Pi 4 Model B Rev 1.5\0"
        assert host.path("/srv/picluster").is_dir() and host.path("/mnt/picluster").is_dir()


@pytest.mark.lab
def test_sudo_without_password_and_a_host_whose_sudo_asks(lab_factory):
    lab = lab_factory(2, host_options={"node02": HostOptions(sudo_nopasswd=False, pi_model=None)})
    with lab.connect("node01") as conn:
        assert conn.run("sudo -n true", hide=True, warn=True).ok
    with lab.connect("node02") as conn:
        result = conn.run("sudo -n true", hide=True, warn=True)
        assert not result.ok and "password is required" in result.stderr
        assert conn.run("id -nG", hide=True).stdout.split() == ["pi", "sudo"]
    assert not lab.host("node02").path("/sys/firmware/devicetree").exists()
    assert lab.host("node01").path("/sys/firmware/devicetree/base/model").exists()


@pytest.mark.lab
def test_make_unreachable_mid_session_and_restore(lab4):
    target, other = lab4.host("node03"), lab4.host("node01")
    probe = ["timeout", "2", "bash", "-c", f"exec 3<>/dev/tcp/{target.address}/22"]
    for how in ("down", "drop"):
        conn = lab4.connect(target, timeout=2)
        conn.run("true", hide=True)
        lab4.make_unreachable(target, how=how)
        try:
            assert {s.name: s.link for s in lab4.status()}["node03"] == how
            with pytest.raises(paramiko.SSHException, match="Timeout"):
                conn.client.get_transport().open_session(timeout=2)  # an open connection hangs
            with pytest.raises((OSError, paramiko.SSHException)):
                lab4.connect(target, timeout=2).open()  # and no new one gets through
            assert other.run(probe, check=False).returncode != 0  # host to host as well
            with lab4.connect(other) as ok:  # the rest of the lab is unaffected
                assert ok.run("hostname", hide=True).stdout.strip() == "node01"
        finally:
            conn.close()
            lab4.restore(target)
        assert {s.name: s.link for s in lab4.status()}["node03"] == "up"
        with lab4.connect(target) as back:
            assert back.run("hostname", hide=True).stdout.strip() == "node03"
        assert other.run(probe, check=False).returncode == 0
    with pytest.raises(UsageError):
        lab4.make_unreachable(target, how="unplug")


@pytest.mark.lab
def test_shape_limits_the_rate_both_ways_and_delay_needs_netem(lab4):
    # 4 Mbit: about 1 s at 4mbit.  Small, so that the copies' own CPU (SSH's ciphers, here and in
    # the host's cgroup) stays well under the shaper's second beside the other tests.
    size = 500_000
    fast_down = download_seconds(lab4, "node04", size)
    lab4.shape("node04", rate="4mbit")
    try:
        assert "tbf" in {s.name: s.shaping for s in lab4.status()}["node04"]
        slow_down = download_seconds(lab4, "node04", size)
        slow_up = upload_seconds(lab4, "node04", size)
        assert slow_down > 0.8 and slow_up > 0.8, (slow_down, slow_up)
        assert download_seconds(lab4, "node02", size) < 0.5  # other hosts keep their speed
    finally:
        lab4.unshape("node04")
    assert {s.name: s.shaping for s in lab4.status()}["node04"] == ""
    assert download_seconds(lab4, "node04", size) < max(0.5, slow_down / 2), fast_down

    if lab4.netem_supported():
        lab4.shape("node04", rate=None, delay="50ms")
        try:
            started = time.perf_counter()
            socket.create_connection((lab4.host("node04").address, 22), timeout=5).close()
            assert time.perf_counter() - started >= 0.1  # SYN and SYN-ACK each wait 50 ms
        finally:
            lab4.unshape("node04")
    else:
        with pytest.raises(ClusterError, match="netem"):
            lab4.shape("node04", rate=None, delay="0.3ms")
        assert {s.name: s.shaping for s in lab4.status()}["node04"] == ""


@pytest.mark.lab
def test_inventory_describes_the_lab(lab4, tmp_path):
    path = lab4.write_inventory(tmp_path / "picluster.toml")
    data = tomllib.loads(path.read_text())
    base = lab4.hosts[0].address.rsplit(".", 1)[0]
    assert data == {
        "cluster": {
            "name": f"lab-{lab4.id}",
            "user": "pi",
            "nodes": "node[01-04]",
            "addresses": f"{base}.[11-14]",
            "subnet": str(lab4.subnet),
            "ssh_key": str(lab4.key_path),
            "tf_port": 2222,
            "share_dir": "/srv/picluster",
            "data_dir": "/mnt/picluster",
        },
        "roles": {"ps": "node01", "worker": "node[02-04]", "nfs_master": "node01"},
    }
    assert lab4.inventory_path.read_text() == path.read_text()
    from picluster.model.inventory import load_inventory

    inventory = load_inventory(path)
    assert [(n.name, n.address) for n in inventory.nodes] == [(h.name, h.address) for h in lab4.hosts]


@pytest.mark.lab
def test_two_labs_coexist(lab4, lab_factory):
    other = lab_factory(1)
    assert other.id != lab4.id and other.bridge != lab4.bridge
    assert not other.subnet.overlaps(lab4.subnet)
    with other.connect("node01") as conn:
        assert conn.run("hostname", hide=True).stdout.strip() == "node01"
    with lab4.connect("node01") as conn:
        assert conn.run("hostname", hide=True).stdout.strip() == "node01"
    assert other.host("node01").address != lab4.host("node01").address


@pytest.mark.lab
def test_down_leaves_no_namespace_link_mount_process_or_file(lab_factory):
    lab = lab_factory(2)
    lab.make_unreachable("node02", how="drop")  # so there is an nft table to remove too
    with lab.connect("node01") as conn:  # a process the cluster user leaves running
        conn.run("nohup sleep 600 >/dev/null 2>&1 &", hide=True)
    host = lab.host("node02")
    sleeper = subprocess.Popen(  # and one entered by the harness into a host's namespaces
        ["nsenter", "-t", str(host.pid), "-n", "-m", "-u", "--", "sleep", "600"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    time.sleep(0.2)
    processes = lab_processes(lab)
    names = " ".join(" ".join(p.cmdline()) for p in processes)
    assert "sleep 600" in names and "sshd" in names and len(processes) >= 4
    inodes = ([h.net_inode for h in lab.hosts], [h.mnt_inode for h in lab.hosts])
    lab.down()
    sleeper.wait(timeout=5)
    assert_nothing_left(lab.id, lab.run_dir, processes, inodes)
    lab.down()  # again: nothing to do, no error
    with pytest.raises(UsageError, match="no lab named"):
        Lab.load(lab.id)


@pytest.mark.lab
def test_an_exception_in_the_middle_of_up_leaves_nothing(lab_support, monkeypatch):
    real_start = Host.start
    started: list[Host] = []
    processes: list[psutil.Process] = []

    def start_then_fail(self, owned):
        if self.name == "node03":
            raise RuntimeError("injected failure while starting node03")
        started.append(self)
        child = real_start(self, owned)
        processes.append(psutil.Process(child.pid))
        return child

    monkeypatch.setattr(Host, "start", start_then_fail)
    lab = Lab(nodes=3)
    with pytest.raises(RuntimeError, match="injected"):
        lab.up()
    assert [h.name for h in started] == ["node01", "node02"] and len(processes) == 2
    assert_nothing_left(lab.id, lab.run_dir, processes)


@pytest.mark.lab
def test_a_host_whose_sshd_fails_is_named_and_the_lab_torn_down(lab_support, monkeypatch):
    real_config = Host._sshd_config

    def broken(self, label):
        text = real_config(self, label)
        return text + "NoSuchOption yes\n" if self.name == "node02" else text

    monkeypatch.setattr(Host, "_sshd_config", broken)
    lab = Lab(nodes=2)
    with pytest.raises(ClusterError, match=r"node02 did not start: .*NoSuchOption"):
        lab.up(timeout=20)
    assert_nothing_left(lab.id, lab.run_dir)


@pytest.mark.lab
def test_a_lab_whose_owner_was_killed_mid_up_is_cleaned_up(lab_support, tmp_path):
    lab_id = "k" + os.urandom(2).hex()
    script = textwrap.dedent(f"""
        import time
        from picluster.lab import Lab
        Lab(nodes=3, lab_id={lab_id!r}).up()
        time.sleep(600)
    """)
    child = subprocess.Popen([sys.executable, "-c", script], cwd=REPO)
    state = state_root() / lab_id / "state.json"
    deadline = time.monotonic() + 30
    pids: list[int] = []
    while time.monotonic() < deadline and not pids:
        try:
            pids = [h["pid"] for h in json.loads(state.read_text())["hosts"] if h["pid"]]
        except (FileNotFoundError, json.JSONDecodeError, KeyError):
            pass
        time.sleep(0.01)
    assert pids, "the child never started a host"
    processes = [psutil.Process(pid) for pid in pids if psutil.pid_exists(pid)]
    child.send_signal(signal.SIGKILL)  # no finally, no atexit
    child.wait(timeout=10)

    # The kernel kills the owned hosts' sshds with their owner...
    deadline = time.monotonic() + 5
    while any(running(p) for p in processes) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert [p.pid for p in processes if running(p)] == []
    # ...and the next session's fixture reaps what is left: namespaces, links, run dir.
    assert lab_id in known_ids()
    assert lab_id in reap_orphans()
    assert_nothing_left(lab_id, state_root() / lab_id, processes)


@pytest.mark.lab
def test_cli_up_status_and_down_from_another_process(lab_support, tmp_path):
    lab_id = "c" + os.urandom(2).hex()
    inventory = tmp_path / "inv" / "picluster.toml"
    try:
        up = cli("lab", "up", "--nodes", "2", "--name", lab_id, "--inventory-out", str(inventory), "--link", "300mbit")
        assert up.returncode == 0, up.stderr
        lab = Lab.load(lab_id)
        # Both ends of every link are shaped to a Pi 3B+'s Ethernet.
        assert "each host's link shaped to 300mbit both ways (tc tbf)" in up.stdout, up.stdout
        for host in lab.hosts:
            assert "tbf" in links.qdisc(host.veth) and "rate 300Mbit" in links.qdisc(host.veth), links.qdisc(host.veth)
        # Each stage as it ends, with the time so far: a VM lab is minutes of waiting otherwise.
        stages = up.stdout.splitlines()
        assert re.fullmatch(rf"lab {lab_id}: network {lab.subnet} made \(\d+ s\)", stages[0]), up.stdout
        assert re.fullmatch(r"node\[01-02\]: started \(\d+ s\)", stages[1]), up.stdout
        answered = [m[1] for line in stages[2:4] if (m := re.fullmatch(r"(node\S+): answers SSH \(\d+ s\)", line))]
        assert sorted(n for names in answered for n in nodeset.expand(names)) == ["node01", "node02"], up.stdout
        for host in lab.hosts:
            assert host.name in up.stdout and host.address in up.stdout
        assert f"ssh -F {lab.ssh_config_path} node01" in up.stdout
        assert f"inventory: {inventory}" in up.stdout
        assert tomllib.loads(inventory.read_text())["cluster"]["name"] == f"lab-{lab_id}"

        # The hosts outlived `lab up`, and OpenSSH's own client reaches them with the printed command.
        status = cli("lab", "status", "--name", lab_id)
        assert status.returncode == 0 and status.stdout.count("running") == 2, status.stdout
        ssh = subprocess.run(
            ["ssh", "-F", str(lab.ssh_config_path), "-o", "BatchMode=yes", "node02", "hostname"],
            capture_output=True, text=True, timeout=30,
        )  # fmt: skip
        assert ssh.stdout.strip() == "node02", ssh.stderr

        again = cli("lab", "up", "--nodes", "1", "--name", lab_id)
        assert again.returncode == 2 and "exists already" in again.stderr

        processes = lab_processes(lab)
        down = cli("lab", "down", "--name", lab_id)
        assert down.returncode == 0 and f"lab {lab_id}: down" in down.stdout, down.stderr
        assert_nothing_left(lab_id, lab.run_dir, processes)
        repeat = cli("lab", "down", "--name", lab_id)
        assert repeat.returncode == 0 and "nothing to tear down" in repeat.stdout
    finally:
        teardown(lab_id)

    bad = cli("lab", "up", "--nodes", "0")
    assert bad.returncode == 2 and "0" in bad.stderr
    bad = cli("lab", "down", "--name", "NOT-VALID")
    assert bad.returncode == 2 and "1-6 lowercase" in bad.stderr
    bad = cli("lab", "down", "--name", "a1", "--all")
    assert bad.returncode == 2


@pytest.mark.lab
def test_a_lab_can_keep_its_state_under_tmp(lab_factory, tmp_path):
    # Tests give picluster a private PICLUSTER_STATE_DIR under /tmp, which every host covers
    # with its own tmpfs: the host's sshd and layers must not care.
    lab = lab_factory(1, root=tmp_path / "labs")
    assert lab.run_dir.is_relative_to(tmp_path)
    # The host's /tmp is private: it shows only this checkout and its venv when they live
    # under /tmp (as in a CI clone), so servers started in the host run this same code.
    from picluster.lab.host import shared_under_tmp as _shared_under_tmp

    kept = sorted({Path(p).relative_to("/tmp").parts[0] for p in _shared_under_tmp()})
    with lab.connect("node01") as conn:
        assert conn.run("hostname; ls /tmp", hide=True).stdout.split() == ["node01", *kept]
        assert conn.run(f"test -x {sys.executable} && echo ok", hide=True).stdout.strip() == "ok"
        conn.run("echo x | sudo tee /etc/probe-under-tmp >/dev/null", hide=True)
    assert (lab.host("node01").upper_dir("/etc") / "probe-under-tmp").read_text() == "x\n"
    run_dir = lab.run_dir
    lab.down()
    assert_nothing_left(lab.id, run_dir)
    refused = Path("/var/tmp/picluster-lab-refused")
    with pytest.raises(UsageError, match="lies under /var"):  # the hosts' /var overlay would hide it
        Lab(1, root=refused).up()
    assert not refused.exists()


def test_a_state_file_of_another_shape_is_skipped_not_a_crash(tmp_path):
    # Another picluster version on this machine may write fields this one does not know; reaping
    # at the start of every test session (and `lab down --all`) must not die on them.
    lab_id = "z" + os.urandom(2).hex()
    (tmp_path / lab_id).mkdir()
    state = {
        "user": {"name": "pi", "uid": 1000, "gid": 1000},
        "subnet": "10.213.1.0/24",
        "owner": {"pid": 2**22 + 1, "started": 0.0},  # beyond pid_max: never alive
        "hosts": [{"name": "node01", "index": 1, "address": "10.213.1.11", "prefix": 24, "dir": "/nonexistent"}],
    }
    (tmp_path / lab_id / "state.json").write_text(json.dumps(state))
    with pytest.raises(ClusterError, match=f"state of lab {lab_id} has a shape"):
        Lab.load(lab_id, tmp_path)
    assert lab_id not in reap_orphans(tmp_path)
    assert (tmp_path / lab_id / "state.json").exists()  # not this version's to remove
