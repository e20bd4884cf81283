"""The coordinator: on the cluster it is given, start one client per worker task, follow the chief, clean up.

The clients (``python -m picluster.jobs.har.process``, or inside the nodes' servers) are driven only by files in the run
directory: local processes, or processes on the worker nodes over SSH whose chief's files are
mirrored back (picluster.jobs.har.clients).  Progress comes from the files the chief writes.  A
failed client, Ctrl-C or SIGTERM stops every client (and the job controller any temporary
servers); no client outlives the coordinator (PDEATHSIG locally, a closed stdin on nodes).
"""

import json
import secrets
import time
from dataclasses import dataclass, replace
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING

from picluster.cluster import door
from picluster.cluster.containers import Unreachable, container
from picluster.data.har import har_dir
from picluster.data.har.dataset import cache_path
from picluster.jobs.controller import Running
from picluster.jobs.har import clients, elastic, metrics, trained
from picluster.jobs.har.config import TrainConfig
from picluster.jobs.har.data import load_data
from picluster.jobs.har.follow import Watching, follow
from picluster.jobs.har.rundir import RunDir, read_json
from picluster.jobs.har.shared_data import RELATIVE
from picluster.model.clusterspec import Layout
from picluster.util import atomic
from picluster.util.errors import ClusterError, StorageError, UsageError
from picluster.util.paths import state_dir

if TYPE_CHECKING:  # the cluster runtime; a standalone run needs none of it
    from picluster.cluster.base import Cluster


RUNTIMES = ("auto", "resident", "shared", "separate")
ALONE = ("separate",)  # a standalone run's runtimes: its one process
_RUNTIME_NOTE = {"resident": ", each worker's client inside its node's server",
                 "shared": ", each worker's client serving its task (one TensorFlow runtime per node)"}


def new_run_dir(path: Path | None) -> RunDir:
    run = RunDir(path or state_dir() / "runs" / datetime.now().strftime("%Y%m%d-%H%M%S"))
    if run.config.exists():
        raise UsageError(f"{run} already holds a run; continue it with --resume {run} or choose another --run-dir")
    made = not run.path.exists()
    run.path.mkdir(parents=True, exist_ok=True)
    try:
        # Before any server starts: a full or read-only disk is one line now, not a failed first write.
        atomic.check_room(run.path)
    except StorageError:
        if made:
            discard_unused(run)
        raise
    return run


def discard_unused(run: RunDir) -> None:
    """A run refused before it wrote anything (too few workers, a node not answering) leaves no
    empty folder behind; a folder with anything in it is kept."""
    try:
        run.path.rmdir()  # only an empty directory: never a run's files
    except OSError:
        pass


def check_data(config: TrainConfig) -> None:
    """Fail before any server starts: a missing or misshapen data set is the user's to fix."""
    load_data(config)


def worker_runtime(choice: str, offered: tuple[str, ...]) -> str:
    """Where a worker node's client runs, of the ways its cluster offers (Cluster.worker_runtimes,
    "auto": the first).  "resident": inside the node's server process, through its door (no
    TensorFlow import, one runtime per node, what a 1 GB Pi can hold); "shared": a process that
    serves the task in place of the node's server (stopped, and started again at the end);
    "separate": a process beside the node's own server (on the local kinds, whose servers share
    this machine anyway, the only way)."""
    if choice not in RUNTIMES:
        raise UsageError(f"--worker-runtime {choice!r} must be one of {', '.join(RUNTIMES)}")
    if choice == "auto":
        return offered[0]
    if choice not in offered:
        raise UsageError(f"--worker-runtime {choice} needs an inventory cluster (-i): local workers are this machine's own servers")
    return choice


@dataclass
class _Run:
    """What every launch of a run on a cluster shares: the run's options and folder, the cluster,
    the job's reports, the tasks used, where the evaluator beside us reads the data set, and the
    record of launches and losses (elastic.Record)."""

    config: TrainConfig
    run: RunDir
    cluster: "Cluster"
    job: Running
    quiet: bool
    runtime: str
    used: Layout
    data_here: Path | None
    record: elastic.Record


@dataclass(frozen=True)
class Launch:
    """One launch of the run's clients: the worker tasks that train in it (the first their chief)
    and whether its chief restores the run's last checkpoint."""

    members: list[int]
    resume: bool


def train(config: TrainConfig, run: RunDir, cluster: "Cluster | None", job: Running, runtime: str = "auto", quiet: bool = False) -> dict:
    """Run (or continue) the training in ``run`` on ``cluster`` (None: standalone); return the
    result (result.json's contents, and the workers lost on the way).  It reports through ``job``,
    the controller's Running (``quiet``: no epoch lines, for --json).

    Where the cluster gives each client a folder of the job's own on its node (an inventory's
    nodes) the clients run there and read the data set from the nodes' share (``config.data_dir``);
    otherwise they run in the run directory here, and the caller has checked the data set first
    (``check_data``: before any run directory exists).  runtime (worker_runtime):
    "resident" runs each client inside its node's server; "shared" stops each used worker's
    server on its node, lets the node's client serve that task itself, and starts the node's
    servers again at the end.

    A sync run that loses a task goes on (elastic.py): up to ``config.max_restarts`` times it starts
    again from the last checkpoint with the workers that answer; ``config.worker_deadline``: seconds
    without a step before it counts as stalled (0: adaptive).
    """
    runtime = worker_runtime(runtime, cluster.worker_runtimes if cluster is not None else ALONE)
    data_here = evaluator_data(config, cluster, job) if cluster is not None else None
    spare = cluster is not None and cluster.coordinator_spare
    config = replace(config, evaluator=evaluator_place(config.evaluator, cluster is not None, data_here, spare))
    resume = run.config.exists()
    atomic.write_text(run.config, config.to_json())
    for stale in (run.result, run.resume_note):  # the chief writes them anew
        stale.unlink(missing_ok=True)
    if cluster is None:
        return _alone(config, run, job, quiet)
    # Only the tasks we use go in the replicas' ClusterSpec: spare ones must not be waited for.
    used = Layout(tuple(t for t in cluster.layout.tasks if t.index < (config.ps if t.job == "ps" else config.workers)))
    job.note(f"cluster: {cluster.kind}, {config.ps} ps + {config.workers} workers"
             + (f" (started in {cluster.start_s:.1f} s)" if cluster.start_s else "")
             + _RUNTIME_NOTE.get(runtime, ""))
    record = elastic.Record(config.max_restarts if config.mode == "sync" and config.workers > 1 else 0)
    return _launches(_Run(config, run, cluster, job, quiet, runtime, used, data_here, record), resume)


def _alone(config: TrainConfig, run: RunDir, job: Running, quiet: bool) -> dict:
    """A standalone run: its one process, followed to its end."""
    running: list[clients.Client] = []
    try:
        with clients.Heartbeat(lambda: running):
            running = clients.start(run, None)
            outcome = follow(run, config, running, job, quiet)
            assert isinstance(outcome, dict), outcome  # alone, nothing is lost and nobody rejoins
            return outcome
    finally:
        clients.stop(running)
        _record_exits(job, running)


def _launches(r: _Run, resume: bool) -> dict:
    """Launch after launch until the run ends: each launch's outcome decided here, in one place
    (a loss starts the next from the last checkpoint with the workers that answer, within the
    budget; a worker that answers again rejoins); the run's result, with its "elastic" record."""
    from picluster.monitor.poll import Monitor
    from picluster.monitor.record import Recorder

    launch = Launch([t.index for t in r.used.workers], resume)
    try:
        with Recorder(Monitor.of(r.cluster), r.run.nodes):  # each node's CPU and memory, for `picluster plot RUN_DIR`
            while True:
                r.record.launched(launch.members)
                outcome = _launch(r, launch)
                if isinstance(outcome, dict):
                    result = outcome
                    break
                r.cluster.release()  # a lost node's connection may be dead: each launch reaches its nodes anew
                if isinstance(outcome, elastic.Lost):
                    # Every client has stopped: go on from the last checkpoint with the workers that answer.
                    members = _after_loss(outcome, r.record, r.cluster, r.used, r.job, r.run)
                    if not r.run.has_checkpoint():
                        _start_over(r.run, r.record, r.job)
                        launch = Launch(members, resume=False)
                        continue
                else:
                    members = sorted({*launch.members, *(t.index for t in outcome.tasks)})
                    r.job.note(f"{_named(outcome.tasks)} answers again: it rejoins from the checkpoint of epoch {outcome.epoch} "
                               f"({len(members)} workers)")
                launch = Launch(members, resume=True)
    finally:
        if r.record.owed_repair:  # a server an earlier launch's clients took down: the cluster as it was found
            try:
                r.cluster.repair()
            except ClusterError as exc:
                r.job.note(f"could not start the worker servers again ({exc}); 'picluster cluster up' starts them")
        r.cluster.release()  # the connections the clients' job folders were reached over
    if len(r.record.launches) > 1:
        result["elastic"] = r.record.summary(result.get("epochs_run"))
        if r.run.result.exists():
            atomic.write_json(r.run.result, {**json.loads(r.run.result.read_text()), "elastic": result["elastic"]})
    return result


def _after_loss(lost: "elastic.Lost", record: "elastic.Record", cluster: "Cluster", used: Layout, job: Running,
                run: RunDir) -> list[int]:
    """The workers to go on with after ``lost``, said in a line; the run's last line when the
    budget is spent or a ps does not come back."""
    # The hint as the launch's clean-up left the run: a node's chief's last checkpoint is copied
    # back once its clients have stopped, and the rounds before may all have missed one.
    lost.hint = run.resume_hint()
    if not record.lost(lost, lost.epochs_done, lost.row_times):
        if record.max_restarts:
            raise ClusterError(f"{lost.message}, after {record.restarts} restart{'s' if record.restarts != 1 else ''} "
                               f"(--max-restarts {record.max_restarts}){lost.hint}") from None
        raise ClusterError(f"{lost.message}{lost.hint}") from None
    who = f"{lost.task.label} on {lost.task.node}" if lost.task else "the training"
    job.note(f"{who} lost during epoch {lost.epochs_done + 1} ({lost.cause}): restart {record.restarts} of {record.max_restarts}")
    try:
        members = elastic.members_after(cluster, used, lost, job.note)
    except ClusterError as exc:
        raise ClusterError(f"{exc}; the run stopped{lost.hint}") from None
    left = [t for t in used.workers if t.index not in members]
    job.note(f"going on with {len(members)} worker{'s' if len(members) != 1 else ''} from the last checkpoint"
             + (f"; {_named(left)} rejoins when it answers again" if left else ""))
    return members


def _start_over(run: RunDir, record: "elastic.Record", job: Running) -> None:
    """No checkpoint of the run had reached this machine when it lost a task (a loss in its first
    epochs, or the chief's node gone before its first checkpoint was copied here): the next launch
    starts from epoch 1, on nodes whose copies of the run are cleared too (a chief would otherwise
    restore its own, or refuse to overwrite the records), and all since the lost launch began is lost."""
    job.note("no checkpoint of the run had reached this machine yet: it starts again from epoch 1")
    run.start_over()
    record.failures[-1]["epoch_times"]["0"] = record.launches[-1]["time"]


def _named(tasks) -> str:
    return ", ".join(f"{t.label} on {t.node}" for t in tasks)


def _launch(r: _Run, launch: Launch) -> "dict | elastic.Lost | elastic.Rejoin":
    """One launch of the run's clients, followed until the run ends (its result), a task is lost
    (elastic.Lost) or a left-out worker answers again (elastic.Rejoin); every client stopped and
    the launch's variables freed on the way out."""
    name = secrets.token_hex(4)
    config, run, cluster, record = r.config, r.run, r.cluster, r.record
    atomic.write_json(run.layout, {"layout": r.used.to_json(), "cluster": cluster.kind, "launch": name,
                                   "inventory": cluster.inventory_file, "worker_runtime": r.runtime, "members": launch.members})
    running: list[clients.Client] = []
    beside: list[clients.Evaluator] = []
    began = time.time()
    outcome: dict | elastic.Lost | elastic.Rejoin | None = None
    try:
        with clients.Heartbeat(lambda: running + beside):
            # Clients the cluster runs here read the run and the data set here: from other nodes (a
            # Slurm job's), on a file system they all mount.  Those in job folders get their own copies.
            cluster.check_shared({"the run directory": run.path.resolve(), "the data set": Path(config.data_dir).resolve()})
            if config.evaluator == "coordinator":  # first: its TensorFlow loads while the clients start
                assert r.data_here is not None
                trained.clear_handed_over(run.to_evaluate)  # an earlier launch's leftovers (a node's chief clears its own)
                beside.append(clients.Evaluator(run, name, str(r.data_here)))
            last_chief = record.launches[-2]["workers"][0] if len(record.launches) > 1 else None
            running = clients.start(run, r.used, cluster, launch.resume, name,
                                    clients.Placing(r.runtime, beside=bool(beside), members=launch.members, last_chief=last_chief))
            try:
                outcome = follow(run, config, running, r.job, r.quiet, _watching(r, launch, name, running, beside))
                if not isinstance(outcome, dict):
                    _what_it_did(outcome, run)
                return outcome
            finally:
                _restored(run, record, name, began, started_over=not launch.resume and len(record.launches) > 1)
    finally:
        # A launch that ends for the next one leaves a server its clients took down (resident) to the
        # run's end: a lost worker's is not waited for (it rejoins once it answers); the ps's loss is
        # dealt with by elastic.members_after.
        going_on = isinstance(outcome, (elastic.Lost, elastic.Rejoin))
        if _clean_up(r, running, beside, name, restart=not going_on):
            record.owed_repair = True


def _watching(r: _Run, launch: Launch, name: str, running: list, beside: list) -> Watching:
    """What the watch needs to know of the launch ``name``: the servers it cannot go on without
    (a shared worker's server lives and dies with its client, whose exit is watched anyway), its
    workers and those left out."""
    standing_in = {c.task for c in running if c.runtime == "shared"}
    servers = tuple(t for t in r.used.tasks if t.job == "ps" or (t.index in launch.members and t.index not in standing_in))
    return Watching(name, servers, beside[0] if beside else None, tuple(t for t in r.used.workers if t.index in launch.members),
                    tuple(t for t in r.used.workers if t.index not in launch.members), r.config.worker_deadline,
                    relaunch=len(r.record.launches) > 1)


def _restored(run: RunDir, record: "elastic.Record", launch: str, began: float, started_over: bool = False) -> None:
    """Which checkpoint the launch restored, and when it began training (the chief's resume note;
    a launch that ``started_over``: none, and its first epoch's row): what a failure before it cost."""
    note = read_json(run.resume_note)
    if isinstance(note, dict) and note.get("launch") == launch and isinstance(note.get("epoch"), int):
        record.resumed(int(note["epoch"]), float(note.get("time") or began))
    elif started_over:
        first = next(iter(metrics.read_rows(run.metrics)), None)
        try:
            record.resumed(0, float(first["time"]) - float(first.get("epoch_s") or 0) if first else began)
        except (TypeError, ValueError):  # a row without its times
            record.resumed(0, began)


def _what_it_did(exc: "elastic.Lost | elastic.Rejoin", run: RunDir) -> None:
    """The epochs the launch that ends recorded: a Lost's last one and their times (what a restart
    trains again), a Rejoin's checkpoint."""
    rows = metrics.read_rows(run.metrics)
    last = max((int(r["epoch"]) for r in rows), default=0)
    if isinstance(exc, elastic.Lost):
        exc.epochs_done = last
        exc.row_times = {int(r["epoch"]): float(r["time"]) for r in rows if r.get("time") not in (None, "")}
    else:
        exc.epoch = last


def _clean_up(r: _Run, running: list, beside: list, launch: str, restart: bool = True) -> bool:
    """After the launch ``launch``, however it ended: every client stopped, its variables freed on
    the ps, and the worker servers the clients stood in for started again (without ``restart``, a
    launch that another follows: only those a shared client stood in for, whose next launch probes
    them; whether others are owed, returned)."""
    cluster, job, runtime = r.cluster, r.job, r.runtime
    clients.stop(running + beside)
    _record_exits(job, running)
    try:  # the launch's variables on the ps: a cluster that stays up would keep them until it stops
        cluster.forget([container(launch)])
    except Unreachable:
        pass  # a ps that stopped took them with it (the run's own failure names it)
    except OSError as exc:
        job.note(f"could not free this run's variables on the ps ({exc}); they stay until its server restarts")
    owed = _servers_to_restart(running, runtime)
    if owed and (restart or runtime == "shared" or any(c.runtime == "shared" for c in running)):
        try:  # the worker servers the clients stood in for (or took down): the cluster as it was found
            cluster.repair()
        except ClusterError as exc:
            job.note(f"could not start the worker servers again ({exc}); 'picluster cluster up' starts them")
        return False
    return owed


def _record_exits(job: Running, running: list) -> None:
    """Each stopped client's exit status, for the job's record."""
    for client in running:
        code = client.poll()
        job.task_exited(f"worker:{client.task}", code, "COMPLETED" if code == 0 else "FAILED")


def evaluator_data(config: TrainConfig, cluster: "Cluster", job: Running | None = None) -> Path | None:
    """The prepared HAR folder on this machine for an evaluator beside the coordinator: the run's
    own (a local or Slurm cluster's, or an inventory's share mounted here too), else, asked for
    explicitly (--evaluator coordinator), this machine's default, else a copy of the share's kept
    here (fetched when the share's changed: cluster/sharecopy.py); None when none holds it (auto
    then evaluates on the chief, saying why).  The evaluator checks that its copy is the workers'
    (the data set's checksum)."""
    asked = config.evaluator == "coordinator"
    for folder in (Path(config.data_dir) if config.data_dir else None, har_dir() if asked else None):
        if folder is not None and cache_path(folder).is_file():
            return folder
    if config.evaluator != "chief":
        try:
            copy = cluster.shared_copy(RELATIVE)
        except (ClusterError, OSError) as exc:  # the NFS master unreachable, the copy not writable here
            if asked:
                raise
            if job is not None:
                job.note(f"validation runs on the chief, between its epochs: no copy of the share's data set here ({exc})")
            copy = None
        if copy is not None:
            return copy.parent
    return None


def evaluator_place(choice: str, cluster: bool, data_here: Path | None, spare: bool = True) -> str:
    """Where the evaluation runs (config.EVALUATORS): "chief" in a standalone run (one process does
    everything), "coordinator" when asked or (auto) when this machine holds the data set and has
    CPU to spare (``spare``: not a node of the cluster itself, as a Slurm job's first node is)."""
    if not cluster:
        return "chief"
    if choice == "coordinator" and data_here is None:
        raise UsageError(f"--evaluator coordinator needs the prepared HAR data set on this machine ({har_dir()}): "
                         "run 'picluster data har' here, or evaluate on the chief with --evaluator chief")
    if choice == "auto":
        return "coordinator" if data_here is not None and spare else "chief"
    return choice


def _servers_to_restart(running: list, runtime: str) -> bool:
    """Whether a node's worker server may be down after the run: a client stood in for it
    (shared), or a resident client's server went with it (its door gave up a cancelled job)."""
    if runtime == "shared" or any(c.runtime == "shared" for c in running):
        return True
    return runtime == "resident" and any(c.poll() in (door.BUSY, door.LOST, clients.LOST) for c in running)
