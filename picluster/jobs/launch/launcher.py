"""``picluster launch``: run a user's script on the running cluster, watch it, apply the failure policy.

Top to bottom: record the job (PENDING), attach the running cluster (never a temporary one: the
servers ``cluster up`` started do the work), plan the tasks, stage the script on the worker nodes
(each-worker mode), start every task through the tether, record RUNNING, then the watch loop
(jobs/watch.py) asks the job: a task's exit is judged by the policy (done, restart, fail), and
once a second the servers are probed — a dead ps fails the job, a dead worker server
(coordinator mode) is restarted within the budget.
However the job ends (done, failed, Ctrl-C, ``picluster cancel``'s SIGTERM), every task still
running is stopped (its lifeline closes: SIGTERM, grace, SIGKILL) before the record is closed.
"""

import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING

from picluster.cluster import probe, staging
from picluster.cluster.base import Cluster
from picluster.cluster.exits import Exit, Exited
from picluster.cluster.tasks import HEARTBEAT_TIMEOUT_S, LOST, UNKNOWN, Heartbeat, LocalTask, NodeTask, TaskSpec
from picluster.jobs import watch
from picluster.jobs.controller import Job, Running
from picluster.jobs.launch import plan, policy
from picluster.jobs.launch.config import LaunchConfig
from picluster.jobs.launch.output import Output, log_name
from picluster.model import nodeset
from picluster.model.fanout import fan_out
from picluster.util.errors import ClusterError, PiclusterError
from picluster.util.paths import state_dir

if TYPE_CHECKING:
    from picluster.cluster.attach import Place

POLL_S = 0.1
PROBE_S = 1.0  # between checks that the cluster's servers still answer
KILL_AFTER_S = 5.0  # beyond the grace period, before a task's whole session is killed


@dataclass
class Outcome:
    job_id: int
    state: str  # COMPLETED or FAILED (Ctrl-C and cancel raise)
    reason: str
    elapsed_s: float
    restarts: int
    exit_codes: dict[str, list[int | None]]
    summary: list[str]
    log_dir: Path
    error: PiclusterError | None = None  # the failure, with its details (logs' last lines)


class Launch(Job):
    """The launched script as a job: on the running cluster only (its servers do the work)."""

    kind = "launch"
    unit = "tasks"
    temporary = False
    keep_rejected = True  # the job's id was shown: a refusal after that stays on record

    def __init__(self, config: LaunchConfig) -> None:
        self.config = config
        self.name, self.mode, self.title = config.name, config.mode, f"launch {config.name}"
        self.ps = 1 if config.mode == "coordinator" else 0
        self.tasks: dict[str, LocalTask | NodeTask] = {}
        self.specs: dict[str, TaskSpec] = {}
        self.codes: dict[str, list[int | None]] = {}
        self.job_id: int | None = None
        self.budget = policy.Budget(config.restart_limit)
        self.cut_off: set[str] = set()  # nodes that stopped answering at all during the job
        self.why = ""  # what the policy said of the first task that failed the job

    def placed(self, where: "Place") -> None:
        self.workers = where.all_workers  # every worker of the cluster it runs on

    def placement(self, cluster: Cluster | None, job_id: int):
        assert cluster is not None
        layout, job_dir = cluster.layout, _job_dir(job_id)
        if self.config.mode == "coordinator":
            tasks = [(plan.CHIEF, "localhost", str(job_dir / log_name(plan.CHIEF)))] + [(t.label, t.node, "") for t in layout.workers]
        else:
            tasks = [(t.label, t.node, str(job_dir / log_name(t.label))) for t in layout.workers]
        return nodeset.fold(sorted({t.node for t in layout.tasks})), tasks

    def body(self, cluster: Cluster | None, running: Running) -> Outcome:
        assert cluster is not None
        start = time.perf_counter()
        self.cluster, self.running, self.store = cluster, running, running.record.store
        self.id = self.job_id = running.job_id
        self.job_dir = _job_dir(running.job_id)
        self.job_dir.mkdir(parents=True, exist_ok=True)
        self.store.set_log_dir(running.job_id, str(self.job_dir))
        self.output = Output(self.job_dir, running.emit)
        try:
            with Heartbeat(lambda: self.tasks.values()):  # self.tasks is rebound as tasks start
                self._start_all(cluster)
                failure = watch.watch(self)
        finally:
            self._stop_all()
            cluster.release()
            self.output.close()
        return Outcome(running.job_id, "FAILED" if failure else "COMPLETED", str(failure or ""), time.perf_counter() - start,
                       self.budget.used, self.codes, self.output.summary(), self.job_dir, failure)

    def ending(self, result: Outcome) -> tuple[str, str]:
        return result.state, result.reason

    # -- starting -------------------------------------------------------------------------

    def _start_all(self, cluster: Cluster) -> None:
        c, layout = self.config, cluster.layout
        if c.mode == "coordinator":
            specs = [plan.coordinator_task(c, layout, self.id)]
        else:
            nodes = [t.node for t in layout.workers]
            folders = cluster.stage(c.files(), Path(c.folder), staging.node_job_name(self.id, state_dir()), nodes, f"job {self.id}")
            specs = [replace(s, launcher=cluster.launcher(s.node)) for s in plan.worker_tasks(c, layout, self.id, folders)]
        self.specs = {s.label: s for s in specs}
        self.servers = list(layout.tasks)  # probed once a second while the job runs
        for spec in specs:
            self.output.add(spec.label, spec.prefix)
            self.codes[spec.label] = []
        # At once: a node's task costs an SSH channel's round trips, a local one a fork.
        started = fan_out(self._start, specs, name=lambda s: s.label)
        self.tasks = dict(started.succeeded)
        started.raise_failures(f"job {self.id}: starting the tasks")
        self.running.note(f"job {self.id}: {c.name}, {c.mode} mode, {len(specs)} task(s) on {nodeset.fold(sorted({s.node for s in specs}))}"
                      f" (logs: {self.job_dir})")

    def _start(self, spec: TaskSpec) -> LocalTask | NodeTask:
        on_line = lambda text, label=spec.label: self.output.line(label, text)
        return self.cluster.start_task(spec, self.config.grace_s, on_line)

    # -- watching -------------------------------------------------------------------------

    # The watch loop's questions (jobs/watch.py).
    poll_s = POLL_S
    probe_s = PROBE_S
    probe_patience = (2, 1.0, 0.2)

    def handles(self) -> dict[str, LocalTask | NodeTask]:
        return self.tasks

    def follow(self) -> bool:
        return False  # a launch's only records are its tasks' exits

    def judge(self, label: str, code: int) -> str | ClusterError:
        """A task's exit, by the failure policy: done, restarted within the budget, or the job fails."""
        self.tasks[label].close()  # its last lines are in the log before we judge
        spec = self.specs[label]
        status = None if code == UNKNOWN else code
        self.codes[label].append(status)
        if status == LOST:
            self.store.task_exited(self.id, label, None, "FAILED")
            return self._server_cause() or ClusterError(f"job {self.id} failed: {spec.node}: lost (its SSH connection closed during the job)")
        decision, why = self.budget.decide(status)
        state = {policy.DONE: "COMPLETED", policy.RESTART: "RUNNING", policy.FAIL: "FAILED"}[decision]
        self.store.task_exited(self.id, label, status, state)
        if decision == policy.DONE:
            return watch.DONE
        if decision == policy.RESTART:
            self._restart(label, status, why)
            return watch.GOES_ON
        self.why = self.why or why
        return watch.FAILED

    def failed(self, failures) -> ClusterError:
        exits = [Exit(self.specs[label].node, label, None if code == UNKNOWN else code, tuple(self.output.tail(label))) for label, code in failures]
        return self._server_cause() or Exited(f"job {self.id} failed", exits, when="", then=self.why)

    def finished(self, done: set[str]) -> bool:
        if self.config.mode == "coordinator":
            return plan.CHIEF in done
        return len(done) == len(self.tasks)

    def needed(self, done: set[str]) -> list:
        return [t for t in self.servers if t.job == "ps" or self.config.mode == "coordinator" or t.label not in done]

    def silent(self, silent) -> ClusterError | None:
        """A dead ps fails the job; a dead worker server is restarted within the budget (coordinator
        mode: the workers are its tasks) or fails the job (each-worker: its task cannot go on)."""
        if self.config.mode == "each-worker" or any(t.job == "ps" for t in silent):
            return self._silent_servers(silent)
        for task in silent:
            decision, why = self.budget.decide(None)
            self.codes.setdefault(task.label, []).append(None)
            if decision != policy.RESTART:
                self.store.task_exited(self.id, task.label, None, "FAILED")
                return self._stopped_answering([task], why)
            self.store.task_exited(self.id, task.label, None, "RUNNING")
            self.store.restarted(self.id, task.label)
            self.running.note(f"job {self.id}: {task.label} on {task.node} stopped answering; restarting its server ({why})")
        self.cluster.repair()
        return None

    def progress(self, done: set[str]) -> None:
        running = len(self.tasks) - len(done)
        self.running.progress(len(done), len(self.tasks), f"{running} running, restarts {self.budget.used}/{self.config.restart_limit}")

    def _restart(self, label: str, code: int | None, why: str) -> None:
        from picluster.cluster.exits import status_text

        spec = self.specs[label]
        attempt = len(self.codes[label]) + 1
        self.output.note(label, f"{status_text(code)}: restarting ({why})")
        self.running.note(f"job {self.id}: {label} on {spec.node} ended ({status_text(code)}); {why}")
        self.specs[label] = spec = replace(spec, env=spec.env | {"PICLUSTER_ATTEMPT": str(attempt)})
        self.tasks[label] = self._start(spec)
        self.store.restarted(self.id, label)

    def _server_cause(self) -> ClusterError | None:
        """When tasks fail because a server died under them, the server is the news."""
        needed = [t for t in self.cluster.layout.tasks if t.job == "ps" or self.config.mode == "each-worker"]
        silent = probe.unanswered(needed, tries=2, timeout=1.0, pause=0.2)
        return self._silent_servers(silent) if silent else None

    def _silent_servers(self, silent: list) -> ClusterError:
        """The job's failure when servers went silent: a ps first (nothing goes on without it)."""
        gone_ps = [t for t in silent if t.job == "ps"]
        if gone_ps:
            return self._stopped_answering(gone_ps, "the job cannot go on without its parameter server")
        return self._stopped_answering(silent, "its task cannot go on without its server")

    def _stopped_answering(self, tasks, then: str) -> ClusterError:
        """The error naming servers that went silent; their nodes, if the nodes went silent too (a
        cut cable, a crash), are noted: their tasks are not waited for, they stop themselves."""
        nodes = sorted({t.node for t in tasks})
        self.cut_off |= {node for node in nodes if self.cluster.unreachable(node)}
        labels = nodeset.fold(t.label for t in tasks)
        return ClusterError(f"job {self.id} failed: {nodeset.fold(nodes)}: {labels} stopped answering; {then}")

    # -- stopping -------------------------------------------------------------------------

    def _stop_all(self) -> None:
        """Every task still running: lifeline closed (SIGTERM, grace, SIGKILL on its node), then, if
        its tether is still there after that, its whole session killed."""
        running = {label: t for label, t in self.tasks.items() if t.poll() is None and t.spec.node not in self.cut_off}
        if running:
            self.running.note(f"job {self.id}: stopping {nodeset.fold(running)} (SIGTERM, SIGKILL after {self.config.grace_s:g} s)")
        if self.cut_off:
            self.running.note(f"job {self.id}: {nodeset.fold(sorted(self.cut_off))} cannot be reached; its task stops itself "
                          f"{HEARTBEAT_TIMEOUT_S:g} s after the last heartbeat it heard")
        try:
            for task in running.values():
                task.stop()
            deadline = time.monotonic() + self.config.grace_s + KILL_AFTER_S
            while any(t.poll() is None for t in running.values()) and time.monotonic() < deadline:
                time.sleep(POLL_S)
        except KeyboardInterrupt:
            pass  # a second Ctrl-C: no more grace
        finally:
            for task in running.values():
                if task.poll() is None:
                    task.kill()
            deadline = time.monotonic() + KILL_AFTER_S
            while any(t.poll() is None for t in running.values()) and time.monotonic() < deadline:
                time.sleep(POLL_S)
            for label, task in running.items():
                code = task.poll()
                code = None if code in (UNKNOWN, LOST) else code
                self.codes[label].append(code)
                self.store.task_exited(self.id, label, code, "CANCELLED")
            for label, task in self.tasks.items():
                if task.spec.node in self.cut_off and task.poll() is None:
                    self.codes[label].append(None)
                    self.store.task_exited(self.id, label, None, "FAILED")
                task.close(wait=task.spec.node not in self.cut_off)


def _job_dir(job_id: int) -> Path:
    return state_dir() / "jobs" / str(job_id)

