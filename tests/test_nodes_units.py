"""`picluster nodes reboot|upgrade|shutdown`: which nodes, in what order, and bad input refused
before anything is touched.  (On VM test hosts, for real: tests/test_provision_vm.py.)"""

import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
from test_cli_input import assert_one_line_usage_error

from picluster.cluster.nodecluster import RUN_DIR, START_SCRIPT, start_script
from picluster.model.clusterspec import from_inventory
from picluster.model.inventory import load_inventory
from picluster.model.nodegroups import select
from picluster.provision import templates
from picluster.provision.ansible_inventory import ansible_inventory
from picluster.upkeep import chores, health, order
from picluster.upkeep.drain import NoQueue, time_left

from conftest import ROOT, picluster

# Nothing listens on these loopback addresses: a command that tried to reach a node would fail
# with exit code 1 after a connection attempt, not with the usage error the tests expect.
INVENTORY = """\
[cluster]
name = "t"
user = "pi"
nodes = "node[01-07]"
addresses = "127.0.1.[1-6],{last}"

[roles]
ps = "node01,node02"
worker = "node[02-07]"
nfs_master = "node01"

[slurm]
controller = "node03"
"""


@pytest.fixture
def inv_path(tmp_path):
    path = tmp_path / "picluster.toml"
    path.write_text(INVENTORY.format(last="127.0.1.7"))
    return path


def test_the_nodes_others_need_go_last_and_a_wave_never_mixes_kinds(inv_path):
    inv = load_inventory(inv_path)
    names = select(inv, "all")
    one = order.waves(inv, names, parallel=1)
    assert [(w.nodes, w.rank) for w in one] == [
        (("node04",), "worker"), (("node05",), "worker"), (("node06",), "worker"), (("node07",), "worker"),
        (("node02",), "ps"), (("node03",), "slurm controller"), (("node01",), "NFS master")]
    wide = order.waves(inv, names, parallel=3)
    assert [w.nodes for w in wide] == [("node04", "node05", "node06"), ("node07",), ("node02",), ("node03",), ("node01",)]
    whole = order.waves(inv, names, parallel=None)  # shutdown: a kind at once
    assert [w.nodes for w in whole] == [("node04", "node05", "node06", "node07"), ("node02",), ("node03",), ("node01",)]
    here = order.waves(inv, names, parallel=None, here={"node05"})
    assert here[0].nodes == ("node04", "node06", "node07") and here[-1] == order.Wave(("node05",), "this machine")


def test_a_node_set_takes_nodes_in_inventory_order_and_refuses_names_it_lacks(inv_path):
    inv = load_inventory(inv_path)
    assert select(inv, "node[05,02]") == ["node02", "node05"]
    assert select(inv, "all") == [f"node{i:02d}" for i in range(1, 8)]
    with pytest.raises(Exception, match=r"names node\[09-10\], not in the inventory t \(its nodes: node\[01-07\]"):
        select(inv, "node[05,09-10]")


@pytest.mark.parametrize("args,says", [
    (["reboot", "node99"], "node set 'node99' names node99, not in the inventory t"),
    (["upgrade", "node[01-"], "node set"),
    (["reboot", "all", "--parallel", "0"], "0 is below the minimum 1"),
    (["upgrade", "all", "--parallel", "x"], "'x' is not a whole number"),
    (["shutdown", "all", "--timeout", "0"], "below the minimum"),
    (["reboot"], "Missing argument 'NODESET'"),
])
def test_bad_input_is_one_line_and_nothing_is_touched(inv_path, args, says):
    result = picluster("nodes", *args, "-i", inv_path, timeout=60)
    assert_one_line_usage_error(result)
    assert says in result.stderr
    assert result.stdout == ""  # not even the order: nothing started


def test_without_an_inventory_it_says_so(tmp_path):
    result = picluster("nodes", "reboot", "all", cwd=tmp_path, env={k: v for k, v in os.environ.items() if k != "PICLUSTER_INVENTORY"})
    assert_one_line_usage_error(result)
    assert "needs an inventory" in result.stderr


def test_the_machine_this_runs_on_is_taken_only_when_confirmed_and_last(tmp_path):
    path = tmp_path / "picluster.toml"
    path.write_text(INVENTORY.format(last="127.0.0.1"))  # node07 is this machine
    for verb in ("shutdown", "reboot", "upgrade"):
        result = picluster("nodes", verb, "node[01,07]", "-i", path, timeout=60)  # no terminal to ask on
        assert_one_line_usage_error(result)
        assert "node07 among them: the machine this command runs on (it goes last) cannot be undone" in result.stderr
        assert result.stderr.endswith("add --yes to go ahead\n") and result.stdout == ""
    for yes in ((), ("--yes",)):  # a dry run asks nothing
        result = picluster("nodes", "shutdown", "all", "-i", path, "--dry-run", *yes, timeout=60)
        assert result.returncode == 0, result.stderr
        assert result.stdout.splitlines()[-1].split() == ["5.", "node07", "this", "machine"]
    assert picluster("nodes", "shutdown", "node[01-06]", "-i", path, "--dry-run", timeout=60).returncode == 0
    assert picluster("nodes", "upgrade", "@all", "-x", "node07", "-i", path, "--dry-run", timeout=60).returncode == 0


def test_dry_run_shows_the_order_and_reaches_no_node(inv_path):
    result = picluster("nodes", "reboot", "all", "-i", inv_path, "--dry-run", "--parallel", "2", timeout=60)
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == [
        "would reboot node[01-07] in this order (2 at a time, each checked back before the next):",
        "  1. node[04-05]  worker", "  2. node[06-07]  worker", "  3. node02  ps", "  4. node03  slurm controller",
        "  5. node01  NFS master"]
    shut = picluster("nodes", "shutdown", "node[01,04-05]", "-i", inv_path, "--dry-run", timeout=60)
    assert shut.stdout.splitlines()[1:] == ["  1. node[04-05]  worker", "  2. node01  NFS master"]


def test_the_ansible_playbooks_take_the_nodes_in_the_same_order(inv_path, tmp_path):
    inv = load_inventory(inv_path)
    hosts = tmp_path / "hosts.yml"
    hosts.write_text(ansible_inventory(inv))
    ranks = {n: order.rank(inv, n, set()) for n in select(inv, "all")}
    for playbook in ("reboot.yml", "upgrade.yml", "shutdown.yml"):
        listed = subprocess.run([str(Path(sys.executable).with_name("ansible-playbook")), "-i", str(hosts), playbook, "--list-hosts"],
                                cwd=ROOT / "ansible", capture_output=True, text=True, timeout=120)
        assert listed.returncode == 0, listed.stderr
        plays = [[h for h in play.split("play #")[0].split()[1:] if h.startswith("node")] for play in listed.stdout.split("hosts (")[1:]]
        assert [sorted(play) for play in plays] == [["node04", "node05", "node06", "node07"], ["node02"], ["node03"], ["node01"]], playbook
        assert [{ranks[h] for h in play} for play in plays] == [{0}, {1}, {2}, {3}]
    # Without [slurm] the group is empty: the patterns still hold, and Ansible warns of nothing.
    toml = tmp_path / "plain.toml"
    toml.write_text(INVENTORY.format(last="127.0.1.7").split("[slurm]")[0])
    hosts.write_text(ansible_inventory(load_inventory(toml)))
    listed = subprocess.run([str(Path(sys.executable).with_name("ansible-playbook")), "-i", str(hosts), "reboot.yml", "--list-hosts"],
                            cwd=ROOT / "ansible", capture_output=True, text=True, timeout=120)
    assert listed.returncode == 0 and "WARNING" not in listed.stdout + listed.stderr, listed.stderr
    assert "hosts (5):" in listed.stdout and "hosts (0):" in listed.stdout


def test_the_start_script_is_where_the_boot_unit_looks_and_checks_what_each_pid_runs(inv_path):
    inv = load_inventory(inv_path)
    node = inv.node("node02")
    tasks = [t for t in from_inventory(inv).tasks if t.node == "node02"]
    script = start_script(inv, node, tasks)
    # After a reboot a pid file names whatever took that number: each start asks the node's Python
    # whether the pid file's process is that very one, of that module (tests/test_pidfiles.py).
    for name, module in (("ps-1", "picluster.cluster.server"), ("worker-0", "picluster.cluster.server"),
                         ("agent", "picluster.monitor.agent")):
        assert f"if ! python3 pidfiles.py running {name} {module}; then" in script, script
    assert script.count("pidfiles.py running ") == 3 and "/proc/" not in script
    assert script.splitlines()[1] == f"cd $HOME/{RUN_DIR} || exit 1"
    unit = templates.render("picluster-node.service.j2", user="pi", start_script=f"/home/pi/{RUN_DIR}/{START_SCRIPT}")
    assert f"ConditionPathExists=/home/pi/{RUN_DIR}/{START_SCRIPT}" in unit and "User=pi" in unit
    role = (ROOT / "ansible" / "roles" / "runtime" / "tasks" / "main.yml").read_text()
    assert f'start_script: "{{{{ runtime_user_home.stdout }}}}/{RUN_DIR}/{START_SCRIPT}"' in role


def test_a_refused_port_is_a_machine_still_up_not_one_that_is_off():
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]  # bound, not listening: refused
        assert not health.silent("127.0.0.1", port)
        sock.listen()
        assert not health.silent("127.0.0.1", port)


def test_apt_output_is_read_for_failed_fetches_and_counts():
    warned = "Hit:1 http://x bookworm InRelease\nW: Failed to fetch http://x/dists/bookworm/InRelease  Could not connect\n" \
             "W: Some index files failed to download. They have been ignored, or old ones used instead.\n"
    assert chores.FETCH_FAILED.search(warned) and chores._apt_line(warned).startswith("W: Some index files failed")
    assert not chores.FETCH_FAILED.search("Hit:1 http://x bookworm InRelease\nReading package lists...\n")
    counts = chores.UPGRADED.search("Calculating upgrade...\n3 upgraded, 1 newly installed, 0 to remove and 0 not upgraded.\n")
    assert counts.groups() == ("3", "1")


def test_shutdown_counts_a_node_already_off_as_off_and_asks_only_the_others(inv_path, monkeypatch):
    inv = load_inventory(inv_path)
    # The order alone: the queue's part (drain, wait, resume) runs against Slurm in test_slurm_lab.py.
    monkeypatch.setattr(chores.Queue, "of", classmethod(lambda cls, inv_: NoQueue()))
    asked: list[str] = []
    monkeypatch.setattr(health, "silent", lambda address, *a, **k: address == "127.0.1.4")  # node04: nothing answers
    monkeypatch.setattr(chores, "_ask", lambda inv_, node, command: asked.append(f"{node.name} {command}"))
    monkeypatch.setattr(health, "wait_gone", lambda nodes, timeout, started=None: 1.0)
    said: list[str] = []
    plan = order.waves(inv, select(inv, "node[01,04-05]"), parallel=None)
    done = chores.shutdown(inv, plan, 60, said.append)
    assert asked == ["node05 systemctl poweroff", "node01 systemctl poweroff"]
    assert said == ["node04: already off", "node05: off after 1 s", "node01: off after 1 s"]
    assert done == {"node04": "already off", "node05": "off after 1 s", "node01": "off after 1 s"}


def test_with_slurm_a_chore_whose_controller_does_not_answer_touches_nothing(inv_path):
    # node03, the controller, is 127.0.1.3: nothing listens there.
    done = picluster("nodes", "reboot", "node05", "-i", inv_path)
    assert done.returncode == 1, done.stdout + done.stderr
    assert done.stderr.startswith("picluster: error: the Slurm controller on node03 does not answer (") and done.stderr.endswith(
        "nothing was drained or touched; start it with 'picluster provision --only slurm,queue' first\n"), done.stderr
    assert len(done.stderr.splitlines()) == 1


@pytest.mark.parametrize(("shown", "seconds"), [
    ("1-02:03:04", 93784), ("2:03:04", 7384), ("3:04", 184), ("0:00", 0), ("12", 12),
    ("UNLIMITED", 60), ("NOT_SET", 60), ("INVALID", 60), ("", 60), ("1-x:00", 60),
])
def test_squeues_time_left_is_read_in_its_forms(shown, seconds):
    assert time_left(shown) == seconds


class ScriptedNode:
    """Stands in for an SSH connection: answers each apt-get with the next of ``answers``."""

    def __init__(self, *answers):
        self.answers, self.asked = list(answers), []

    def run(self, command, **kwargs):
        self.asked.append(command)
        exited, err = self.answers.pop(0) if len(self.answers) > 1 else self.answers[0]
        return SimpleNamespace(exited=exited, stdout="", stderr=err)


LISTS_LOCKED = (100, "E: Could not get lock /var/lib/apt/lists/lock. It is held by process 2023 (unattended-upgr)\nE: Unable to lock directory /var/lib/apt/lists/\n")


def test_apt_waits_for_its_lock_and_says_once_who_holds_it(inv_path, monkeypatch):
    monkeypatch.setattr(chores, "LOCK_POLL_S", 0.01)
    node = load_inventory(inv_path).node("node05")
    said: list[str] = []
    remote = ScriptedNode(LISTS_LOCKED, LISTS_LOCKED, (0, ""))
    assert chores._apt(remote, node, "update", 60, said.append).exited == 0
    assert len(remote.asked) == 3
    assert said == ["node05: waiting for apt's lock /var/lib/apt/lists/lock by process 2023 (unattended-upgr)"]

    stuck = ScriptedNode(LISTS_LOCKED)
    with pytest.raises(chores.ClusterError) as refused:
        chores._apt(stuck, node, "update", 0.05, said.append)
    assert str(refused.value) == ("apt's lock /var/lib/apt/lists/lock still held by process 2023 (unattended-upgr) after 0 s; "
                                  "nothing was upgraded there")
    # Another failure is apt's own, returned as it is.
    assert chores._apt(ScriptedNode((100, "E: Unable to locate package x")), node, "install x", 60, said.append).exited == 100
    older = chores.LOCKED.search("E: Could not get lock /var/lib/dpkg/lock-frontend - open (11: Resource temporarily unavailable)")
    assert older.group("path") == "/var/lib/dpkg/lock-frontend" and chores._holder(older) == ""


def test_cluster_up_giving_up_says_still_starting_or_unreachable_and_what_to_do(inv_path):
    from picluster.cluster.nodecluster import MAX_TIMEOUT_S, _not_answering

    layout = from_inventory(load_inventory(inv_path))
    slow = {"node03": {"worker:1": ("alive", None, ())}, "node04": {"worker:2": ("ready", None, ())}}
    # While one still starts, waiting is the advice (the other may answer by then).
    assert _not_answering(layout, slow, 120) == (
        "node[03-04]: not answering after 120 s (worker:1: still starting); they go on starting: "
        "'picluster cluster up --timeout 360' waits for them, 'picluster cluster down' stops them")
    # The command it names is one `cluster up` takes: never past its --timeout's hour.
    assert "'picluster cluster up --timeout 3600' waits" in _not_answering(layout, slow, 1800)
    assert f"--timeout NUMBER 1-{MAX_TIMEOUT_S} " in " ".join(picluster("cluster", "up", "--help").stdout.split())
    walled = {"node04": {"worker:2": ("ready", None, ())}}
    assert _not_answering(layout, walled, 30) == (
        "node04: not answering after 30 s, though started on the node (worker:2 at 127.0.1.4:2222): this machine cannot "
        "reach it; check the inventory's addresses and that 'picluster provision' let this machine in")
