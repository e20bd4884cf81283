"""Slurm jobs without Slurm: what `picluster submit` checks before it connects, the batch script it
writes, how squeue's and scontrol's answers are read, and the layout of an allocation.
(tests/test_slurm_lab.py runs all of it against a real Slurm.)"""

import base64
import subprocess
from types import SimpleNamespace

import pytest
from slurm_fixtures import INVENTORY, inventory

from picluster.cluster.allocation import default_ps, job_id, layout_of, node_addresses, not_serving, shared_dir, sinfo_states, sizes
from picluster.cluster.server import step_ports
from picluster.jobs.slurm import batch, script
from picluster.jobs.slurm.origin import Origin
from picluster.jobs.slurm.queue import describe, parse
from picluster.util.errors import ClusterError, UsageError

from conftest import picluster

TYPED = Origin("/home/pi", here=False, on_node=False, account="pi")  # submit typed on a laptop, over SSH





def test_times_and_memory_as_sbatch_takes_them():
    assert batch.seconds("30") == 1800
    assert batch.seconds("1:30") == 90
    assert batch.seconds("2:00:05") == 7205
    assert batch.seconds("1-2") == 93600
    assert batch.seconds("1-2:03") == 93780
    assert batch.seconds("1-2:03:04") == 93784
    for bad, why in [("abc", "use minutes"), ("0", "above zero"), ("0:00", "above zero"), ("1:60", "to 59"),
                     ("1-24", "to 23"), ("366-0", "365 days"), ("1h", "use minutes"), (" 5", "use minutes"), ("-5", "use minutes")]:
        with pytest.raises(UsageError, match=why):
            batch.seconds(bad)
    assert batch.megabytes("512") == 512
    assert batch.megabytes("2G") == 2048
    assert batch.megabytes("1T") == 1024 * 1024
    assert batch.megabytes("2048K") == 2
    for bad in ["2X", "1.5G", "", "-1", "0", "512K"[:0] + "1K"]:
        with pytest.raises(UsageError, match="--mem"):
            batch.megabytes(bad)


def test_a_request_is_checked_against_the_inventory_before_anything_connects():
    inv = inventory()
    req = batch.check(inv, ("picluster", "run", "montecarlo", "--nodes", "3"), batch.Asked(nodes=3, time="10", mem="1G", nodelist="node[02-03]"))
    assert (req.nodes, req.ps, req.name, req.nodelist) == (3, -1, "run-montecarlo", ("node02", "node03"))
    assert batch.check(inv, ("sleep", "5"), batch.Asked(nodelist="node[01-02]")).nodes == 2  # the list's size
    assert batch.check(inv, ("/usr/bin/sleep", "5"), batch.Asked()).name == "sleep"
    refusals = [
        (((), batch.Asked()), "give the command after '--'"),
        ((("x",), batch.Asked(nodes=5)), "--nodes 5 is more than the 4 nodes"),
        ((("x",), batch.Asked(nodelist="node09")), "--nodelist: node set 'node09' names node09, not in the inventory"),
        ((("x",), batch.Asked(nodes=1, nodelist="node[01-02]")), "names 2 nodes but --nodes is 1"),
        ((("x",), batch.Asked(nodelist="node[01-02]!node[01-02]")), "--nodelist: node set 'node\\[01-02\\]!node\\[01-02\\]' names no node"),
        ((("x",), batch.Asked(nodes=2, ps=3)), "--ps 3 is more than the job's 2"),
        ((("x",), batch.Asked(time="soon")), "--time"),
        ((("x",), batch.Asked(mem="lots")), "--mem"),
        ((("x",), batch.Asked(name="a b")), "--name"),
        ((("x\0",), batch.Asked()), "NUL"),
    ]
    for args, why in refusals:
        with pytest.raises(UsageError, match=why):
            batch.check(inv, *args)
    without = inventory(INVENTORY.split("[slurm]")[0])
    with pytest.raises(UsageError, match=r"no \[slurm\] table"):
        batch.check(without, ("x",), batch.Asked())


def test_nodelist_and_x_are_node_sets_slurm_is_given_names():
    inv = inventory()
    req = batch.check(inv, ("hostname",), batch.Asked(nodelist="node[01-04]!node02", exclude=("node04",)))
    assert (req.nodes, req.nodelist, req.exclude) == (2, ("node01", "node03"), ("node04",))
    text = batch.script(inv, req)
    assert "#SBATCH --nodelist=node01,node03\n#SBATCH --exclude=node04\n" in text
    # -x alone is sbatch's: Slurm picks the job's nodes among the others.
    spared = batch.check(inv, ("hostname",), batch.Asked(nodes=3, exclude=("node[01-02]!node01",)))
    assert (spared.nodelist, spared.exclude) == ((), ("node02",)) and "#SBATCH --exclude=node02\n" in batch.script(inv, spared)
    for args, exclude, why in [(("hostname",), ("node[01-02]",), r"--nodes 3 is more than the 2 nodes -x leaves \(node\[03-04\]\)"),
                               (("hostname",), ("node[01-04]",), r"-x node\[01-04\] leaves no node for the job"),
                               (("hostname",), ("node05",), r"-x 'node05' names node05, not in the inventory pis")]:
        with pytest.raises(UsageError, match=why):
            batch.check(inv, args, batch.Asked(nodes=3 if exclude == ("node[01-02]",) else None, exclude=exclude))
    # A job script's own lines are read by sbatch, whose node lists have no operators or groups.
    for line in ("#SBATCH --nodelist=node[01-04]!node02", "#SBATCH -w @workers"):
        with pytest.raises(UsageError, match=r"job.sh:2: --nodelist=.*: Slurm reads this line, and its node lists take no operators"):
            script.read(inv, "job.sh", f"#!/bin/sh\n{line}\nhostname\n".encode(), TYPED)
    job = script.read(inv, "job.sh", b"#!/bin/sh\n#SBATCH --nodelist=node[01-02]\nhostname\n", TYPED)
    given = batch.sbatch_args(inv, batch.check(inv, (), batch.Asked(exclude=("node03",)), job_script=job))
    assert given.startswith("--exclude=node03 --job-name=job ")


def test_the_batch_script_quotes_the_command_and_runs_the_nodes_picluster(tmp_path):
    inv = inventory()
    req = batch.check(inv, ("picluster", "run", "montecarlo", "$(touch /tmp/x)", "a'b"), batch.Asked(nodes=2, ps=1, time="5", mem="1G", name="mc"))
    text = batch.script(inv, req)
    assert text.splitlines()[:6] == ["#!/bin/sh", "#SBATCH --job-name=mc", "#SBATCH --partition=lab", "#SBATCH --nodes=2",
                                     "#SBATCH --exclusive", "#SBATCH --output=picluster-slurm-%j.out"]
    assert "#SBATCH --time=5\n#SBATCH --mem=1G\n" in text
    assert "export PICLUSTER_SHARE=/mnt/picluster\nexport PICLUSTER_PS=1\n" in text
    # The script, run by a real sh with a stand-in picluster on the venv's PATH: the words arrive as given.
    venv = tmp_path / "venv" / "bin"
    venv.mkdir(parents=True)
    (venv / "picluster").write_text('#!/bin/sh\nfor a; do echo "[$a]"; done\n')
    (venv / "picluster").chmod(0o755)
    script = text.replace('"/opt/pcvenv/bin"', f'"{venv}"')
    assert script != text
    ran = subprocess.run(["sh", "-c", script], capture_output=True, text=True, check=True)
    assert ran.stdout == "[run]\n[montecarlo]\n[$(touch /tmp/x)]\n[a'b]\n"
    # A relative venv is under the home of whoever runs the job.
    # --cpus: one task per node with its CPUs, the rest of the node left to other jobs.
    shared = batch.script(inv, batch.check(inv, ("hostname",), batch.Asked(nodes=2, cpus=2)))
    assert "#SBATCH --exclusive" not in shared and "#SBATCH --ntasks-per-node=1\n#SBATCH --cpus-per-task=2\n" in shared
    home = batch.script(inventory(INVENTORY.replace('"/opt/pcvenv"', '"pv"')), req)
    assert 'PATH="$HOME/pv/bin":$PATH; export PATH' in home
    assert base64.b64decode(base64.b64encode(text.encode())).decode() == text


def test_squeue_lines_are_read_as_untrusted_text():
    rows = parse("12|pi|RUNNING|None|3|node[01-03]|0:05|10:00|1|1|1|node01|run-montecarlo\n"
                 "13|pi|PENDING|Resources|3||0:00|UNLIMITED|1|N/A|N/A|n/a|a|b|c\n"
                 "x|pi|RUNNING|None|1|node01|0:01|1:00|1|1|1|node01|bad id\n"
                 "14|pi|RUNNING\n")
    assert [(r.ref, r.state, r.reason, r.nodes, r.name, r.active) for r in rows] == [
        ("slurm:12", "RUNNING", "None", 3, "run-montecarlo", True),
        ("slurm:13", "PENDING", "Resources", 3, "a|b|c", True),
    ]
    assert not parse("15|pi|TIMEOUT|TimeLimit|1|node03|1:01|1:00|1|1|1|node03|overtime\n")[0].active


def test_nodes_slurm_will_not_use_are_picked_out_of_sinfo_and_grouped():
    text = ("node01|idle|none\nnode02|down*|Not responding\nnode03|allocated|none\nnode04|mixed|none\n"
            "node05|drained|fan broken\nnode06|idle*|none\nnode07|down*|Not responding\n")
    states = sinfo_states(text)
    assert states["node01"] == "idle" and states["node02"] == "down* (Not responding)"
    down = not_serving(states)
    assert sorted(down) == ["node02", "node05", "node06", "node07"]  # idle* answers no ping either
    assert describe(down) == "node[02,07] down* (Not responding); node05 drained (fan broken); node06 idle*"
    assert not_serving(sinfo_states("node01|idle|none\nnode02|completing|none\n")) == {}


def test_an_allocation_from_slurms_environment_and_answers():
    env = {"SLURM_JOB_ID": "42", "SLURM_JOB_NUM_NODES": "3", "PICLUSTER_SHARE": "/mnt/picluster"}
    assert job_id(env) == "42" and job_id({}) is None and job_id({"SLURM_JOB_ID": "4 2"}) is None
    assert sizes(env) == (3, 1) and sizes({}) is None
    assert sizes(env | {"PICLUSTER_PS": "0"}) == (3, 0)
    with pytest.raises(ClusterError, match="PICLUSTER_PS"):
        sizes(env | {"PICLUSTER_PS": "4"})
    assert [default_ps(n) for n in (1, 12, 13, 64)] == [1, 1, 1, 1]  # one ps: the sync default needs no more
    assert str(shared_dir(env)) == "/mnt/picluster" and shared_dir(env | {"PICLUSTER_SHARE": "rel"}) is None
    text = ("NodeName=node01 Arch=x86_64 NodeAddr=10.0.0.11 NodeHostName=node01 State=IDLE\n"
            "NodeName=node02 NodeAddr=10.0.0.12 State=IDLE\n")
    addresses = node_addresses(text)
    assert addresses == {"node01": "10.0.0.11", "node02": "10.0.0.12"}
    with pytest.raises(ClusterError, match="not an IP address"):
        node_addresses("NodeName=node03 NodeAddr=pi-3.example\n")
    layout = layout_of(["node01", "node02", "node03"], addresses | {"node03": "10.0.0.13"}, 1, 2224)
    assert [(t.label, t.node, t.port) for t in layout.tasks] == [
        ("ps:0", "node01", 2224), ("worker:0", "node02", 2225), ("worker:1", "node03", 2225), ("worker:2", "node01", 2225)]
    # The servers' step takes the two ports Slurm reserved for it.
    assert [t.port for t in layout.with_ports(2240, 2241).tasks] == [2240, 2241, 2241, 2241]
    assert step_ports("2240-2241") == [2240, 2241] and step_ports("2240,2250") == [2240, 2250] and step_ports("") == []
    with pytest.raises(ValueError, match="not a list of ports"):
        step_ports("a-b")


def test_submit_and_the_slurm_job_commands_refuse_bad_input_in_one_line(tmp_path):
    path = tmp_path / "pis.toml"  # not picluster.toml: commands without -i must not find it here
    path.write_text(INVENTORY)
    bare = tmp_path / "bare.toml"
    bare.write_text(INVENTORY.split("[slurm]")[0])
    (tmp_path / "a.out").write_bytes(b"\x7fELF\x02\x01\x01\0\xff\xfe")  # a program, not a script
    cases = [
        (("submit", "-i", path, "--time", "1:99", "--", "hostname"), "--time 1:99: hours go to 23, minutes and seconds to 59"),
        # One file after --: a command (read no further than the requests), as sbatch --wrap's; without --: a job script.
        (("submit", "-i", path, "--nodes", "9", "--", "./a.out"), "--nodes 9 is more than the 4 nodes of the inventory"),
        (("submit", "-i", path, "--nodes", "9", "./a.out"), "./a.out: not a text file (not UTF-8): give a shell script"),
        (("submit", "-i", path, "--nodes", "9", "--", "hostname"), "--nodes 9 is more than the 4 nodes of the inventory"),
        (("submit", "-i", bare, "--", "hostname"), f"inventory {bare} has no [slurm] table"),
        (("submit", "-i", path, "--partition", "x", "--", "hostname"), "No such option '--partition'"),
        (("jobs", "slurm:x"), "'slurm:x' is not a job"),
        (("logs", "-i", bare, "slurm:5"), "slurm:5 is a Slurm job: give the inventory with the [slurm] table"),
        (("cancel", "slurm:5"), "slurm:5 is a Slurm job: give the inventory"),
        (("logs", "-i", path, "--task", "worker:0", "slurm:5"), "--task is for picluster's own records"),
    ]
    for args, message in cases:
        done = picluster(*args, cwd=tmp_path)
        assert done.returncode == 2, (args, done.stderr)
        assert done.stdout == "" and len(done.stderr.splitlines()) == 1 and message in done.stderr, (args, done.stderr)
    # Nothing listens for SSH on this machine: Slurm cannot be reached, and nothing was queued.
    done = picluster("submit", "-i", path, "--", "hostname", cwd=tmp_path)
    assert done.returncode == 2 and done.stderr.startswith("picluster: error: Slurm's controller node01 cannot be reached (")
    assert done.stderr.rstrip().endswith("nothing was queued") and len(done.stderr.splitlines()) == 1
    done = picluster("cancel", "-i", path, "slurm:5", cwd=tmp_path)
    assert done.returncode == 2 and done.stderr == (
        "picluster: error: Slurm's controller node01 cannot be reached (nothing listens on port 22)\n"), done.stderr


class Answers:
    """Stands in for the controller's connection: each Slurm command gets its canned output."""

    def __init__(self, **outputs):
        self.outputs, self.asked = outputs, []

    def run(self, command, **kwargs):
        self.asked.append(command)
        word = command.removeprefix("SLURM_TIME_FORMAT=%s ").split()[0]
        return SimpleNamespace(stdout=self.outputs[word], stderr="", exited=0)


def test_with_accounting_ended_jobs_slurmctld_forgot_come_from_sacct():
    from picluster.jobs.slurm.queue import _squeue

    counted = inventory(INVENTORY + "accounting = true\n")
    remote = Answers(
        squeue="12|pi|RUNNING|None|2|node[01-02]|1:02|5:00|1796412979|1796413092|1796413392|node01|har\n"
               "13|pi|FAILED|NonZeroExitCode|1|node01|0:02|5:00|1796413109|1796413110|1796413112|node01|fails\n",
        sacct="9|alice|CANCELLED by 1001|1|node03|00:00:41|01:00:00|1796413109|1796413110|1796413151|0:15|sweep|with|bars\n"
              "12|pi|RUNNING|2|node[01-02]|00:01:02|00:05:00|1796412979|1796413092|Unknown|0:0|har\n"
              "13|pi|FAILED|1|node01|00:00:02|00:05:00|1796413109|1796413110|1796413112|7:0|fails\n"
              "11.batch|alice|COMPLETED|1|node03|00:00:01||1|1|1|0:0|batch\n"
              "garbage\n",
    )
    rows = _squeue(counted, remote)
    assert [(r.id, r.user, r.state, r.nodes, r.name, r.exit_code) for r in rows] == [
        ("12", "pi", "RUNNING", 2, "har", None), ("13", "pi", "FAILED", 1, "fails", 7), ("9", "alice", "CANCELLED", 1, "sweep|with|bars", 143)]
    assert remote.asked[1].startswith("SLURM_TIME_FORMAT=%s sacct --noheader --parsable2 --allusers --allocations --starttime=now-7days ")
    # Without accounting, squeue alone (sacct would answer nothing).
    plain = Answers(squeue=remote.outputs["squeue"])
    assert [r.id for r in _squeue(inventory(), plain)] == ["12", "13"] and len(plain.asked) == 1


def test_a_controller_that_does_not_answer_is_one_line_asked_once(monkeypatch):
    """A stopped slurmctld: sbatch waits 10 to 20 s before saying so; submit says it then, and
    asks nothing more (sinfo, for the nodes that are down, would wait as long again)."""
    from picluster.cluster.ssh import CommandFailed
    from picluster.jobs.slurm import queue

    class Silent:
        def __init__(self):
            self.asked = []

        def run(self, command, check=True, **kwargs):
            self.asked.append(command)
            said = "error: Unable to contact slurm controller (connect failure)"
            if not check:
                return SimpleNamespace(stdout="", stderr=said, exited=1)
            raise CommandFailed(f"node01: {command.split()[-1]}: sbatch: {said}")

        def close(self):
            pass

    silent = Silent()
    monkeypatch.setattr(queue, "_open", lambda inv, then="": silent)
    with pytest.raises(UsageError) as refused:
        queue.submit(inventory(), batch.Request(command=("hostname",), nodes=1, ps=0, name="hostname"))
    assert str(refused.value) == ("Slurm's controller daemon on node01 does not answer (slurmctld stopped?): "
                                  "'picluster provision -i INVENTORY --only slurm,queue' starts it; nothing was queued")
    assert len(silent.asked) == 1 and "sbatch --test-only" in silent.asked[0]


def test_the_allocations_servers_wait_as_long_as_the_job_environment_says(tmp_path, monkeypatch):
    """Inside a Slurm job the servers have 180 s to answer, or PICLUSTER_START_TIMEOUT's seconds
    (exported by sbatch from the session that submits): a node loading TensorFlow under emulation
    takes longer.  The step here says its ports and never answers."""
    from picluster.cluster import allocation

    monkeypatch.setenv("PICLUSTER_STATE_DIR", str(tmp_path))
    real = subprocess.Popen
    said = "echo '0: picluster.cluster.server: reserved ports 1 2'; exec sleep 30"
    monkeypatch.setattr(allocation.subprocess, "Popen", lambda cmd, **kw: real(["sh", "-c", said], **kw))
    job = allocation.Allocation("41", layout_of(["node01"], {"node01": "127.0.0.1"}, 1, 2224))
    monkeypatch.setenv("PICLUSTER_START_TIMEOUT", "1")
    with pytest.raises(ClusterError) as late:
        job.start()
    assert str(late.value) == ("Slurm job 41: node01 not answering after 1 s (ps:0, worker:0); nodes that load TensorFlow "
                               "slower than that need longer: submit with PICLUSTER_START_TIMEOUT=SECONDS in your environment")
    assert job._step is None  # the step stopped
    monkeypatch.setenv("PICLUSTER_START_TIMEOUT", "soon")
    with pytest.raises(ClusterError, match=r"PICLUSTER_START_TIMEOUT='soon' must be a whole number from 1 to 86400"):
        job.start()
