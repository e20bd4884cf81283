"""Following a training until it ends, in the one watch loop (jobs/watch.py): the chief's files
(its records, progress and resume note, mirrored from its node), each client's exit judged (a sync
run fails with any worker, an async one goes on without it), the servers still needed probed, and
what a failure says in one line (its cause: a server gone, clients that died at start-up, a
client's own usage or storage error)."""

import json
import os
import time
from dataclasses import dataclass
from pathlib import Path

from picluster.cluster.exits import Exit, Exited, file_tail
from picluster.cluster.lifetime import last_line
from picluster.cluster.probe import unanswered
from picluster.jobs.controller import Running
from picluster.jobs.har import clients, elastic, metrics, trained
from picluster.jobs.har.config import TrainConfig
from picluster.jobs.har.progress import Follower
from picluster.jobs.har.rundir import RunDir, read_json
from picluster.jobs.watch import DONE, GOES_ON, watch
from picluster.util.errors import STORAGE_EXIT, ClusterError, PiclusterError, StorageError, UsageError

POLL_S = 0.2
REMOTE_POLL_S = 1.0  # each poll of a node's chief is an SSH round trip
CHECK_S = 5.0  # seconds between checks that the cluster's servers still answer
SETTLE_S = 60.0  # the most a restart waits for the evaluator to catch up with the chief


@dataclass(frozen=True)
class Watching:
    """What the watch knows of a launch: its id (``launch``), the servers it still needs
    (``tasks``), the evaluator beside the coordinator, the launch's worker tasks (to name a lost
    one), the worker tasks left out of it (``missing``: their return at an epoch's end is a
    Rejoin), the deadline for a step (``deadline_s``, 0: the adaptive one), and whether the run
    trained before this launch (``relaunch``: a client killed or a node lost during its start-up
    is then a loss too; a client's own failure still ends the run: it would fail again)."""

    launch: str = ""
    tasks: tuple = ()
    evaluator: "clients.Evaluator | None" = None
    workers: tuple = ()
    missing: tuple = ()
    deadline_s: float = 0.0
    relaunch: bool = False


def follow(run: RunDir, config: TrainConfig, running: list, job: Running, quiet: bool = False,
           launch: Watching = Watching()) -> "dict | elastic.Lost | elastic.Rejoin":
    """Follow the chief's records until the launch ends (the watch loop, jobs/watch.py), and
    return what happened: the result (result.json's contents, and the workers lost on the way)
    when the run ended, at the chief's exit or, with an evaluator beside us, the evaluator's (it
    writes result.json once the target is reached or the last epoch is in); elastic.Lost when a
    sync run lost a task once training had begun, or made no step within the deadline (the
    coordinator may start it again); elastic.Rejoin when a worker left out answers again at an
    epoch's end.  A failure the run cannot go on after is raised (one line)."""
    training = _Training(run, config, running, job, quiet, launch)
    failure = watch(training)
    outcome = training.outcome or failure
    if isinstance(outcome, (elastic.Lost, elastic.Rejoin)):
        # What happened is decided: the clean-up only completes the records before the next launch.
        training.settle(outcome if isinstance(outcome, elastic.Lost) else None)
        return outcome
    if failure is not None:
        raise failure
    # result.json is the chief's alone; the workers lost on the way are the coordinator's to tell.
    return json.loads(run.result.read_text()) | {"lost_workers": sorted(training.lost)}


class _Training:
    """A training as the watch loop sees it (watch.Watched): the chief's files followed each round,
    each client's exit judged (a sync run fails with a worker, an async one goes on without it),
    the servers still needed probed every CHECK_S."""

    probe_s = CHECK_S
    probe_patience = (3, 2.0, 0.5)  # a Pi's server under a training's load may be slow to accept

    def __init__(self, run: RunDir, config: TrainConfig, running: list, job: Running, quiet: bool, launch: Watching) -> None:
        self.run, self.config, self.running, self.job, self.tasks, self.launch = run, config, running, job, tuple(launch.tasks), launch.launch
        evaluator = launch.evaluator
        self.shown_progress = Follower(config, job, quiet)
        self.chief, self.evaluator = running[0], evaluator
        # A node's chief's files come back over SSH: a round trip each REMOTE_POLL_S at most.  With an
        # evaluator here the rounds between are local looks, so its verdict is seen within POLL_S.
        self.sync_every = 0.0 if self.chief.folder is None else REMOTE_POLL_S
        self.poll_s = POLL_S if self.chief.folder is None or evaluator is not None else REMOTE_POLL_S
        self.synced = float("-inf")  # the last sync's time.monotonic()
        # The evaluator first: in a round where both end, its verdict (the result) is the run's.
        self.clients = ({evaluator.label: evaluator} if evaluator is not None else {}) | {c.label: c for c in running}
        # Keyed by write time: on --resume the chief drops rows it will redo, and only new ones show.
        self.shown = {r.get("time") for r in metrics.read_rows(run.metrics)}
        self.lost: set[int] = set()
        self.stamps: dict[Path, tuple] = {}
        self.earlier_live = _live_time(run)  # an earlier launch's live.json, still here: not this launch's step
        self.started = False  # the chief is training (live.json, or an epoch's row): deaths from now on are mid-run
        self.relaunch = launch.relaunch
        self.chief_done = False  # the chief finished its epochs and its files are here: the evaluator finishes the rest
        self.workers = {t.index: t for t in launch.workers}
        self.missing = list(launch.missing)
        self.deadline_s = launch.deadline_s
        self.moved = time.monotonic()  # the last sign of a step: a new live.json or epoch row
        self.epoch_s: list[float] = []
        self.epochs_done = 0
        self.row_times: dict[int, float] = {}  # each epoch's row: when the work after its checkpoint began
        self.sync = config.mode == "sync" and not config.standalone and len(running) > 1
        self.resume_said = False
        self.looked = time.monotonic()  # the last look at the missing workers' servers
        self.answered: list = []  # those of them that answered it
        # What ended the launch other than the run's end or a failure: a Rejoin, or a stall (a Lost).
        self.outcome: elastic.Lost | elastic.Rejoin | None = None

    def handles(self) -> dict:
        return self.clients

    def follow(self) -> bool:
        if self.evaluator is not None and _stopped_at_target(self.run):
            # The evaluator stopped the run at the target (result.json, its last write): the clients,
            # mid-epoch, are stopped now, and its own end (TensorFlow's teardown, about 2 s) is
            # waited for beside theirs.  A run of all its epochs ends as its processes end.
            self._records()  # the rows written as it ended
            return True
        if not self.chief_done and time.monotonic() - self.synced >= self.sync_every:
            self._sync_chief(self.chief.poll() == 0)
        if self.missing and time.monotonic() - self.looked >= CHECK_S:
            self.looked = time.monotonic()
            self.answered = [t for t in self.missing if not unanswered([t], tries=1, timeout=1.0)]
        if self._records() and self.missing and self.answered and not self.run.result.exists():
            # At an epoch's end (its checkpoint written): a worker left out whose server answered the
            # last look (every CHECK_S, one try each: the loop must not wait on a cut link) rejoins.
            self.outcome = elastic.Rejoin(self.answered)
            return True
        if self.sync and self.started and not self.run.result.exists():
            limit = elastic.deadline(self.deadline_s, self.epoch_s)
            if time.monotonic() - self.moved > limit:
                self.outcome = self._lost(None, f"no step for {limit:.0f} s", f"no step was made for {limit:.0f} s")
                return True
        return False

    def _sync_chief(self, final: bool) -> None:
        self.synced = time.monotonic()
        self.chief.sync(final=final)
        self.chief_done = final

    def _records(self) -> bool:
        """What the chief (or the evaluator) wrote since the last look, as events; whether an epoch
        ended.  Reading only: what a new row means for the launch is the caller's to decide (the
        clean-up before a restart reads on, whoever answers)."""
        run, stamps, ended = self.run, self.stamps, False
        if _changed(run.metrics, stamps):
            for row in metrics.read_rows(run.metrics):
                if row.get("time") not in self.shown:
                    self.shown.add(row.get("time"))
                    self.started = True  # an epoch is done (a short one may end before any live.json)
                    self.moved = time.monotonic()
                    self.shown_progress.epoch(row)
                    self.epochs_done = int(row["epoch"])
                    self.row_times[self.epochs_done] = float(row.get("time") or time.time())
                    if row.get("epoch_s") not in (None, ""):
                        self.epoch_s.append(float(row["epoch_s"]))
                    ended = True
        if _changed(run.resume_note, stamps):
            note = read_json(run.resume_note)  # checkpoints.write_note
            # This launch's chief restored a checkpoint: said once (a node's copy comes back every round).
            if isinstance(note, dict) and note.get("launch") == self.launch and not self.resume_said:
                self.resume_said = True
                self.job.note(_resume_line(note))
        if _changed(run.live, stamps):
            live = read_json(run.live)
            if isinstance(live, dict) and live and live.get("time") != self.earlier_live:
                self.started = True
                self.moved = time.monotonic()
                self.shown_progress.live(live)
        return ended

    def settle(self, lost: "elastic.Lost | None" = None) -> None:
        """Before a restart: the clients stopped, and the epochs the chief finished evaluated by the
        evaluator beside us (it lags the chief by an evaluation), so that the run's records hold
        every epoch of the checkpoint the next launch restores."""
        if self.evaluator is None:
            return
        clients.stop_only(self.running)
        chief_lost = lost is not None and lost.task is not None and lost.task.job == "worker" and lost.task.index == self.chief.task
        if not chief_lost:  # a lost chief's node may not answer: what it handed over is here already
            self.chief.sync()  # the last checkpoints handed over, and the record naming them
        finished = [int(r["epoch"]) for r in trained.read(self.run.trained, self.launch) if "epoch" in r]
        until = time.monotonic() + SETTLE_S
        while self.evaluator.poll() is None and time.monotonic() < until:
            self._records()
            if self.epochs_done >= max(finished, default=0):
                break
            time.sleep(POLL_S)

    def _lost(self, task, cause: str, message: str) -> "elastic.Lost":
        """A loss once training has begun: elastic.Lost (the coordinator may go on), its message
        the one line the run ends with when it cannot (the coordinator adds the resume hint once
        the launch's clean-up has copied the last checkpoint back)."""
        return elastic.Lost(message, task, cause)

    def judge(self, label: str, code: int):
        client = self.clients[label]
        if client is self.evaluator:
            if code == 0 and self.run.result.exists():
                return DONE  # the target reached (the clients are stopped on the way out), or every epoch evaluated
            return _evaluator_failure(client, code, self.run)
        if client is self.chief:
            if code == 0:
                if not self.chief_done:
                    self._sync_chief(True)
                return DONE
            failure = self._server_gone(self.tasks) or self._client_failure(client, code)
            if failure is not None:
                return failure
            message = f"the chief ({client.label}) failed: {_message(client.log)} (log: {client.log})"
            if self.sync and self._mid_run(code):
                return self._lost(self.workers.get(client.task), clients.describe(code), message)
            return ClusterError(message + self.run.resume_hint())
        # Once the chief has finished, others may fail as it closes the queues: not a loss.
        if code == 0 or self.run.result.exists():
            return DONE
        needed = [t for t in self.tasks if t.job == "ps" or t.index in (self.chief.task, client.task)]
        failure = self._server_gone(needed) or self._client_failure(client, code)
        if failure is not None:
            return failure
        why = clients.describe(code)
        if self.config.mode == "sync":
            message = f"{client.label} died ({why}: {last_line(client.log)}); sync training cannot go on without it"
            if self._mid_run(code):
                return self._lost(self.workers.get(client.task), why, message)
            return ClusterError(message + self.run.resume_hint())
        self.lost.add(client.task)
        self.job.note(f"{client.label} died ({why}); async training goes on with {self.config.workers - len(self.lost)} worker(s)")
        return GOES_ON

    def _mid_run(self, code: int | None = None) -> bool:
        """Whether a death (exit ``code``; None: a server that stopped answering) is a loss the run
        may go on after: once training has begun, or in a relaunch's start-up when the client was
        killed or its node lost (not its own failure, which the next launch would repeat)."""
        killed = code is None or code > 128 or code in (clients.LOST, clients.UNKNOWN)
        return self.started or (self.relaunch and killed)

    def _client_failure(self, client, code: int) -> PiclusterError | None:
        """What a client's failure says of its own: all the clients that died before training began
        (one cause, often), or its usage or storage error."""
        if not self._mid_run(code):
            startup = _startup_failure(self.running)
            if startup is not None:
                return startup
        client.fetch_log()
        if code == UsageError.exit_code:  # e.g. a node's copy of the data set is missing
            return UsageError(f"{client.label}: {_message(client.log)}")
        if code == STORAGE_EXIT:
            return _storage_failure(client, self.run)
        return None

    def _server_gone(self, tasks) -> ClusterError | None:
        """The cause, when a server died under a client."""
        gone = unanswered(tasks, tries=3)
        return self.silent(gone) if gone else None

    def failed(self, failures):
        raise AssertionError(f"every failure of a training is judged on its own: {failures}")  # judge never says FAILED

    def finished(self, done: set[str]) -> bool:
        last = self.evaluator if self.evaluator is not None else self.chief
        if last.label not in done:
            return False
        self._records()  # the rows written as it ended
        return True

    def needed(self, done: set[str]) -> list:
        """A dead server leaves the clients waiting forever: the ps, the chief's, and in a sync run
        every worker's still training."""
        if self.run.result.exists():
            return []
        needed = [t for t in self.tasks if t.job == "ps" or t.index == self.chief.task or self.config.mode == "sync"]
        return [t for t in needed if t.job == "ps" or t.index not in self.lost]

    def silent(self, tasks) -> ClusterError:
        message = f"{tasks[0].label} on {tasks[0].node} stopped answering; the run stopped"
        if self.sync and self._mid_run():
            return self._lost(tasks[0], "stopped answering", message)
        return ClusterError(message + self.run.resume_hint())

    def progress(self, done: set[str]) -> None:
        pass  # the chief's records are the progress (follow)


def _stopped_at_target(run: RunDir) -> bool:
    """Whether result.json is there and says the run stopped at --target-val-accuracy."""
    if not run.result.exists():
        return False
    result = read_json(run.result)
    return isinstance(result, dict) and result.get("stopped_at_target") is True


def _evaluator_failure(evaluator, code: int, run: RunDir) -> PiclusterError:
    evaluator.fetch_log()
    if code == UsageError.exit_code:  # e.g. this machine's copy of the data set is damaged
        return UsageError(f"{evaluator.label}: {_message(evaluator.log)}")
    if code == STORAGE_EXIT:
        return _storage_failure(evaluator, run)
    last = last_line(evaluator.log)
    said = f": {_message(evaluator.log)}" if last.startswith(ERROR_PREFIX) else ""  # not its last progress line
    return ClusterError(f"{evaluator.label} failed ({clients.describe(code)}){said} (log: {evaluator.log})" + run.resume_hint())


def _startup_failure(running: list) -> Exited | None:
    """Clients that died before training began: often all of them, for one cause (a node's venv
    without picluster), so they are named together, folded by node, with their logs' last lines.
    None: a missing data set and the like, the user's to fix, said in its own words."""
    dead = [(c, c.poll()) for c in running]
    dead = [(c, code) for c, code in dead if code not in (None, 0)]
    if not dead or all(code == UsageError.exit_code for _, code in dead):
        return None
    for client, _ in dead:
        client.fetch_log()
    return Exited("train har", [Exit(getattr(c, "node", "localhost"), f"worker:{c.task} client", None if code in (clients.UNKNOWN, clients.LOST) else code,
                                     file_tail(c.log)) for c, code in dead])


ERROR_PREFIX = "picluster.jobs.har.replica: error: "  # how a client's (or the evaluator's) last line names its error


def _message(log: Path) -> str:
    return last_line(log).removeprefix(ERROR_PREFIX)


def _storage_failure(client, run: RunDir) -> StorageError:
    """A client could not write a file: its own line names the path and cause, or (its log on the
    same full disk) the run directory's free space does."""
    hint = run.resume_hint().replace("; continue with", "; free it, then continue with")
    said = _message(client.log) if client.log.exists() else ""
    if said.startswith("cannot write ") and ": " in said:
        path, why = said.removeprefix("cannot write ").rsplit(": ", 1)
        return StorageError(path, why + hint)
    try:
        st = os.statvfs(run.path)
        full = st.f_bavail * st.f_frsize < 1024 * 1024
    except OSError:
        full = False
    why = "No space left on device" if full else f"{client.label} could not write its files (log: {client.log})"
    return StorageError(run.path, why + hint)


def _live_time(run: RunDir) -> float | None:
    """When the chief wrote the live.json here, if any: a relaunch (or --resume) finds its last one."""
    live = read_json(run.live)
    return live.get("time") if isinstance(live, dict) else None


def _changed(path: Path, stamps: dict) -> bool:
    """Whether ``path`` changed since the last look: the loop polls often, files change once an epoch."""
    try:
        st = path.stat()
        stamp = (st.st_mtime_ns, st.st_size, st.st_ino)
    except OSError:
        stamp = None
    if stamps.get(path) == stamp:
        return False
    stamps[path] = stamp
    return stamp is not None


def _resume_line(note: dict) -> str:
    damaged = "".join(f"checkpoint {name} is damaged ({why}); " for name, why in note.get("damaged") or [])
    return f"{damaged}resumed from checkpoints/{note.get('checkpoint')} (epoch {note.get('epoch')}, step {note.get('global_step')})"
