"""Why a Slurm job ended before its script ran, or waits for nodes that cannot run it, said with
what to do: for `picluster logs` and `picluster jobs slurm:ID`, which would otherwise find no output.

Slurm fails a job whose node cannot open its output file (a folder only the submitting machine
has, one that does not exist, one its owner may not write) before the script runs: squeue shows
FAILED with the reason JobLaunchFailure after 0 s, exit code 0:53; sacct keeps FAILED and the
exit code, not the reason.  The error itself is only in the batch node's slurmd log (root's),
which the inventory's user reads with sudo over SSH; a person on the controller gets what
Slurm's records and the share show.  Everything read is untrusted text: fields are taken by name,
one word each, and a line of the log is quoted, never run.
"""

import re
import shlex
from dataclasses import dataclass
from pathlib import PurePosixPath

from picluster.cluster.allocation import SINFO_NODES, not_serving, sinfo_states
from picluster.cluster.here import Here
from picluster.cluster.nodecluster import open_node
from picluster.cluster.ssh import Remote
from picluster.jobs.slurm import origin as origins
from picluster.model import nodeset
from picluster.model.inventory import Inventory
from picluster.util.errors import ClusterError, UsageError

SLURMD_LOG = "/var/log/slurm/slurmd.log"  # slurm.conf's SlurmdLogFile (provision/files/slurm.conf.j2)
LAUNCH = "JobLaunchFailure"
WAITING = ("ReqNodeNotAvail", "NodeDown", "launch_failed_requeued_held")  # pending for nodes that cannot run it
SACCT = "JobID,User,State,ExitCode,ElapsedRaw,NodeList,WorkDir"  # the folder last: it may hold anything
_FIELD = re.compile(r"(?:^|\s)([A-Za-z]+)=(\S*)")
_OPEN = re.compile(r"Could not open (stdout|stderr|stdin) file (/\S+): (.+)$")
_ID = re.compile(r"\d{1,12}")
_RUN = re.compile(r"(?:(\d+)-)?(\d+):(\d\d):(\d\d)")
START_AGAIN = "'picluster provision -i INVENTORY --only slurm,queue' starts a stopped slurmd"


@dataclass(frozen=True)
class Record:
    """One job as Slurm's records have it (scontrol, or sacct's fewer fields)."""

    id: str
    user: str
    state: str
    reason: str
    exit_code: str  # "exit:signal"
    run_s: int
    nodes: str  # the allocation, a node set
    batch_host: str  # where the script was to run: the allocation's first node
    work_dir: str = ""
    stdout: str = ""
    stderr: str = ""
    restarts: int = 0

    @property
    def unstarted(self) -> bool:
        """Ended before its script ran: a launch failure, or a failure within its first second
        with no exit status of its own (sacct keeps no reason)."""
        quick = self.run_s <= 1 and self.exit_code.startswith("0:") and self.exit_code != "0:0"
        return self.state == "FAILED" and (self.reason == LAUNCH or quick)

    @property
    def explained(self) -> bool:
        """Whether there is more to say than the output would: it never ran, or a node failed it or holds it."""
        waiting = self.state == "PENDING" and any(w in self.reason for w in WAITING)
        return self.unstarted or self.state in ("NODE_FAIL", "BOOT_FAIL") or waiting


def from_scontrol(text: str) -> Record | None:
    """``scontrol -o show job ID``'s line, or None when it names no job."""
    fields = dict(_FIELD.findall(text))
    if not _ID.fullmatch(fields.get("JobId", "")):
        return None
    run = _RUN.fullmatch(fields.get("RunTime", ""))
    seconds = 0
    if run:
        days, hours, minutes, secs = (int(g or 0) for g in run.groups())
        seconds = ((days * 24 + hours) * 60 + minutes) * 60 + secs
    restarts = fields.get("Restarts", "0")
    return Record(fields["JobId"], fields.get("UserId", "").split("(", 1)[0], fields.get("JobState", ""),
                  fields.get("Reason", "").replace("_", " "), fields.get("ExitCode", ""), seconds, fields.get("NodeList", ""),
                  fields.get("BatchHost", ""), fields.get("WorkDir", ""), fields.get("StdOut", ""), fields.get("StdErr", ""),
                  int(restarts) if restarts.isdigit() else 0)


def from_sacct(text: str, job: str) -> Record | None:
    """sacct's line for the job (``--parsable2 --allocations --format=SACCT``): no reason, no output files."""
    for line in text.splitlines():
        parts = line.split("|", 6)
        if len(parts) == 7 and parts[0] == job and parts[4].isdigit():
            jid, user, state, code, elapsed, nodes, work = parts
            first = (_nodes(nodes) or [""])[0]
            return Record(jid, user, state.split(" ", 1)[0], "", code, int(elapsed), nodes, first, work)
    return None


def ask(inv: Inventory, remote: Remote | Here, job: str, shown: str | None = None) -> Record | None:
    """The job's record from the controller: scontrol's (``shown``, when the caller has asked),
    else, with accounting, sacct's."""
    if shown is None:
        shown = remote.run(f"scontrol -o show job {job}", check=False).stdout
    record = from_scontrol(shown)
    if record is None and inv.slurm is not None and inv.slurm.accounting:
        out = remote.run(f"sacct --noheader --parsable2 --allusers --allocations --jobs={job} --format={SACCT}", check=False).stdout
        record = from_sacct(out, job)
    return record


def why(inv: Inventory, remote: Remote | Here, record: Record) -> str:
    """What happened to a job whose record is ``explained``, and what to do: the node's log when
    the inventory's user can read it (not here, as a person on the controller), the nodes' states,
    and what the controller sees of the job's folders on the share."""
    logged = node_log(inv, record) if record.unstarted and not isinstance(remote, Here) else []
    down = not_serving(sinfo_states(remote.run(SINFO_NODES, check=False).stdout))
    checked = {}
    if isinstance(remote, Here):  # as the job's owner, usually: they read their own job's output
        for path in {record.stdout, record.stderr} - {""}:
            folder = str(PurePosixPath(path).parent)
            if _on_share(inv, folder):
                found = remote.run(f"test -d {shlex.quote(folder)} || echo missing; test -w {shlex.quote(folder)} || echo unwritable",
                                   check=False).stdout.split()
                checked[folder] = found[0] if found else "ok"
    return explain(inv, record, logged, down, checked)


def node_log(inv: Inventory, record: Record) -> list[str]:
    """The error lines the batch node's slurmd logged for the job (root's file: sudo, never a
    password); none when the node or its log cannot be read."""
    if record.batch_host not in {n.name for n in inv.nodes}:
        return []
    try:
        remote = open_node(inv, inv.node(record.batch_host))
    except ClusterError:
        return []
    try:
        done = remote.run(f"grep -F -e {shlex.quote(f'[{record.id}.batch]')} {SLURMD_LOG} | grep -F 'error:' | tail -n 5",
                          sudo=True, check=False)
    except ClusterError:
        return []
    finally:
        remote.close()
    return [line.split("error: ", 1)[1].strip() for line in done.stdout.splitlines() if "error: " in line]


def _on_share(inv: Inventory, path: str) -> bool:
    return PurePosixPath(inv.data_dir) in PurePosixPath(path).parents or path == str(inv.data_dir)


def explain(inv: Inventory, record: Record, logged: list[str], down: dict[str, str], checked: dict[str, str]) -> str:
    """The one line `logs` and `jobs slurm:ID` say: what happened, from what, and the fix."""
    host = record.batch_host or record.nodes
    job = f"slurm:{record.id}"
    if record.state == "PENDING":
        held = {n: s for n, s in down.items() if n in _nodes(record.nodes)}
        states = "; ".join(f"{nodes} {state}" for state, nodes in sorted(nodeset.fold_by(held).items())) or "not available"
        failed = f"; its launch on {host} failed, and Slurm put it back in the queue" if record.restarts else ""
        return (f"{job} is PENDING ({record.reason}): it waits for {record.nodes or 'its nodes'}, {states}{failed}; it starts once "
                f"they serve again: {START_AGAIN}, or cancel it and submit it for other nodes")
    if record.state in ("NODE_FAIL", "BOOT_FAIL"):
        now = "; ".join(f"{n} now {down[n]}" for n in _nodes(record.nodes) if n in down) or "back in service now"
        return (f"{job} {record.state}: {record.nodes} stopped answering Slurm while it ran ({now}); bring the node back "
                f"({START_AGAIN}, 'picluster nodes reboot NODE' reboots one) and submit the job again")
    work = origins.work_folder(inv, record.user)
    where = f"your work folder {work}" if work else f"the share ({inv.data_dir})"
    elsewhere = (f"submit from a folder on the share ({where}: '#$ -cwd' then runs the job there), or give its output "
                 f"(-o, --output) a path there")
    head = (f"{job} FAILED at launch on {host} ({LAUNCH}), before its script ran" if record.reason == LAUNCH else
            f"{job} FAILED after {record.run_s} s on {host} (exit code {record.exit_code}), before its script ran")
    for line in logged:
        opened = _OPEN.search(line)
        if opened is None:
            continue
        stream, path, error = opened.groups()
        folder = str(PurePosixPath(path).parent)
        said = f"{host}'s slurmd: {line}"
        if "No such file" in error and not _on_share(inv, folder):
            return (f"{head}: {host} has no folder {folder} for its {stream} file ({said}): that folder is not on the share "
                    f"the nodes mount; {elsewhere}")
        if "No such file" in error:
            return (f"{head}: there is no folder {folder} for its {stream} file ({said}): make it (mkdir -p {folder}) or give "
                    "the output a folder that exists, and submit again")
        if "Permission denied" in error:
            return f"{head}: {record.user or 'its owner'} may not write {path} ({said}): give the output a path in {where}, and submit again"
        return f"{head}: {said}"
    if logged:
        return f"{head}: {host}'s slurmd: {logged[-1]}"
    look = f"{host}'s log says why: sudo grep -F '[{record.id}.batch]' {SLURMD_LOG} there"
    for path in dict.fromkeys(p for p in (record.stdout, record.stderr, record.work_dir) if p):
        folder = path if path == record.work_dir else str(PurePosixPath(path).parent)
        if folder == f"/home/{record.user}":  # every node has it (the users step makes it)
            continue
        if not _on_share(inv, folder):
            return (f"{head}: {path} is not on the share the nodes mount ({inv.data_dir}), so {host} most likely has no folder "
                    f"{folder} ({look}); {elsewhere}")
        if checked.get(folder) == "missing":
            return f"{head}: there is no folder {folder} for {path}: make it (mkdir -p {folder}) or give the output a folder that exists"
        if checked.get(folder) == "unwritable":
            return f"{head}: {record.user or 'its owner'} may not write in {folder}: give the output a path in {where}"
    return f"{head}: Slurm records no more ({look})"


def _nodes(text: str) -> list[str]:
    try:
        return nodeset.expand(text) if text and not any(c.isspace() for c in text) else []
    except UsageError:  # untrusted text ("None assigned"): a set that does not parse names no node
        return []
