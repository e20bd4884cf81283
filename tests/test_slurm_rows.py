"""squeue's, sacct's and scontrol's answers as picluster reads them, from output recorded on a real
Slurm 22.05.8 (Debian 12's packages, namespace test hosts, accounting on) with the formats
picluster asks for (jobs/slurm/rows.py: SLURM_TIME_FORMAT=%s, the name last).  Among them: a job
name holding '|' and a space, pending jobs (no node, "n/a" batch host, "N/A" and expected
times), a script that exited 7, jobs cancelled by their owner, sacct's "CANCELLED by 1001" and
"Unknown" times.  tests/test_slurm_lab.py asks the same Slurm for real."""

from types import SimpleNamespace

import pytest

from picluster.jobs.slurm import follow, queue
from picluster.jobs.slurm.rows import FORMAT, SACCT, duration_s, exit_code, moment, parse, parse_sacct, scontrol_exit, stdout_path
from picluster.model.inventory import parse_inventory
from picluster.util.errors import UsageError

pytestmark = pytest.mark.unit

# `SLURM_TIME_FORMAT=%s squeue --noheader --states=all --format='%i|%u|%T|%r|%D|%N|%M|%l|%V|%S|%e|%B|%j'`
SQUEUE = """\
13|pi|CANCELLED|None|1|node01|0:07|5:00|1796413114|1796413116|1796413123|node01|long
15|pi|CANCELLED|None|1|node02|0:07|5:00|1796413116|1796413116|1796413123|node02|long
5|pi|COMPLETED|None|3|node[01-03]|2:00|5:00|1796412962|1796412968|1796413088|node01|hold
1|pi|COMPLETED|None|3|node[01-03]|0:00|1:00|1796412901|1796412901|1796412901|node01|picluster-check
3|pi|FAILED|NonZeroExitCode|1|node01|0:08|5:00|1796412960|1796412960|1796412968|node01|printer
11|pi|FAILED|NonZeroExitCode|1|node01|0:02|5:00|1796413109|1796413110|1796413112|node01|fails
21|pi|PENDING|Resources|3||0:00|10:00|1796413165|1796413464|1796414064|n/a|big
22|pi|PENDING|Resources|1||0:00|5:00|1796413173|N/A|N/A|n/a|we|ird name
19|pi|RUNNING|None|3|node[01-03]|0:09|5:00|1796413163|1796413164|1796413464|node01|hold
"""
# `SLURM_TIME_FORMAT=%s sacct --noheader --parsable2 --allusers --allocations --starttime=now-1days --format=JobID,...,ExitCode,JobName`
SACCT_OUT = """\
1|pi|COMPLETED|3|node[01-03]|00:00:00|00:01:00|1796412901|1796412901|1796412901|0:0|picluster-check
3|pi|FAILED|1|node01|00:00:08|00:05:00|1796412960|1796412960|1796412968|3:0|printer
11|pi|FAILED|1|node01|00:00:02|00:05:00|1796413109|1796413110|1796413112|7:0|fails
13|pi|CANCELLED by 1001|1|node01|00:00:07|00:05:00|1796413114|1796413116|1796413123|0:0|long
19|pi|RUNNING|3|node[01-03]|00:00:09|00:05:00|1796413163|1796413164|Unknown|0:0|hold
21|pi|PENDING|3|None assigned|00:00:00|00:10:00|1796413165|Unknown|Unknown|0:0|big
"""
# `scontrol -o show job`: a script that exited 7, one cancelled (signal 15), one pending with the odd name.
SCONTROL = (
    'JobId=11 JobName=fails UserId=pi(1001) GroupId=pi(1001) MCS_label=N/A Priority=5000 Nice=0 Account=picluster QOS=normal JobState=FAILED '
    'Reason=NonZeroExitCode Dependency=(null) Requeue=1 Restarts=0 BatchFlag=1 Reboot=0 ExitCode=7:0 RunTime=00:00:02 TimeLimit=00:05:00 TimeMin=N/A '
    'SubmitTime=2026-12-04T19:38:29 EligibleTime=2026-12-04T19:38:29 AccrueTime=2026-12-04T19:38:29 StartTime=2026-12-04T19:38:30 '
    'EndTime=2026-12-04T19:38:32 Deadline=N/A SuspendTime=None SecsPreSuspend=0 LastSchedEval=2026-12-04T19:38:30 Scheduler=Backfill Partition=pis '
    'AllocNode:Sid=node01:31028 ReqNodeList=(null) ExcNodeList=(null) NodeList=node01 BatchHost=node01 NumNodes=1 NumCPUs=2 NumTasks=1 CPUs/Task=1 '
    'ReqB:S:C:T=0:0:*:* TRES=cpu=2,mem=22900M,node=1,billing=2 Socks/Node=* NtasksPerN:B:S:C=0:0:*:* CoreSpec=* MinCPUsNode=1 MinMemoryCPU=11450M '
    'MinTmpDiskNode=0 Features=(null) DelayBoot=00:00:00 OverSubscribe=NO Contiguous=0 Licenses=(null) Network=(null) Command=(null) WorkDir=/home/pi '
    'StdErr=/home/pi/picluster-slurm-11.out StdIn=/dev/null StdOut=/home/pi/picluster-slurm-11.out Power= \n'
    'JobId=13 JobName=long UserId=pi(1001) GroupId=pi(1001) MCS_label=N/A Priority=5000 Nice=0 Account=picluster QOS=normal JobState=CANCELLED Reason=None '
    'Dependency=(null) Requeue=1 Restarts=0 BatchFlag=1 Reboot=0 ExitCode=0:15 RunTime=00:00:07 TimeLimit=00:05:00 TimeMin=N/A '
    'SubmitTime=2026-12-04T19:38:34 EligibleTime=2026-12-04T19:38:34 AccrueTime=2026-12-04T19:38:34 StartTime=2026-12-04T19:38:36 '
    'EndTime=2026-12-04T19:38:43 Deadline=N/A SuspendTime=None SecsPreSuspend=0 LastSchedEval=2026-12-04T19:38:36 Scheduler=Main Partition=pis '
    'AllocNode:Sid=node01:31275 ReqNodeList=(null) ExcNodeList=(null) NodeList=node01 BatchHost=node01 NumNodes=1 NumCPUs=2 NumTasks=1 CPUs/Task=1 '
    'ReqB:S:C:T=0:0:*:* TRES=cpu=2,mem=22900M,node=1,billing=2 Socks/Node=* NtasksPerN:B:S:C=0:0:*:* CoreSpec=* MinCPUsNode=1 MinMemoryCPU=11450M '
    'MinTmpDiskNode=0 Features=(null) DelayBoot=00:00:00 OverSubscribe=NO Contiguous=0 Licenses=(null) Network=(null) Command=(null) WorkDir=/home/pi '
    'StdErr=/home/pi/picluster-slurm-13.out StdIn=/dev/null StdOut=/home/pi/picluster-slurm-13.out Power= \n'
    'JobId=22 JobName=we|ird name UserId=pi(1001) GroupId=pi(1001) MCS_label=N/A Priority=5000 Nice=0 Account=picluster QOS=normal JobState=PENDING '
    'Reason=Resources Dependency=(null) Requeue=1 Restarts=0 BatchFlag=1 Reboot=0 ExitCode=0:0 RunTime=00:00:00 TimeLimit=00:05:00 TimeMin=N/A '
    'SubmitTime=2026-12-04T19:39:33 EligibleTime=2026-12-04T19:39:33 AccrueTime=Unknown StartTime=Unknown EndTime=Unknown Deadline=N/A SuspendTime=None '
    'SecsPreSuspend=0 LastSchedEval=2026-12-04T19:39:33 Scheduler=Main Partition=pis AllocNode:Sid=node01:5382 ReqNodeList=(null) ExcNodeList=(null) '
    'NodeList= NumNodes=1 NumCPUs=1 NumTasks=1 CPUs/Task=1 ReqB:S:C:T=0:0:*:* TRES=cpu=1,mem=11450M,node=1,billing=1 Socks/Node=* NtasksPerN:B:S:C=0:0:*:* '
    'CoreSpec=* MinCPUsNode=1 MinMemoryCPU=11450M MinTmpDiskNode=0 Features=(null) DelayBoot=00:00:00 OverSubscribe=OK Contiguous=0 Licenses=(null) '
    'Network=(null) Command=(null) WorkDir=/tmp StdErr=/tmp/slurm-22.out StdIn=/dev/null StdOut=/tmp/slurm-22.out Power= \n'
)
INVENTORY = """
[cluster]
name = "pis"
user = "pi"
nodes = "node[01-03]"
addresses = "127.0.0.[11-13]"

[slurm]
partition = "pis"
"""


def inventory(extra: str = ""):
    import tomllib

    return parse_inventory(tomllib.loads(INVENTORY + extra))


def test_the_formats_are_the_ones_recorded():
    assert FORMAT == "%i|%u|%T|%r|%D|%N|%M|%l|%V|%S|%e|%B|%j"
    assert SACCT == "JobID,User,State,NNodes,NodeList,Elapsed,Timelimit,Submit,Start,End,ExitCode,JobName"


def test_squeue_lines_with_times_batch_hosts_and_an_odd_name():
    rows = {r.id: r for r in parse(SQUEUE)}
    assert len(rows) == 9
    odd = rows["22"]
    assert (odd.name, odd.state, odd.reason, odd.nodes, odd.nodelist, odd.batch_host) == ("we|ird name", "PENDING", "Resources", 1, "", "")
    assert (odd.submitted, odd.started, odd.ended, odd.limit_s, odd.elapsed_s) == (1796413173.0, None, None, 300, 0)
    assert rows["21"].started is None and rows["21"].ended is None  # an expected start and end are not times it had
    ran = rows["19"]
    assert (ran.state, ran.started, ran.ended, ran.batch_host, ran.active, ran.elapsed_s) == ("RUNNING", 1796413164.0, None, "node01", True, 9)
    failed = rows["3"]
    assert (failed.ended, failed.active, failed.exit_code, failed.ref) == (1796412968.0, False, None, "slurm:3")
    assert rows["5"].elapsed_s == 120 and rows["15"].batch_host == "node02"


def test_sacct_lines_give_exit_codes_and_states_without_who_cancelled():
    rows = {r.id: r for r in parse_sacct(SACCT_OUT)}
    assert [(rows[i].state, rows[i].exit_code) for i in ("1", "3", "11", "13")] == [("COMPLETED", 0), ("FAILED", 3), ("FAILED", 7), ("CANCELLED", 0)]
    assert rows["19"].active and rows["19"].exit_code is None and rows["19"].ended is None  # "Unknown": not ended
    assert rows["21"].started is None and rows["13"].limit_s == 300 and rows["13"].elapsed_s == 7


def test_slurms_values_read_as_untrusted_text():
    assert [duration_s(t) for t in ("0:05", "1:02:03", "00:01:00", "2-03:04:05", "UNLIMITED", "INVALID", "", "1:2", "x:00")] == [
        5, 3723, 60, 183845, None, None, None, None, None]
    assert [exit_code(t) for t in ("0:0", "7:0", "0:15", "1:9", "", "a:b", "1234:0")] == [0, 7, 143, 1, None, None, None]
    assert [moment(t) for t in ("1796413173", "N/A", "Unknown", "None", "", "-5", "9" * 20)] == [1796413173.0] + [None] * 6
    lines = parse("x|pi|RUNNING|None|1|node01|0:01|1:00|1|1|1|node01|bad id\n"
                  "4|pi|RUNNING|None|one|node01|0:01|1:00|1|1|1|node01|bad count\n"
                  "5|pi|RUNNING\n"
                  "6|pi|RUNNING|None|1|node01|0:01|1:00|1|1|1|$(reboot)|evil host\n")
    assert [(r.id, r.batch_host) for r in lines] == [("6", "")]


def test_scontrol_gives_the_exit_code_and_output_file_after_the_jobs_own_name():
    rows = {r.id: r for r in parse(SQUEUE)}
    assert scontrol_exit(SCONTROL, rows["11"]) == 7
    assert scontrol_exit(SCONTROL, rows["13"]) == 143  # cancelled: signal 15, as a shell says it
    assert scontrol_exit(SCONTROL, rows["22"]) == 0 and scontrol_exit(SCONTROL, rows["5"]) is None  # forgotten: not in the text
    # A name cannot pass for the field: it is skipped whole, as squeue gave it.
    spoofed = SCONTROL.replace("JobName=fails ", "JobName=fails ExitCode=0:0 ").replace("JobId=11 ", "JobId=11 ", 1)
    tricky = parse(SQUEUE.replace("|fails\n", "|fails ExitCode=0:0\n"))
    assert scontrol_exit(spoofed, next(r for r in tricky if r.id == "11")) == 7
    one = next(line for line in SCONTROL.splitlines() if line.startswith("JobId=11 "))
    assert stdout_path(one) == "/home/pi/picluster-slurm-11.out"
    assert stdout_path(one.replace("WorkDir=/home/pi", "WorkDir=/x StdOut=/etc/shadow")) == "/home/pi/picluster-slurm-11.out"
    assert stdout_path("JobId=3 JobName=x") is None


class Controller:
    """The controller's connection, played back: each command gets the answer of the first
    (needle, answer) pair whose needle it holds; a needle given several times answers in turn."""

    def __init__(self, *script):
        self.script, self.asked = list(script), []

    def run(self, command, check=True, **kwargs):
        self.asked.append(command)
        for i, (needle, answer) in enumerate(self.script):
            if needle in command:
                if sum(1 for n, _ in self.script if n == needle) > 1:
                    del self.script[i]
                out, code = answer if isinstance(answer, tuple) else (answer, 0)
                return SimpleNamespace(stdout=out, stderr="", exited=code)
        raise AssertionError(f"not expected: {command}")

    def close(self):
        pass


def test_a_followed_job_is_read_from_where_it_stopped_until_it_ends(monkeypatch):
    import base64

    running = "9|pi|RUNNING|None|1|node01|0:01|5:00|1796412979|1796413092|1796413392|node01|printer2\n"
    ended = "9|pi|FAILED|NonZeroExitCode|1|node01|0:06|5:00|1796412979|1796413092|1796413098|node01|printer2\n"
    show = ("JobId=9 JobName=printer2 UserId=pi(1001) JobState=FAILED Reason=NonZeroExitCode ExitCode=3:0 RunTime=00:00:06 "
            "WorkDir=/home/pi StdOut=/home/pi/picluster-slurm-9.out Power=\n")
    chunk = lambda text: base64.b64encode(text.encode()).decode()
    remote = Controller(
        ("squeue", "9|pi|PENDING|Priority|1||0:00|5:00|1796412979|N/A|N/A|n/a|printer2\n"),
        ("squeue", running), ("squeue", running), ("squeue", ended),
        ("scontrol", show),
        ("tail -c +1 ", chunk("line 1\nli")), ("tail -c +10 ", chunk("ne 2\n")), ("tail -c +15 ", chunk("line 3\n")),
        ("tail -c +22 ", ""), ("[ -r ", ("", 0)),
    )
    monkeypatch.setattr(queue, "_open", lambda inv, then="": remote)
    got = []
    done = follow.follow(inventory(), "9", lambda source, data: got.append((source.task, source.node, data)), print, poll_s=0)
    assert b"".join(data for _, _, data in got) == b"line 1\nline 2\nline 3\n" and {(t, n) for t, n, _ in got} == {("batch", "node01")}
    assert (done.ref, done.state, done.reason, done.exit_code, done.active) == ("slurm:9", "FAILED", "NonZeroExitCode", 3, False)
    assert done.exit_status() == 3 and done.said() == "slurm:9 FAILED (NonZeroExitCode), exit code 3"
    squeues = [c for c in remote.asked if "squeue" in c]
    assert len(squeues) == 4 and all(c.startswith("SLURM_TIME_FORMAT=%s squeue --noheader --states=all --jobs=9 ") for c in squeues)
    # A job Slurm does not know is one line, before anything is read.
    monkeypatch.setattr(queue, "_open", lambda inv, then="": Controller(("squeue", "")))
    with pytest.raises(UsageError, match=r"^Slurm knows no job 9 \(an ended job is forgotten 10 minutes after it ends"):
        follow.follow(inventory(), "9", lambda *a: None, print, poll_s=0)


def test_several_jobs_are_cancelled_over_one_connection_and_anothers_is_named(monkeypatch):
    remote = Controller(
        ("scancel 40", ""), ("scancel 41", ("", 1)),
        ("squeue", "40|pi|CANCELLED|None|1|node01|0:07|5:00|1|2|3|node01|mine\n"),
    )

    def refused(inv, remote_, command, what, then=""):
        if command == "scancel 41":
            raise UsageError("scancel 41: scancel: error: Kill job error on job id 41: Access/permission denied")
        return remote_.run(command).stdout

    monkeypatch.setattr(queue, "_open", lambda inv, then="": remote)
    monkeypatch.setattr(queue, "_slurm", refused)
    ended, failed = queue.cancel_many(inventory(), {"40": "pi", "41": "bob"})
    assert list(ended) == ["40"] and ended["40"].state == "CANCELLED"
    assert str(failed["41"]) == "slurm:41 is bob's job: only its owner, or the cluster's operator (pi), can cancel it"
    assert [c for c in remote.asked if c.startswith("scancel")] == ["scancel 40"] and any("--jobs=40 " in c for c in remote.asked)
