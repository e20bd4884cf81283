"""A chore's side of the Slurm queue: before a node goes, it is drained with a reason and its
jobs end (or are requeued); once it is back, slurmd has registered again and the node is resumed.

    queue = Queue.of(inv)                          # ClusterError if slurmctld does not answer
    held = queue.hold(node, "reboot", requeue=False, say=print)   # drained, no job left on it
    ...                                            # the chore: reboot, upgrade, power off
    line = queue.release(held, rebooted=True, timeout=600)        # registered and resumed
    queue.undo(held)                               # the chore did not start: back to serving

Without [slurm] there is no queue and ``Queue.of`` gives one that holds nothing.  Every command
runs on the controller (``scontrol update`` needs root there).  Slurm's own ``scontrol reboot``
is not used: it needs a RebootProgram, and does nothing for an upgrade or a shutdown.
"""

import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from shlex import quote as q

from picluster.cluster.allocation import scontrol_nodes
from picluster.cluster.nodecluster import open_node
from picluster.model.inventory import Inventory, Node
from picluster.util.errors import ClusterError

Say = Callable[[str], None]
POLL_S = 3.0
# What sinfo -R shows while the chore has the node (Slurm adds who and when); a node that comes
# back drained for another reason is not resumed.
REASON = "picluster nodes {chore}"
OURS = "picluster nodes "
# The states of a job that holds its nodes (squeue --states).
HOLDING = "CONFIGURING,RUNNING,COMPLETING,SUSPENDED,STOPPED,SIGNALING"
# A job may run past its end time by KillWait (30 s) and its epilog before its nodes are free.
GRACE_S = 120.0
# scontrol's node states, as in "IDLE+DRAIN" or "DOWN+NOT_RESPONDING": flags after the base state.
UNUSABLE = re.compile(r"DOWN|DRAIN|FAIL|NOT_RESPONDING|REBOOT")


@dataclass
class Held:
    node: str
    ours: bool  # we drained it; a node drained before (by someone, for something) is left so
    started: str  # slurmd's SlurmdStartTime when it was drained: another one means a new registration


class Queue:
    """The queue of an inventory with [slurm]; see ``NoQueue`` for one without."""

    def __init__(self, inv: Inventory) -> None:
        assert inv.slurm is not None
        self.inv = inv
        self.controller = inv.node(inv.slurm.controller)

    @classmethod
    def of(cls, inv: Inventory) -> "Queue | NoQueue":
        if inv.slurm is None:
            return NoQueue()
        queue = cls(inv)
        try:
            ping = queue._run("scontrol ping")
        except ClusterError as exc:
            ping = str(exc)
        if "is UP" not in ping:
            raise ClusterError(f"the Slurm controller on {queue.controller.name} does not answer ({ping.strip() or 'no answer'}): "
                               "nothing was drained or touched; start it with 'picluster provision --only slurm,queue' first")
        return queue

    # -- before ---------------------------------------------------------------------------------

    def hold(self, node: Node, chore: str, requeue: bool, say: Say) -> Held:
        """Drain ``node`` (unless it is drained already) and return once no job holds it; with
        ``requeue``, its batch jobs are put back in the queue first.  Undone if interrupted."""
        shown = self._node(node.name)
        reason = REASON.format(chore=chore)
        # Out of service for someone else's reason (a failing card, an administrator) stays so;
        # one drained by an earlier chore (a shutdown, an interrupted reboot) is this chore's now.
        ours = not UNUSABLE.search(shown.get("State", "")) or shown.get("Reason", "").startswith(OURS)
        if ours:
            self._run(f"scontrol update nodename={q(node.name)} state=drain reason={q(reason)}", sudo=True)
        else:
            say(f"{node.name}: {shown.get('State', '?').lower()} in Slurm already ({shown.get('Reason', 'no reason given')}): left so")
        held = Held(node.name, ours, shown.get("SlurmdStartTime", ""))
        try:
            self._empty(node.name, requeue, say)
        except BaseException:
            self.undo(held)
            raise
        return held

    def _empty(self, name: str, requeue: bool, say: Say) -> None:
        jobs = self._jobs(name)
        if jobs and requeue:
            for job in jobs:
                done = self._run(f"scontrol requeue {q(job)}", sudo=True, check=False)
                say(f"{name}: job {job} ({jobs[job][0]}) " + ("requeued" if not done else f"not requeued ({done}): waiting for it"))
            jobs = self._jobs(name)
        if jobs:
            ends = max(end for _, end in jobs.values())
            say(f"{name}: drained in Slurm; waiting for job{'s' if len(jobs) > 1 else ''} {', '.join(jobs)} "
                f"({', '.join(sorted({user for user, _ in jobs.values()}))}; time limit ends {time.strftime('%H:%M:%S', time.localtime(ends))})")
        while jobs:
            ends = max(end for _, end in jobs.values())
            if time.time() > ends + GRACE_S:
                raise ClusterError(f"job{'s' if len(jobs) > 1 else ''} {', '.join(jobs)} still on it {GRACE_S:.0f} s past the time limit; "
                                   "nothing was done there (resumed in Slurm)")
            time.sleep(POLL_S)
            jobs = self._jobs(name)

    # -- after ----------------------------------------------------------------------------------

    def release(self, held: Held, rebooted: bool, timeout: float) -> str:
        """Wait for slurmd to register (from a new start, if the node rebooted), then resume the node;
        ClusterError naming the state if it stays out of service or was drained for something else."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                shown = self._node(held.node)
            except ClusterError as exc:  # the controller itself rebooting: slurmctld not up yet
                shown = {"State": f"unknown ({exc})"}
            state = shown.get("State", "")
            registered = "NOT_RESPONDING" not in state and state and not state.startswith("unknown")
            if registered and (not rebooted or shown.get("SlurmdStartTime", "") != held.started):
                break
            if time.monotonic() > deadline:
                raise ClusterError(f"slurmd did not register with the controller within {timeout:.0f} s ({_said(shown)}); "
                                   f"left drained in Slurm")
            time.sleep(POLL_S)
        if not held.ours:
            return f"left {_said(shown)} in Slurm, as it was"
        if not shown.get("Reason", "").startswith(OURS):
            raise ClusterError(f"came back drained by Slurm for something else ({_said(shown)}); left drained")
        self._run(f"scontrol update nodename={q(held.node)} state=resume", sudo=True)
        # slurmctld may mark a resumed node NOT_RESPONDING until its next ping answers: wait for that.
        deadline = max(deadline, time.monotonic() + 60)
        while UNUSABLE.search(state := self._node(held.node).get("State", "")):
            if time.monotonic() > deadline:
                raise ClusterError(f"still out of service in Slurm after resume ({state.lower()})")
            time.sleep(POLL_S)
        return "resumed in Slurm"

    def undo(self, held: Held) -> None:
        """Serve again: the chore did not start on the node (a wait that failed or was interrupted)."""
        if held.ours:
            self._run(f"scontrol update nodename={q(held.node)} state=resume", sudo=True, check=False)

    # -- the controller ---------------------------------------------------------------------------

    def _jobs(self, name: str) -> dict[str, tuple[str, float]]:
        """Job id -> (user, end of its time limit on this machine's clock) for the jobs holding
        ``name``.  squeue's time left (%L), not its end time: the controller's clock and time zone
        need not be this machine's."""
        out = self._run(f"squeue --noheader --nodelist={q(name)} --states={HOLDING} --format='%i|%u|%L'")
        jobs = {}
        for line in out.splitlines():
            job, user, left = (line.split("|") + ["", ""])[:3]
            jobs[job.strip()] = (user.strip(), time.time() + time_left(left))
        return jobs

    def _node(self, name: str) -> dict[str, str]:
        line = self._run(f"scontrol -o show node {q(name)}")
        shown = scontrol_nodes(line)
        if not shown or shown[0].get("NodeName") != name:
            raise ClusterError(f"slurmctld does not know {name}")
        # The reason holds spaces ("picluster nodes reboot [root@2026-11-28T22:10:00]"), so the
        # word split cut it: take it whole, up to the next field's name.
        reason = re.search(r" Reason=(.*?)(?= [A-Za-z]+=|$)", line.strip())
        if reason:
            shown[0]["Reason"] = reason.group(1)
        return shown[0]

    def _run(self, command: str, sudo: bool = False, check: bool = True) -> str:
        """Its output; with ``check=False`` its complaint, or "" when it exited 0."""
        remote = open_node(self.inv, self.controller)
        try:
            done = remote.run(command, sudo=sudo, check=False, timeout=60)
        finally:
            remote.close()
        said = (done.stderr or done.stdout).strip().splitlines()
        if done.exited != 0:
            why = said[-1] if said else f"exit status {done.exited}"
            if check:
                raise ClusterError(f"{command.split()[0]} on {self.controller.name}: {why}")
            return why
        return done.stdout if check else ""


class NoQueue:
    """An inventory without [slurm]: nothing to drain, wait for or resume."""

    def hold(self, node: Node, chore: str, requeue: bool, say: Say) -> Held:
        return Held(node.name, ours=False, started="")

    def release(self, held: Held, rebooted: bool, timeout: float) -> str:
        return ""

    def undo(self, held: Held) -> None:
        pass


def _said(shown: dict[str, str]) -> str:
    state = shown.get("State", "unknown").lower()
    reason = shown.get("Reason", "")
    return f"{state}: {reason}" if reason else state


def time_left(text: str) -> float:
    """Seconds in squeue's %L ("1-02:03:04", "2:03:04", "3:04"); a limit it cannot give
    ("UNLIMITED", "NOT_SET", "INVALID") counts as a minute, asked again at every poll."""
    days, _, clock = text.strip().rpartition("-")
    parts = clock.split(":")
    if not all(p.isdigit() for p in parts) or not 1 <= len(parts) <= 3 or (days and not days.isdigit()):
        return 60.0
    seconds = 0
    for part in parts:
        seconds = seconds * 60 + int(part)
    return float(int(days or 0) * 86400 + seconds)
