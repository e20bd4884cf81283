"""Helpers for the launch tests: a launch running in the background, and the processes of its tasks."""

import json
import signal
import subprocess
import threading
import time
from pathlib import Path

import psutil
import pytest

from conftest import ROOT, picluster_popen

EXAMPLES = ROOT / "examples"

# pytest started from a background job inherits SIGINT ignored, and so would every launch it starts:
# the Ctrl-C the tests send would be lost.  A handler here is reset to the default in each child.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)


class Launched:
    """``picluster launch ...`` in the background; its output collected line by line as it comes."""

    def __init__(self, *args, env=None) -> None:
        self.start = time.monotonic()
        self.proc = picluster_popen("launch", "--no-live", *args, env=env)
        self.out: list[str] = []
        self.err: list[str] = []
        self._readers = [threading.Thread(target=self._read, args=(stream, sink), daemon=True)
                         for stream, sink in ((self.proc.stdout, self.out), (self.proc.stderr, self.err))]
        for reader in self._readers:
            reader.start()

    @staticmethod
    def _read(stream, sink) -> None:
        for line in stream:
            sink.append(line.rstrip("\n"))

    def wait_for(self, text: str, timeout: float = 120) -> float:
        """Until a line of stdout contains ``text``; the seconds since the launch began."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if any(text in line for line in list(self.out)):
                return time.monotonic() - self.start
            assert self.proc.poll() is None, f"launch ended ({self.proc.returncode}) before {text!r}:\n" + self.text()
            time.sleep(0.1)
        raise AssertionError(f"no {text!r} within {timeout} s:\n" + self.text())

    def finish(self, timeout: float = 180) -> int:
        try:
            code = self.proc.wait(timeout)
        finally:
            if self.proc.poll() is None:
                self.proc.kill()
        for reader in self._readers:
            reader.join(5)
        return code

    def stop(self) -> None:
        """As Ctrl-C would: the launch stops its tasks; killed if it has not ended within a minute."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                self.proc.kill()

    def text(self) -> str:
        return "\n".join(self.out[-40:] + ["--- stderr ---"] + self.err[-20:])

    def error_lines(self) -> list[str]:
        return [line for line in self.err if line.startswith("picluster: error:")]

    def job_id(self) -> int:
        for line in self.err:
            if line.startswith("job ") and ":" in line:
                return int(line.split()[1].rstrip(":"))
        raise AssertionError("no job id announced:\n" + self.text())


@pytest.fixture
def launch():
    """``launch(*args)`` starts a Launched; whatever a failed test leaves running is stopped after it."""
    made: list[Launched] = []

    def start(*args, **kwargs) -> Launched:
        made.append(Launched(*args, **kwargs))
        return made[-1]

    yield start
    for run in made:
        run.stop()


def script_processes(script: str) -> list[psutil.Process]:
    """Processes running ``script`` (the user's program, not its tether)."""
    found = []
    for proc in psutil.process_iter(["cmdline"]):
        cmd = proc.info["cmdline"] or []
        if any(part.endswith(script) for part in cmd) and "picluster.cluster.tether" not in cmd and "launch" not in cmd:
            found.append(proc)
    return found


def tethers() -> list[psutil.Process]:
    return [p for p in psutil.process_iter(["cmdline"]) if "picluster.cluster.tether" in (p.info["cmdline"] or [])]


def task_of(proc: psutil.Process) -> int | None:
    try:
        return json.loads(proc.environ().get("TF_CONFIG", "{}")).get("task", {}).get("index")
    except (psutil.Error, ValueError):
        return None


def kill_worker_script(script: str, index: int, timeout: float = 60) -> int:
    """SIGKILL the copy of ``script`` that runs as worker ``index`` (on this machine or a test host:
    they share the pid namespace); its pid."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for proc in script_processes(script):
            if task_of(proc) == index:
                proc.send_signal(signal.SIGKILL)
                return proc.pid
        time.sleep(0.1)
    raise AssertionError(f"no worker {index} running {script}")


def wait_gone(predicate, timeout: float = 30) -> list:
    """Until ``predicate()`` returns nothing; what it returned last."""
    deadline = time.monotonic() + timeout
    left = predicate()
    while left and time.monotonic() < deadline:
        time.sleep(0.2)
        left = predicate()
    return left


def job_record(job_id: int):
    from picluster.jobs.records import JobStore

    return JobStore().get(job_id)


def write_script(path: Path, text: str) -> Path:
    path.write_text(text)
    return path
