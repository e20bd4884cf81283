"""The one watch loop of a job's processes (a launch's tasks, a training's clients).

Until the job is done or has failed: the job follows its own records (a training's chief's
files), each process's exit is judged once by the job's policy (done, goes on, fails), processes
that fail together are reported together, and every ``probe_s`` the servers the job still needs
are probed, the job saying what a silent one means (restart it within a budget, or fail).  The
loop returns the job's failure, or None; stopping what still runs is the job's, on its way out.
"""

import time
from collections.abc import Callable, Mapping, Sequence
from typing import Protocol

from picluster.cluster import probe
from picluster.model.clusterspec import Task
from picluster.util.errors import PiclusterError

DONE = "done"  # it finished its part
GOES_ON = "goes on"  # the job goes on without it (restarted, lost by an async training, or late)
FAILED = "failed"  # the job fails: with the others that fail beside it, see Watched.failed
SETTLE_S = 0.5  # after a failure: processes that fail together (a broken venv) are reported together


class Handle(Protocol):
    def poll(self) -> int | None: ...


class Watched(Protocol):
    """What a job tells the watch loop."""

    poll_s: float  # between looks at the processes
    probe_s: float  # between probes of the servers
    probe_patience: tuple[int, float, float]  # a server is silent after (tries, each's timeout, pause between) without an answer

    def handles(self) -> Mapping[str, Handle]: ...  # label -> the process under that label now
    def follow(self) -> bool: ...  # the job's own records, once a round: True once it is done
    def judge(self, label: str, code: int) -> "str | PiclusterError": ...  # a verdict, or the failure now
    def failed(self, failures: Sequence[tuple[str, int]]) -> PiclusterError: ...  # the job's error
    def finished(self, done: set[str]) -> bool: ...  # every process it waits for is done
    def needed(self, done: set[str]) -> Sequence[Task]: ...  # the servers it cannot go on without
    def silent(self, tasks: Sequence[Task]) -> PiclusterError | None: ...  # None: dealt with (restarted)
    def progress(self, done: set[str]) -> None: ...


def watch(job: Watched, clock: Callable[[], float] = time.monotonic) -> PiclusterError | None:
    """Until ``job`` is done (None) or has failed (its error)."""
    done: set[str] = set()
    judged: list[Handle] = []  # each process's end is judged once (a restarted one is a new process)
    probed = clock()
    while True:
        if job.follow():
            return None
        ended = _ended(job.handles(), judged)
        if any(code != 0 for _, code in ended):
            time.sleep(SETTLE_S)
            ended += _ended(job.handles(), judged)
        failures: list[tuple[str, int]] = []
        for label, code in ended:
            verdict = job.judge(label, code)
            if isinstance(verdict, PiclusterError):
                return verdict
            if verdict == DONE:
                done.add(label)
            elif verdict == FAILED:
                failures.append((label, code))
        if failures:
            return job.failed(failures)
        if job.finished(done):
            return None
        if clock() - probed > job.probe_s:
            probed = clock()
            tries, timeout, pause = job.probe_patience
            silent = probe.unanswered(job.needed(done), tries=tries, timeout=timeout, pause=pause)
            cause = job.silent(silent) if silent else None
            if cause is not None:
                return cause
        job.progress(done)
        time.sleep(job.poll_s)


def _ended(handles: Mapping[str, Handle], judged: list[Handle]) -> list[tuple[str, int]]:
    """Processes that ended since the last look, with their exit status."""
    out: list[tuple[str, int]] = []
    for label, handle in handles.items():
        if any(handle is seen for seen in judged):
            continue
        code = handle.poll()
        if code is not None:
            judged.append(handle)
            out.append((label, code))
    return out
