"""The one watch loop (jobs/watch.py): each exit judged once, failures that come together reported
together, a restarted process watched anew, the servers a job needs probed, a job's own records
followed.  The jobs' policies are tested through the jobs (launch, train)."""

import socket

import pytest

from picluster.jobs import watch
from picluster.model.clusterspec import Task
from picluster.util.errors import ClusterError

pytestmark = pytest.mark.unit


class Process:
    def __init__(self, code=None):
        self.code = code

    def poll(self):
        return self.code


class Job:
    """A job of processes ``procs`` whose verdicts come from ``verdicts`` (label -> verdict)."""

    poll_s = 0.01
    probe_s = 3600.0
    probe_patience = (1, 0.2, 0.0)

    def __init__(self, procs, verdicts=None, servers=()):
        self.procs, self.verdicts, self.servers = procs, verdicts or {}, list(servers)
        self.judged, self.failures, self.rounds, self.silenced = [], None, 0, []

    def handles(self):
        return self.procs

    def follow(self):
        self.rounds += 1
        return False

    def judge(self, label, code):
        self.judged.append((label, code))
        verdict = self.verdicts.get(label, watch.DONE if code == 0 else watch.FAILED)
        return verdict(label) if callable(verdict) else verdict

    def failed(self, failures):
        self.failures = sorted(failures)
        return ClusterError(f"failed: {self.failures}")

    def finished(self, done):
        return done == set(self.procs)

    def needed(self, done):
        return self.servers

    def silent(self, tasks):
        self.silenced.append([t.label for t in tasks])
        return ClusterError(f"{tasks[0].label} stopped answering")

    def progress(self, done):
        pass


def test_every_exit_is_judged_once_and_the_job_ends_when_all_are_done():
    job = Job({"a": Process(0), "b": Process(0)})
    assert watch.watch(job) is None
    assert sorted(job.judged) == [("a", 0), ("b", 0)]


def test_failures_that_come_within_the_settling_time_are_reported_together(monkeypatch):
    b = Process()
    job = Job({"a": Process(3), "b": b, "c": Process()})
    monkeypatch.setattr(watch.time, "sleep", lambda s: setattr(b, "code", 4))  # b fails while the loop settles
    error = watch.watch(job)
    assert isinstance(error, ClusterError) and job.failures == [("a", 3), ("b", 4)]


def test_a_restarted_process_under_the_same_label_is_watched_anew():
    job = Job({"a": Process(1)})

    def restart_once(label):
        if len(job.judged) > 1:
            return watch.DONE
        job.procs[label] = Process(0)  # the job started it again
        return watch.GOES_ON

    job.verdicts["a"] = restart_once
    assert watch.watch(job) is None
    assert job.judged == [("a", 1), ("a", 0)]


def test_a_verdict_that_is_an_error_ends_the_watch_with_it():
    job = Job({"a": Process(2)}, {"a": lambda label: ClusterError("a's own words")})
    assert str(watch.watch(job)) == "a's own words"


def test_a_silent_server_the_job_needs_is_the_jobs_to_judge():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed once the block ends: nothing answers there
    job = Job({"a": Process()}, servers=[Task("ps", 0, "localhost", "127.0.0.1", port)])
    job.probe_s = 0.0
    error = watch.watch(job)
    assert str(error) == "ps:0 stopped answering" and job.silenced == [["ps:0"]]


def test_the_jobs_own_records_end_it_when_they_say_so():
    job = Job({"a": Process()})
    job.follow = lambda: True
    assert watch.watch(job) is None and job.judged == []
