"""A Slurm job that ended before its script ran, without Slurm: its records as scontrol and sacct
print them (taken from a real Slurm 22.05 on test hosts), the error its node's slurmd logged, and
what `picluster logs` and `jobs slurm:ID` say of it instead of "no output".  (test_slurm_lab.py
makes such a job on a real Slurm and reads what `logs` says.)"""

from types import SimpleNamespace

import pytest

from picluster.cluster.here import Here
from picluster.jobs.slurm import failure, queue
from picluster.model.inventory import parse_inventory
from picluster.util.errors import ClusterError, UsageError

INVENTORY = {
    "cluster": {"name": "pis", "user": "pi", "nodes": "node[01-03]", "addresses": "127.0.0.[11-13]"},
    "slurm": {"partition": "pis", "accounting": True},
    "users": {"alice": "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIJ4vXGk5mm2cKR3AzVg1ZzJ8RyPUm8mCzTWc2qR6Z4a5 alice@laptop"},
}
# A job alice queued with --chdir of a folder only the controller has: its output file could not be opened on node02.
LAUNCH_FAILED = (
    "JobId=7 JobName=wrap UserId=alice(2001) GroupId=alice(2001) MCS_label=N/A Priority=10000 Nice=0 Account=picluster "
    "QOS=normal JobState=FAILED Reason=JobLaunchFailure Dependency=(null) Requeue=1 Restarts=0 BatchFlag=1 Reboot=0 "
    "ExitCode=0:53 RunTime=00:00:00 TimeLimit=00:01:00 TimeMin=N/A SubmitTime=2026-12-04T19:19:50 Partition=pis "
    "ReqNodeList=node02 ExcNodeList=(null) NodeList=node02 BatchHost=node02 NumNodes=1 NumCPUs=1 Command=(null) "
    "WorkDir=/home/alice/proj StdErr=/home/alice/proj/tf.out StdIn=/dev/null StdOut=/home/alice/proj/tf.out Power= \n")
LOGGED = {  # node02's slurmd.log for it (the last two lines are not errors)
    "missing": "[2026-12-04T19:19:51.079] [7.batch] error: Could not open stdout file /home/alice/proj/tf.out: No such file or directory\n"
               "[2026-12-04T19:19:51.079] [7.batch] error: _fork_all_tasks: IO setup failed: Slurmd could not connect IO\n",
}
SACCT = "2|alice|FAILED|0:53|0|node02|/home/alice/proj\n"  # the same, once slurmctld has forgotten it: no reason
COMPLETED = LAUNCH_FAILED.replace("JobState=FAILED Reason=JobLaunchFailure", "JobState=COMPLETED Reason=None").replace(
    "ExitCode=0:53 RunTime=00:00:00", "ExitCode=0:0 RunTime=00:00:07")
# Requeued after its launch on node03 failed (slurmd stopped there), waiting for the node to come back.
PENDING = LAUNCH_FAILED.replace("JobState=FAILED Reason=JobLaunchFailure", "JobState=PENDING Reason=ReqNodeNotAvail,_UnavailableNodes:node03").replace(
    "Restarts=0", "Restarts=1").replace("node02", "node03")
SINFO = "node01|idle|none\nnode02|idle|none\nnode03|down*|Not responding\n"


def inventory():
    return parse_inventory(INVENTORY)


def test_slurms_records_of_a_job_are_read_by_name_as_untrusted_text():
    record = failure.from_scontrol(LAUNCH_FAILED)
    assert record == failure.Record("7", "alice", "FAILED", "JobLaunchFailure", "0:53", 0, "node02", "node02", "/home/alice/proj",
                                    "/home/alice/proj/tf.out", "/home/alice/proj/tf.out", 0)
    assert record.unstarted and record.explained
    assert failure.from_sacct(SACCT, "2") == failure.Record("2", "alice", "FAILED", "", "0:53", 0, "node02", "node02", "/home/alice/proj")
    assert failure.from_sacct(SACCT, "2").unstarted  # no reason kept: FAILED in its first second without an exit status
    assert not failure.from_scontrol(COMPLETED).explained
    assert failure.from_scontrol(COMPLETED).run_s == 7
    assert not failure.from_sacct("2|alice|FAILED|1:0|12|node02|/x\n", "2").explained  # the script ran and exited 1
    pending = failure.from_scontrol(PENDING)
    assert (pending.state, pending.reason, pending.restarts, pending.explained) == (
        "PENDING", "ReqNodeNotAvail, UnavailableNodes:node03", 1, True)
    for junk in ("", "slurm_load_jobs error: Invalid job id specified\n", "JobId=7;reboot JobState=FAILED\n"):
        assert failure.from_scontrol(junk) is None
    assert failure.from_sacct("2|alice|FAILED|0:53|x|node02|/x\n", "2") is None
    assert failure.from_sacct("2|alice|FAILED|0:53|0|None assigned|/x\n", "2").batch_host == ""


def test_what_is_said_names_the_cause_from_the_nodes_log_and_the_fix():
    inv = inventory()
    record = failure.from_scontrol(LAUNCH_FAILED)
    logged = ["Could not open stdout file /home/alice/proj/tf.out: No such file or directory",
              "_fork_all_tasks: IO setup failed: Slurmd could not connect IO"]
    said = failure.explain(inv, record, logged, {}, {})
    assert said == (
        "slurm:7 FAILED at launch on node02 (JobLaunchFailure), before its script ran: node02 has no folder /home/alice/proj for its "
        "stdout file (node02's slurmd: Could not open stdout file /home/alice/proj/tf.out: No such file or directory): that folder "
        "is not on the share the nodes mount; submit from a folder on the share (your work folder /mnt/picluster/users/alice: "
        "'#$ -cwd' then runs the job there), or give its output (-o, --output) a path there")
    missing = failure.explain(inv, record, ["Could not open stdout file /mnt/picluster/users/alice/new/x.out: No such file or directory"],
                              {}, {})
    assert missing.endswith(": there is no folder /mnt/picluster/users/alice/new for its stdout file (node02's slurmd: Could not open "
                            "stdout file /mnt/picluster/users/alice/new/x.out: No such file or directory): make it (mkdir -p "
                            "/mnt/picluster/users/alice/new) or give the output a folder that exists, and submit again")
    denied = failure.explain(inv, record, ["Could not open stdout file /mnt/picluster/users/bob/x.out: Permission denied"], {}, {})
    assert denied.endswith(": alice may not write /mnt/picluster/users/bob/x.out (node02's slurmd: Could not open stdout file "
                           "/mnt/picluster/users/bob/x.out: Permission denied): give the output a path in your work folder "
                           "/mnt/picluster/users/alice, and submit again")
    other = failure.explain(inv, record, ["something slurmd said"], {}, {})
    assert other.endswith("before its script ran: node02's slurmd: something slurmd said")


def test_without_the_nodes_log_what_is_said_comes_from_the_records_and_the_share():
    """A person on the controller cannot read a node's slurmd log (root's): the records' paths and
    what the controller sees of the share tell them as much as can be told, and where to look."""
    inv = inventory()
    record = failure.from_scontrol(LAUNCH_FAILED)
    assert failure.explain(inv, record, [], {}, {}) == (
        "slurm:7 FAILED at launch on node02 (JobLaunchFailure), before its script ran: /home/alice/proj/tf.out is not on the share "
        "the nodes mount (/mnt/picluster), so node02 most likely has no folder /home/alice/proj (node02's log says why: sudo grep -F "
        "'[7.batch]' /var/log/slurm/slurmd.log there); submit from a folder on the share (your work folder "
        "/mnt/picluster/users/alice: '#$ -cwd' then runs the job there), or give its output (-o, --output) a path there")
    on_share = failure.Record("8", "alice", "FAILED", "JobLaunchFailure", "0:53", 0, "node03", "node03", "/mnt/picluster/users/alice",
                              "/mnt/picluster/users/alice/new/x.out", "/mnt/picluster/users/alice/new/x.out")
    assert failure.explain(inv, on_share, [], {}, {"/mnt/picluster/users/alice/new": "missing"}).endswith(
        ": there is no folder /mnt/picluster/users/alice/new for /mnt/picluster/users/alice/new/x.out: make it (mkdir -p "
        "/mnt/picluster/users/alice/new) or give the output a folder that exists")
    assert failure.explain(inv, on_share, [], {}, {"/mnt/picluster/users/alice/new": "unwritable"}).endswith(
        ": alice may not write in /mnt/picluster/users/alice/new: give the output a path in your work folder /mnt/picluster/users/alice")
    assert failure.explain(inv, on_share, [], {}, {"/mnt/picluster/users/alice/new": "ok"}).endswith(
        ": Slurm records no more (node03's log says why: sudo grep -F '[8.batch]' /var/log/slurm/slurmd.log there)")
    # From sacct (no output files recorded): the folder it ran in.
    assert "/home/alice/proj is not on the share the nodes mount" in failure.explain(inv, failure.from_sacct(SACCT, "2"), [], {}, {})


def test_a_job_held_by_a_node_that_is_down_or_failed_by_one_is_said_with_the_node():
    inv = inventory()
    down = {"node03": "down* (Not responding)"}
    assert failure.explain(inv, failure.from_scontrol(PENDING), [], down, {}) == (
        "slurm:7 is PENDING (ReqNodeNotAvail, UnavailableNodes:node03): it waits for node03, node03 down* (Not responding); its "
        "launch on node03 failed, and Slurm put it back in the queue; it starts once they serve again: 'picluster provision -i "
        "INVENTORY --only slurm,queue' starts a stopped slurmd, or cancel it and submit it for other nodes")
    lost = failure.Record("9", "alice", "NODE_FAIL", "NodeDown", "0:0", 40, "node[02-03]", "node02")
    assert failure.explain(inv, lost, [], down, {}) == (
        "slurm:9 NODE_FAIL: node[02-03] stopped answering Slurm while it ran (node03 now down* (Not responding)); bring the node "
        "back ('picluster provision -i INVENTORY --only slurm,queue' starts a stopped slurmd, 'picluster nodes reboot NODE' "
        "reboots one) and submit the job again")


class Controller:
    """The controller's answers to the commands `logs` asks there (a person logged in on it)."""

    def __init__(self, scontrol: str, here: bool = False):
        self.scontrol, self.asked, self.here = scontrol, [], here

    def run(self, command, check=True, **kwargs):
        self.asked.append(command)
        out = {"scontrol": self.scontrol, "sinfo": SINFO, "sacct": "", "cat": "", "test": ""}[command.split()[0]]
        return SimpleNamespace(stdout=out, stderr="", exited=1 if command.startswith("cat") else 0)

    def close(self):
        pass


class HereController(Controller, Here):
    def __init__(self, scontrol: str):
        Controller.__init__(self, scontrol)


def test_logs_of_a_job_that_never_ran_says_why_instead_of_no_output(monkeypatch):
    inv = inventory()
    controller = Controller(LAUNCH_FAILED)
    node02 = SimpleNamespace(run=lambda command, **kw: SimpleNamespace(stdout=LOGGED["missing"], stderr="", exited=0),
                             close=lambda: None, asked=[])
    opened = []
    monkeypatch.setattr(queue, "_open", lambda inv, then="": controller)
    monkeypatch.setattr(failure, "open_node", lambda inv, node: opened.append(node.name) or node02)
    with pytest.raises(ClusterError) as said:
        queue.output(inv, "7")
    assert str(said.value).startswith("slurm:7 FAILED at launch on node02 (JobLaunchFailure), before its script ran: node02 has no "
                                      "folder /home/alice/proj for its stdout file (node02's slurmd: Could not open stdout file ")
    assert opened == ["node02"]  # the batch node's log, as the inventory's user (sudo there)
    # A person on the controller: from the records, no SSH to the node.
    opened.clear()
    monkeypatch.setattr(queue, "_open", lambda inv, then="": HereController(LAUNCH_FAILED))
    with pytest.raises(ClusterError, match=r"most likely has no folder /home/alice/proj \(node02's log says why"):
        queue.output(inv, "7")
    assert opened == []
    # Waiting for a node: no output yet, and why (exit 2: nothing is wrong with the job); a node
    # that is down is not asked for its log.
    monkeypatch.setattr(queue, "_open", lambda inv, then="": Controller(PENDING))
    with pytest.raises(UsageError, match=r"^no output yet: slurm:7 is PENDING \(ReqNodeNotAvail"):
        queue.output(inv, "7")
    assert queue.why(inv, "7").startswith("slurm:7 is PENDING")
    # Waiting its turn: no output yet, and no node asked for one.
    waiting = Controller(PENDING.replace("Reason=ReqNodeNotAvail,_UnavailableNodes:node03", "Reason=Resources"))
    monkeypatch.setattr(queue, "_open", lambda inv, then="": waiting)
    with pytest.raises(UsageError) as said:
        queue.output(inv, "7")
    assert str(said.value) == "no output yet: slurm:7 is PENDING (Resources): 'picluster jobs slurm:7' shows it"
    assert opened == [] and queue.why(inv, "7") is None
    # A job that ran has its output looked for as before (here: nowhere), and nothing to explain.
    monkeypatch.setattr(queue, "_open", lambda inv, then="": HereController(COMPLETED))
    monkeypatch.setattr(queue, "open_node", lambda inv, node: SimpleNamespace(
        run=lambda command, **kw: SimpleNamespace(stdout="", stderr="", exited=1), close=lambda: None))
    with pytest.raises(UsageError, match="no output of Slurm job 7 on any node"):
        queue.output(inv, "7")
    assert queue.why(inv, "7") is None
