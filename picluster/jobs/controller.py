"""One job's life, the same for every kind of job: record, attach, display, body, end.

A kind of job (Monte-Carlo, HAR training, a launched script) is a ``Job``: what it is called, the
tasks it needs, and its ``body``, which does the work on the cluster it is given and reports
through ``Running`` (progress, notes, output lines, tasks' exits).  ``run`` does the rest, in this
order, for all of them:

0. place: where it will run, and the defaults the job takes from there (``Job.placed``);
1. record: the job gets its row in the records (PENDING), with the command that started it;
2. attach: the inventory's nodes, the running local cluster, or a temporary one (a job that gets
   no cluster was never started: it leaves no record);
3. display: the live panel of the cluster's nodes on a terminal, log lines elsewhere;
4. body: RUNNING, with the nodes and tasks it placed, until the work is done;
5. end: COMPLETED, FAILED with the reason, or CANCELLED (Ctrl-C, ``picluster cancel``); a
   temporary cluster is stopped.
"""

import sys
from abc import ABC, abstractmethod
from collections.abc import Sequence
from contextlib import ExitStack
from typing import TYPE_CHECKING, Any, TextIO

from picluster.cluster.base import Cluster
from picluster.jobs import records
from picluster.model import nodeset
from picluster.model.inventory import Inventory
from picluster.monitor.poll import Monitor
from picluster.util import verbosity
from picluster.util.errors import PiclusterError
from picluster.views.live import JobDisplay

if TYPE_CHECKING:  # attach brings in every kind of cluster: imported when a job runs
    from picluster.cluster.attach import Place


class Running:
    """What a job's body has while it runs: its record, and the display to report through."""

    def __init__(self, record: records.Recorder, display: JobDisplay) -> None:
        self.record = record
        self.display = display

    @property
    def job_id(self) -> int:
        return self.record.id

    @property
    def live(self) -> bool:
        """A live panel shows the progress (a terminal); else log lines do."""
        return self.display.live

    def progress(self, done: float, total: float, detail: str = "") -> None:
        self.display.update(done, total, detail)

    def say(self, line: str) -> None:
        """A line of the job's progress (a training's epoch): above a live panel, else on stderr
        (stdout stays the result's, --json's too); nothing under -q."""
        if not verbosity.quiet():
            self._print(line, sys.stderr, soft_wrap=True)

    def note(self, message: str) -> None:
        """A line about the job (a restart, the cluster it got): dim above a live panel, else on
        stderr; nothing under -q."""
        if not verbosity.quiet():
            self._print(message, sys.stderr, style="dim")

    def emit(self, line: str) -> None:
        """A line of the job's own output: above a live panel, else on stdout."""
        self._print(line, sys.stdout, soft_wrap=True)

    def _print(self, line: str, stream: TextIO, style: str | None = None, soft_wrap: bool | None = None) -> None:
        """``line`` as it is (no markup, no highlighting): above a live panel, in ``style`` (None:
        plain; ``soft_wrap`` None: the console's own), else on ``stream``, flushed."""
        if self.display.live:
            self.display.console.print(line, style=style, soft_wrap=soft_wrap, highlight=False, markup=False)
        else:
            print(line, file=stream, flush=True)

    def task_exited(self, label: str, code: int | None, state: str) -> None:
        self.record.store.task_exited(self.record.id, label, code, state)


class Job(ABC):
    """A kind of job: its name and needs; ``body`` does its work."""

    name: str
    kind: str  # "montecarlo", "har", "launch"
    mode: str = ""
    title: str = ""  # the progress line's, e.g. "montecarlo on 8 node(s)"
    unit: str = ""  # what progress counts: "samples", "epochs", "tasks"
    workers: int = 1
    workers_option = "--workers"  # the command's option for ``workers``, named when a cluster has too few
    per_node = False  # True: ``workers`` counts nodes, a node's ps standing in for its missing worker (Monte-Carlo)
    ps: int = 0
    temporary: bool = True  # start a temporary local cluster when none runs
    standalone: bool = False  # no cluster at all: one process on this machine
    keep_rejected: bool = False  # a usage error after the job's id was shown keeps the record
    log_dir: str = ""

    def placed(self, where: "Place") -> None:  # noqa: B027  (most jobs were told all they need)
        """Defaults the job takes from where it will run, before it is shown or recorded (a
        launch's workers, Monte-Carlo's nodes when not told)."""

    def placement(self, cluster: Cluster | None, job_id: int) -> tuple[str, Sequence[tuple[str, str, str]]]:
        """The nodes it runs on and its tasks (label, node, log), for the record: by default the
        first ``workers`` worker tasks and the ps tasks, without logs."""
        if cluster is None:
            return "localhost", [("worker:0", "localhost", "")]
        tasks = cluster.layout.workers[: self.workers] + cluster.layout.ps[: self.ps]
        return nodeset.fold(sorted({t.node for t in tasks})), [(t.label, t.node, "") for t in tasks]

    @abstractmethod
    def body(self, cluster: Cluster | None, running: Running) -> Any:
        """The work; returns the job's result.  Raise to fail (a PiclusterError: its one line)."""

    def warm_up(self) -> None:  # noqa: B027  (most jobs have nothing to do early)
        """Work of the coordinator's own that can overlap the start of a temporary cluster (a
        job that builds its graph here imports TensorFlow while the servers import theirs)."""

    def ending(self, result: Any) -> tuple[str, str]:
        """The record's end for a body that returned: (state, reason); a failure the body reports
        rather than raises (a launch shows its tasks' last lines first) is ("FAILED", why)."""
        return "COMPLETED", ""


def run(job: Job, inventory: Inventory | None, live: bool = True, display: JobDisplay | None = None,
        where: "Place | None" = None) -> Any:
    """The job, from its record to its end; returns what its body returned.  ``where``: the
    caller's ``place(inventory)`` when it already has it (a training's options followed from it),
    else placed here."""
    from picluster.cluster.attach import attach, place

    where = place(inventory) if where is None else where
    job.placed(where)
    display = display or JobDisplay(job.title, job.unit, live=live)
    # The record is made before the cluster is attached (a job waiting for its servers is listed).
    with records.recorded(job.name, job.kind, keep_rejected=job.keep_rejected, mode=job.mode, cluster=where.name,
                          command=["picluster", *sys.argv[1:]], log_dir=job.log_dir) as record, ExitStack() as stack:
        cluster: Cluster | None = None
        if not job.standalone:
            try:
                cluster = stack.enter_context(attach(inventory, job.workers, job.ps, temporary=job.temporary,
                                                           meanwhile=job.warm_up, option=job.workers_option,
                                                           per_node=job.per_node))
            except PiclusterError:
                record.forget()  # no cluster, no job
                raise
        record.running(*job.placement(cluster, record.id))
        display.monitor = Monitor.of(cluster) if cluster is not None else None
        with display:
            result = job.body(cluster, Running(record, display))
        record.end(*job.ending(result))
        return result
