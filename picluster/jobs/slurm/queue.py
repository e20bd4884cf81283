"""The Slurm queue, asked on the controller over SSH: submit, list, cancel, and a job's output.

Everything Slurm prints is read as untrusted text: a job id must be digits, fields are split
into at most the columns asked for (a job's name, last, may hold anything).
"""

import base64
import logging
import re
import shlex
import time
from dataclasses import dataclass, replace

from picluster.cluster.allocation import SINFO_NODES, not_serving, sinfo_states
from picluster.cluster.here import Here, holds
from picluster.cluster.hostkeys import HostKeyRefused
from picluster.cluster.nodecluster import open_node
from picluster.cluster.ssh import CommandFailed, Remote
from picluster.jobs.slurm import failure
from picluster.jobs.slurm.batch import OUTPUT, Request, sbatch_args, script
from picluster.jobs.slurm.rows import ENDED as ENDED  # re-exported: the states a job ends in
from picluster.jobs.slurm.rows import EPOCH, FORMAT, ID, SACCT, SlurmJob, parse, parse_sacct
from picluster.model import nodeset
from picluster.model.fanout import GroupError, fan_out
from picluster.model.inventory import Inventory, Node
from picluster.util.errors import ClusterError, PiclusterError, UsageError

# -v: the Slurm commands are logged where they run (cluster/ssh.py, cluster/here.py); here, what
# they carry that their command line hides: a batch script travels base64-encoded (--debug shows it).
log = logging.getLogger(__name__)

CANCEL_WAIT_S = 60.0
ACCOUNTED_DAYS = 7  # how far back `picluster jobs` lists ended jobs from the accounting records


def controller(inv: Inventory) -> Node:
    if inv.slurm is None:
        raise UsageError(f"inventory {inv.source or inv.name} has no [slurm] table: Slurm jobs need one (see docs/slurm.md)")
    return inv.node(inv.slurm.controller)


@dataclass(frozen=True)
class Submitted:
    id: str
    unavailable: dict[str, str]  # node -> state (reason) of the partition's nodes Slurm cannot use now


def _down(inv: Inventory, remote: Remote | Here) -> dict[str, str]:
    """The partition's nodes Slurm will not start a job on now: node -> state (reason); none when
    sinfo cannot say (the caller has its own error to report, or has already shown the queue)."""
    assert inv.slurm is not None  # controller(inv) has refused an inventory without [slurm]
    sinfo = f"{SINFO_NODES} --partition={shlex.quote(inv.slurm.partition)}"
    return not_serving(sinfo_states(remote.run(sinfo, check=False).stdout))


def _open(inv: Inventory, then: str = "") -> Remote | Here:
    """The controller: this machine itself when picluster runs there (as whoever typed the command),
    else over SSH as the inventory's user."""
    node = controller(inv)
    if holds(node.address):
        return Here(node.name)
    try:
        return open_node(inv, node)
    except HostKeyRefused as exc:  # not the user's input: whoever answers there is not trusted (exit 1)
        raise ClusterError(f"Slurm's controller {node.name}: {exc}{then}") from None
    except ClusterError as exc:
        raise UsageError(f"Slurm's controller {node.name} cannot be reached ({exc}){then}") from None


class ControllerSilent(UsageError):
    """slurmctld does not answer: a Slurm command waits for it (MessageTimeout and retries, 10 to
    20 s) before saying so, and asking it anything more would wait as long again."""


def _slurm(inv: Inventory, remote: Remote | Here, command: str, what: str, then: str = "") -> str:
    """A Slurm command's output; its refusal ("sbatch: error: ...") as one line, exit 2."""
    try:
        return remote.run(command, timeout=60).stdout
    except CommandFailed as exc:
        why = str(exc).split(": ", 1)[-1]
        if "not found" in why:
            why = "Slurm is not installed there: run 'picluster provision' with the [slurm] table"
        elif "Unable to contact slurm controller" in why:
            # The node answers SSH but slurmctld does not: name the daemon and the way to start it.
            raise ControllerSilent(f"Slurm's controller daemon on {controller(inv).name} does not answer "
                             f"(slurmctld stopped?): 'picluster provision -i INVENTORY --only slurm,queue' starts it{then}") from None
        raise UsageError(f"{what}: {why}{then}") from None


def submit(inv: Inventory, req: Request) -> Submitted:
    """Queue the job; its Slurm id, and the nodes Slurm cannot run it on now."""
    text = script(inv, req)
    encoded = base64.b64encode(text.encode()).decode()
    log.info("[%s] sbatch: a batch script of %d lines, base64-encoded in the commands below (--debug shows it)",
             controller(inv).name, len(text.splitlines()))
    log.debug("[%s] the batch script:\n%s", controller(inv).name, text.rstrip("\n"))
    args = sbatch_args(inv, req)  # shell words, each quoted (batch.py)
    nothing = "; nothing was queued"
    remote = _open(inv, nothing)
    try:
        # A request Slurm refuses after giving it an id (more memory than any node has) would stay
        # in the queue as FAILED: ask with --test-only first, which queues nothing.
        try:
            _slurm(inv, remote, f"echo {encoded} | base64 -d | sbatch --test-only {args}", "Slurm refused the job")
        except ControllerSilent as silent:  # sinfo would wait for it too, for no more to say
            raise UsageError(f"{silent}{nothing}") from None
        except UsageError as refused:
            # --test-only also refuses a job that needs a node that is down now (sbatch would
            # leave it pending): name those nodes, since they are the likelier cause.
            down = _down(inv, remote)
            if not down:
                raise UsageError(f"{refused}{nothing}") from None
            raise UsageError(f"{refused}; not available now: {describe(down)} (bring {'it' if len(down) == 1 else 'them'} back with "
                             f"'picluster provision -i INVENTORY --only slurm,queue', or ask for fewer nodes){nothing}") from None
        out = _slurm(inv, remote, f"echo {encoded} | base64 -d | sbatch --parsable {args}", "Slurm refused the job", nothing)
        job = out.strip().split(";", 1)[0]
        if not ID.fullmatch(job):
            raise ClusterError(f"sbatch answered {out.strip()[:80]!r}, not a job id")
        down = _down(inv, remote)
    finally:
        remote.close()
    return Submitted(job, down)


def describe(states: dict[str, str]) -> str:
    """Nodes grouped by state: ``node[02,05] down (test-stopped); node07 drained (fan)``."""
    return "; ".join(f"{nodes} {state}" for state, nodes in sorted(nodeset.fold_by(states).items()))


def listing(inv: Inventory, job: str | None = None) -> list[SlurmJob]:
    """The queue (pending, running and recently ended jobs), or some of its jobs (``12,13``: anyone's)."""
    remote = _open(inv)
    try:
        return _squeue(inv, remote, job, everyone=True)
    finally:
        remote.close()


def overview(inv: Inventory, everyone: bool = False, since: float | None = None) -> tuple[list[SlurmJob], dict[str, str]]:
    """The caller's jobs in the queue (everyone's: all of them) and the partition's nodes Slurm
    cannot use now, over one connection.  The caller is whoever Slurm's commands run as: the
    person logged in on the controller, or the inventory's user over SSH.  ``since``: with
    accounting, the ended jobs sacct keeps from then on (else those of the last week)."""
    remote = _open(inv)
    try:
        return _squeue(inv, remote, everyone=everyone, since=since), _down(inv, remote)
    finally:
        remote.close()


def _squeue(inv: Inventory, remote: Remote | Here, job: str | None = None, everyone: bool = True,
            since: float | None = None) -> list[SlurmJob]:
    """squeue's jobs; with accounting, the ended jobs slurmctld has forgotten, from sacct, after
    them, and every job's exit code (squeue has none)."""
    which = f" --jobs={job}" if job is not None else ("" if everyone else " --me")
    try:
        out = _slurm(inv, remote, f"{EPOCH} squeue --noheader --states=all{which} --format={shlex.quote(FORMAT)}", "squeue")
    except UsageError as exc:
        if job is not None and "Invalid job id" in str(exc):
            out = ""
        else:
            raise
    rows = parse(out)
    assert inv.slurm is not None  # controller(inv) has refused an inventory without [slurm]
    if inv.slurm.accounting:
        accounted = {r.id: r for r in _sacct(inv, remote, job, everyone, since)}
        rows = [replace(r, exit_code=accounted[r.id].exit_code) if r.id in accounted else r for r in rows]
        seen = {r.id for r in rows}
        rows += [r for r in accounted.values() if r.id not in seen and not r.active]
    return rows


def _sacct(inv: Inventory, remote: Remote | Here, job: str | None = None, everyone: bool = True,
           since: float | None = None) -> list[SlurmJob]:
    """Jobs as slurmdbd recorded them (one line per job, not per step), of the last week or since
    ``since``: the caller's only, as sacct gives them without --allusers, unless everyone's."""
    ago = f"{max(0, int(time.time() - since))}seconds" if since is not None else f"{ACCOUNTED_DAYS}days"
    which = f"--jobs={job}" if job is not None else f"--starttime=now-{ago}"
    who = " --allusers" if everyone else ""
    return parse_sacct(_slurm(inv, remote, f"{EPOCH} sacct --noheader --parsable2{who} --allocations {which} --format={SACCT}", "sacct"))


def find(inv: Inventory, job: str) -> SlurmJob:
    remote = _open(inv)
    try:
        return current(inv, remote, job)
    finally:
        remote.close()


def connect(inv: Inventory) -> Remote | Here:
    """The controller, for several questions over one connection (a follower's): close it after."""
    return _open(inv)


def current(inv: Inventory, remote: Remote | Here, job: str) -> SlurmJob:
    """One job as the queue (and its accounting) shows it now, asked over ``remote``."""
    found = [j for j in _squeue(inv, remote, job) if j.id == job]
    if not found:
        raise UsageError(unknown(inv, job))
    return found[0]


def unknown(inv: Inventory, job: str) -> str:
    kept = "its accounting keeps ended jobs" if inv.slurm is not None and inv.slurm.accounting else \
        "an ended job is forgotten 10 minutes after it ends; [slurm] accounting = true keeps them"
    return f"Slurm knows no job {job} ({kept})"


def cancel(inv: Inventory, job: str, wait_s: float = CANCEL_WAIT_S, owner: str | None = None) -> SlurmJob:
    """scancel (the caller has found the job active, `owner`'s), then the job as Slurm shows it
    once it has ended.  Slurm lets a person cancel their own jobs only (an operator, anyone's)."""
    ended, refused = cancel_many(inv, {job: owner}, wait_s)
    if job in refused:
        raise refused[job]
    return ended[job]


def cancel_many(inv: Inventory, jobs: dict[str, str | None], wait_s: float = CANCEL_WAIT_S
                ) -> tuple[dict[str, SlurmJob], dict[str, PiclusterError]]:
    """scancel each of ``jobs`` (found active; id -> its owner) over one connection, then wait
    until each has ended: the jobs as Slurm shows them then, and the ones it did not cancel
    with why (another's job, still running after ``wait_s``)."""
    refused: dict[str, PiclusterError] = {}
    ended: dict[str, SlurmJob] = {}
    remote = _open(inv)
    try:
        for job, owner in jobs.items():
            try:
                _slurm(inv, remote, f"scancel {job}", f"scancel {job}")
            except UsageError as exc:  # scancel exits non-zero on a refusal, its reason on the last line
                if "Access/permission denied" in str(exc):
                    whose = f"{owner}'s" if owner else "another user's"
                    exc = UsageError(f"slurm:{job} is {whose} job: only its owner, or the cluster's operator ({inv.user}), can cancel it")
                refused[job] = exc
        waiting = [job for job in jobs if job not in refused]
        deadline = time.monotonic() + wait_s
        while waiting:
            now = {r.id: r for r in _squeue(inv, remote, ",".join(waiting))}
            ended.update({job: now[job] for job in waiting if job in now and not now[job].active})
            waiting = [job for job in waiting if job not in ended]
            if waiting and time.monotonic() > deadline:
                for job in waiting:
                    state = now[job].state if job in now else "unknown to it"
                    refused[job] = ClusterError(f"Slurm job {job} is still {state} {wait_s:.0f} s after scancel")
                break
            if waiting:
                time.sleep(0.5)
    finally:
        remote.close()
    return ended, refused


def why(inv: Inventory, job: str) -> str | None:
    """Why the job ended before its script ran, or waits for nodes that cannot run it, and what
    to do (failure.py); None when its state says it all."""
    remote = _open(inv)
    try:
        record = failure.ask(inv, remote, job)
        return failure.why(inv, remote, record) if record is not None and record.explained else None
    finally:
        remote.close()


def output(inv: Inventory, job: str) -> str:
    """The job's output file, read on the controller (as the caller there): where Slurm says it
    writes it while it remembers the job (a script's own --output on the share), else, with
    [users], in the caller's work folder on the share; else (or not there) on the node that ran
    its batch script (that file, or picluster's in the user's home), looked for on every node at
    once (one SSH connection each), so it is found after Slurm has forgotten which node that was.
    A job that never ran has no output: why it did not, and what to do, instead (failure.py)."""
    name = OUTPUT.replace("%j", job)
    where = [f'"$HOME"/{name}']  # looked for on the nodes
    try:
        remote = _open(inv)
    except UsageError:  # the controller unreachable: the nodes may still hold the file
        pass
    else:
        try:
            shown = remote.run(f"scontrol -o show job {job}", check=False).stdout
            record = failure.ask(inv, remote, job, shown)
            if record is not None and record.explained:  # no output to find: why, and what to do
                what = failure.why(inv, remote, record)
                raise (UsageError(f"no output yet: {what}") if record.state == "PENDING" else ClusterError(what))
            if record is not None and record.state == "PENDING":  # nothing to look for on the nodes
                raise UsageError(f"no output yet: slurm:{job} is PENDING ({record.reason}): 'picluster jobs slurm:{job}' shows it")
            said = re.search(r"(?:^|\s)StdOut=(/\S+)", shown)  # a path with spaces is not looked for here
            places = [shlex.quote(said.group(1))] if said else []
            where = places + where  # a file on the batch node's own disk (the home) is read there
            if inv.users:
                places.append(f'"{inv.data_dir}/users/$(id -un)/{name}"')
            for place in places:
                done = remote.run(f"cat -- {place}", check=False)
                if done.exited == 0:
                    return done.stdout
        finally:
            remote.close()

    def read(node: Node) -> str | None:
        remote = open_node(inv, node)
        try:
            for place in where:
                done = remote.run(f"cat -- {place}", check=False)
                if done.exited == 0:
                    return done.stdout
        finally:
            remote.close()
        return None

    found = fan_out(read, inv.nodes)
    refused: dict[str, BaseException] = {node: exc for node, exc in found.failed.items() if isinstance(exc, HostKeyRefused)}
    if refused:  # said in full, never folded into "not reached"
        raise GroupError(f"logs of Slurm job {job}", refused)
    texts = [text for text in found.succeeded.values() if text is not None]
    if texts:
        return texts[0]
    unreached = sorted(found.failed)
    missed = f" (not reached: {nodeset.fold(unreached)})" if unreached else ""
    raise UsageError(f"no output of Slurm job {job} on any node{missed}: it has not started yet, or it was not submitted by picluster")
