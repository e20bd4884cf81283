"""A sync training that loses a task goes on: the launch ends, and a new one starts from the last
checkpoint with the workers that answer, within a budget of restarts.

TorchElastic's way, not an in-graph one: a sync step's queues are built for the workers of the
launch (sync.py), so when one is lost every client stops and the coordinator starts the launch
again, as ``--resume`` would, with the worker tasks whose servers answer (their places among
the workers, and so the chief, renumbered: replica.cluster_and_task's members), a lost ps's
server started again first (``Cluster.repair``), the rate and the epoch's updates those of the
smaller update (config.lr_scale, steps_per_epoch).  The restored checkpoint is the chief's
newest, written at every epoch's end, so at most the epoch in progress is trained again.  A lost
worker whose server answers again rejoins at the next epoch's end, by the same kind of restart.

What a run lost is recorded here (``Record``) and goes into result.json's "elastic".
"""

import time
from dataclasses import dataclass, field

from picluster.cluster.probe import answers, unanswered
from picluster.model.clusterspec import Layout, Task
from picluster.util.errors import ClusterError

DEFAULT_RESTARTS = 3  # like a TFJob's backoff limit: a run that keeps failing stops, saying how to resume
PS_WAIT_S = 120.0  # how long a lost ps's node may take to answer again (a Pi's reboot)
WORKER_WAIT_S = 60.0  # how long a worker server starting on a node that answers is waited for
DEADLINE_FLOOR_S = 30.0  # the least time without a step before the run counts as stalled
DEADLINE_EPOCHS = 3.0  # ... or this many of its slowest epochs


class Lost(ClusterError):
    """A task of a running launch was lost (its client ended, its server or node stopped answering,
    or no step was made within the deadline).  ``task``: the task when one is to blame (None: a
    stall with every server answering); ``cause``: as seen."""

    def __init__(self, message: str, task: Task | None, cause: str, hint: str = "") -> None:
        super().__init__(message + hint)
        self.message, self.task, self.cause, self.hint = message, task, cause, hint
        self.epochs_done = 0  # the epochs recorded when it was lost, and when each was (the coordinator's)
        self.row_times: dict[int, float] = {}


class Rejoin:
    """A worker left out of this launch answers again: the launch ends at an epoch's end so that
    the next one trains with it."""

    def __init__(self, tasks: list[Task]) -> None:
        self.tasks = tasks
        self.epoch = 0  # the epoch whose checkpoint the next launch restores


def deadline(option: float, epoch_s: list[float]) -> float:
    """Seconds without a step after which a sync run counts as stalled: ``option`` when given
    (above 0), else DEADLINE_EPOCHS of its slowest epoch so far, at least DEADLINE_FLOOR_S."""
    if option > 0:
        return option
    return max(DEADLINE_FLOOR_S, DEADLINE_EPOCHS * max(epoch_s, default=0.0))


@dataclass
class Record:
    """The run's failures and launches, kept by the coordinator: result.json's "elastic"."""

    max_restarts: int
    owed_repair: bool = False  # a launch's clients took a server down that the run's end starts again
    failures: list[dict] = field(default_factory=list)
    launches: list[dict] = field(default_factory=list)
    restarts: int = 0

    def launched(self, members: list[int]) -> None:
        self.launches.append({"workers": list(members), "after_epoch": None, "time": time.time()})

    def lost(self, lost: Lost, epoch_done: int, row_times: dict[int, float]) -> bool:
        """Note the loss; whether the budget allows another launch."""
        self.failures.append({"task": lost.task.label if lost.task else None, "node": lost.task.node if lost.task else None,
                              "cause": lost.cause, "epochs_done": epoch_done, "time": time.time(),
                              "epoch_times": {str(e): t for e, t in row_times.items()}})
        if self.restarts >= self.max_restarts:
            return False
        self.restarts += 1
        return True

    def resumed(self, epoch: int, began: float) -> None:
        """The launch restored the checkpoint of ``epoch`` and began training at ``began`` (after a
        failure: what the failure cost)."""
        if self.launches and self.launches[-1]["after_epoch"] is None:
            self.launches[-1]["after_epoch"] = epoch
        if self.failures and "restored_epoch" not in self.failures[-1]:
            failure = self.failures[-1]
            failure["restored_epoch"] = epoch
            # From the restored checkpoint's epoch end (the work after it is lost) to training again.
            since = failure["epoch_times"].get(str(epoch), failure["time"])
            failure["seconds_lost"] = round(max(0.0, began - since), 1)
            failure["epochs_repeated"] = max(0, failure["epochs_done"] + 1 - epoch)

    def summary(self, epochs_run: int | None) -> dict:
        """What result.json says of the run's losses."""
        failures = [{k: v for k, v in f.items() if k != "epoch_times"} for f in self.failures]
        per_epoch: dict[str, int] = {}
        for launch, nxt in zip(self.launches, [*self.launches[1:], None]):
            first = (launch["after_epoch"] or 0) + 1
            last = (nxt["after_epoch"] if nxt is not None and nxt["after_epoch"] is not None else epochs_run) or 0
            for e in range(first, last + 1):
                per_epoch[str(e)] = len(launch["workers"])
        return {"max_restarts": self.max_restarts, "restarts": self.restarts, "failures": failures,
                "launches": len(self.launches), "workers_per_epoch": per_epoch,
                "epochs_repeated": sum(f.get("epochs_repeated", 0) for f in failures),
                "seconds_lost": round(sum(f.get("seconds_lost", 0.0) for f in failures), 1)}


def _node_answers(host: str) -> bool:
    """Whether the node at ``host`` answers SSH (it is up, its server may be starting); never on
    this machine's loopback, whose servers the embedded cluster's repair has started already."""
    return not host.startswith("127.") and answers(host, 22, 1.0)


def line(summary: dict) -> str:
    """result.json's "elastic" in one line: what the run lost and how it went on."""
    failures = summary.get("failures") or []
    lost = "; ".join(f"{f.get('task') or 'a stall'}{' on ' + f['node'] if f.get('node') else ''} after epoch {f.get('epochs_done')} "
                     f"({f.get('cause')})" for f in failures)
    per = summary.get("workers_per_epoch") or {}
    counts = sorted(set(per.values()))
    workers = f", {min(counts)}-{max(counts)} workers an epoch" if len(counts) > 1 else ""
    return (f"lost {len(failures)} time{'s' if len(failures) != 1 else ''}: {lost}; {summary.get('restarts', 0)} restart"
            f"{'s' if summary.get('restarts', 0) != 1 else ''}, {summary.get('epochs_repeated', 0)} epoch(s) trained again, "
            f"{summary.get('seconds_lost', 0):.0f} s lost{workers}") if failures else (
            f"{summary.get('launches', 1)} launches (a worker rejoined){workers}")


def answering(tasks: list[Task]) -> list[Task]:
    """Those of ``tasks`` whose servers answer now (a few tries: a loaded Pi may be slow)."""
    silent = unanswered(tasks, tries=3, timeout=2.0, pause=0.5)
    return [t for t in tasks if t not in silent]


def members_after(cluster, used: Layout, lost: Lost, say) -> list[int]:
    """The worker tasks of the next launch: a lost ps's server started again (``Cluster.repair``,
    which starts whatever is down where its node answers; the ps waited for up to PS_WAIT_S, a
    Pi's reboot), then every worker whose server answers (a lost worker's server is not waited
    for: it rejoins once it answers).  Raises ClusterError when a ps cannot be brought back or no
    worker answers."""
    ps = used.ps
    until = time.monotonic() + PS_WAIT_S
    while True:
        said = ""
        if unanswered(ps, tries=2, timeout=2.0, pause=0.5):
            try:
                cluster.repair()  # the tasks that are down, started again on the nodes that answer
            except ClusterError as exc:
                said = str(exc)
        gone = unanswered(ps, tries=2, timeout=2.0, pause=0.5)
        if not gone:
            break
        if time.monotonic() > until:
            raise ClusterError(f"{gone[0].label} on {gone[0].node} did not come back within {PS_WAIT_S:.0f} s"
                               + (f" ({said})" if said else ""))
        time.sleep(5.0)
    # A lost ps takes every worker's step with it, and a worker whose cancelled client would not
    # stop takes its server down (door.py): those servers, on nodes that answer, are started
    # again and waited for, up to WORKER_WAIT_S (and so when no worker answers at all).  After a
    # worker's loss the others go on at once: it rejoins once its server answers again (the
    # run's end starts what its clients took down).
    workers = answering(used.workers)
    down = [t for t in used.workers if t not in workers and _node_answers(t.host)]
    ps_lost = lost.task is not None and lost.task.job == "ps"
    if down and (ps_lost or not workers):
        say(f"starting {', '.join(t.label + ' on ' + t.node for t in down)} again")
        try:
            cluster.repair()
        except ClusterError as exc:
            say(f"could not start them again ({exc})")
        until = time.monotonic() + WORKER_WAIT_S
        while True:
            workers = answering(used.workers)
            if all(t in workers for t in down) or time.monotonic() > until:
                break
            time.sleep(1.0)
    if not workers:
        raise ClusterError("no worker's server answers")
    return [t.index for t in workers]
