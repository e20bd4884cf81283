"""A Slurm allocation as the cluster of a job: the job's nodes, its servers started with ``srun``.

A command run inside ``sbatch`` or ``salloc`` (``SLURM_JOB_ID`` set) gets the allocation instead of
the inventory or the local cluster: its nodes are the ones Slurm gave the job, their addresses
the ones slurm.conf names (``NodeAddr``), and the servers run as one job step, one step task per
node serving that node's tasks.  They live as long as the job: the step is stopped when the job's
command ends, and Slurm stops it when the job is cancelled or runs out of time.

TensorFlow's own SlurmClusterResolver is not used: it builds no cluster on nodes without GPUs.
"""

import ipaddress
import json
import logging
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path

from picluster.cluster import server
from picluster.cluster.base import Agent, Cluster, TaskState
from picluster.cluster.exits import file_tail
from picluster.cluster.probe import answers
from picluster.cluster.server import RESERVED
from picluster.model import nodeset
from picluster.model.clusterspec import Layout, Task
from picluster.util import verbosity
from picluster.util.errors import ClusterError
from picluster.util.paths import state_dir

log = logging.getLogger(__name__)  # -v: the Slurm commands run inside the allocation (srun, scontrol)

# The job's ps tasks listen on the first of the two ports Slurm reserves for the servers' step
# (srun --resv-ports, slurm.conf's MpiParams=ports), its workers on the second: slurmctld gives a
# port of a node to one step at a time, so jobs sharing a node never collide, and the range lies
# above the ports `cluster up` keeps.  The layout carries PLACEHOLDER until the step says its ports.
PLACEHOLDER_PORT = 2224
PORTS_LINE = re.compile(r"^\d+: picluster\.cluster\.server: reserved ports (\d+) (\d+)$", re.M)
PS_ENV = "PICLUSTER_PS"  # ps tasks of the job (submit --ps); default: one
SHARE_ENV = "PICLUSTER_SHARE"  # the inventory's data_dir: data and runs that every node reads
START_TIMEOUT = 180.0  # TensorFlow loads in seconds on a Pi 4; nodes slower than that set START_ENV
START_ENV = "PICLUSTER_START_TIMEOUT"  # seconds the job's servers may take to answer, from the submitting session
STOP_GRACE_S = 10.0
_JOB_ID = re.compile(r"\d{1,12}")


def job_id(environ: Mapping[str, str] = os.environ) -> str | None:
    """The Slurm job this process runs in, or None outside one."""
    value = environ.get("SLURM_JOB_ID", "")
    return value if _JOB_ID.fullmatch(value) else None


class Allocation(Cluster):
    """The nodes of the Slurm job this process runs in."""

    kind = "slurm"
    coordinator_spare = False  # the batch script runs on the allocation's first node, beside its tasks

    def __init__(self, job: str, layout: Layout) -> None:
        self.job = job
        self.layout = layout
        self.what = f"Slurm job {job}'s allocation"
        self.title = f"Slurm job {job}: {len(layout.workers)} nodes"
        self._step: subprocess.Popen | None = None
        self._log: Path | None = None

    @property
    def name(self) -> str:
        return f"slurm:{self.job}"

    @property
    def description(self) -> str:
        return self.what

    @classmethod
    def here(cls, environ: Mapping[str, str] = os.environ) -> "Allocation | None":
        """The allocation this process runs in (its layout read from Slurm), or None."""
        job = job_id(environ)
        if job is None:
            return None
        names = _scontrol("show", "hostnames", environ.get("SLURM_JOB_NODELIST", "")).split()
        if not names:
            raise ClusterError(f"Slurm job {job}: SLURM_JOB_NODELIST names no nodes")
        addresses = node_addresses(_scontrol("-o", "show", "node", ",".join(names)))
        missing = [n for n in names if n not in addresses]
        if missing:
            raise ClusterError(f"Slurm job {job}: scontrol gives no address for {nodeset.fold(missing)}")
        ps = _whole(environ, PS_ENV, default_ps(len(names)), 0, len(names))
        return cls(job, layout_of(names, addresses, ps, PLACEHOLDER_PORT))

    # -- the servers, one job step ------------------------------------------------------------
    def start(self, timeout: float | None = None) -> None:
        """Start the job's servers as one step and return once every task answers (within
        START_TIMEOUT, or the job environment's START_ENV)."""
        if timeout is None:
            timeout = float(_whole(os.environ, START_ENV, int(START_TIMEOUT), 1, 86400))
        nodes = sorted({t.node for t in self.layout.tasks})
        cmd = ["srun", f"--nodes={len(nodes)}", f"--ntasks={len(nodes)}", "--ntasks-per-node=1",
               f"--nodelist={','.join(nodes)}",
               # Later steps of the job (and the command itself) share the CPUs with the servers.
               "--overlap", "--kill-on-bad-exit=1", "--label", "--job-name=picluster-servers", f"--resv-ports={RESERVED}",
               *server.command(sys.executable, layout=json.dumps(self.layout.to_json()), slurm_node=True)]
        root = state_dir() / "tmp"
        root.mkdir(parents=True, exist_ok=True)
        fd, name = tempfile.mkstemp(prefix=f"slurm-{self.job}-", suffix=".log", dir=root)
        self._log = Path(name)
        verbosity.command(log, "local", cmd)
        with os.fdopen(fd, "wb") as out:
            self._step = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                                          start_new_session=True)
        try:
            self._wait(timeout)
        except BaseException:
            self.close()
            raise

    def _wait(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        ports = None
        pending = list(self.layout.tasks)
        while pending:
            assert self._step is not None and self._log is not None
            if self._step.poll() is not None:
                error = ClusterError(f"Slurm job {self.job}: the servers' step ended with status {self._step.returncode}")
                error.details = file_tail(self._log)
                raise error
            if ports is None:  # the ports Slurm reserved, said by the step's tasks before anything else
                said = PORTS_LINE.findall(self._log.read_text(errors="replace"))
                if said:
                    ports = said[0]
                    if len(set(said)) > 1:
                        raise ClusterError(f"Slurm job {self.job}: the servers' step was given different ports on its nodes "
                                           f"({', '.join(sorted({' '.join(p) for p in said}))})")
                    self.layout = self.layout.with_ports(int(ports[0]), int(ports[1]))
                    pending = list(self.layout.tasks)
            if ports is not None:
                pending = [t for t in pending if not answers(t.host, t.port)]
            if pending and time.monotonic() > deadline:
                if ports is None:
                    raise ClusterError(f"Slurm job {self.job}: the servers' step said no reserved ports after {timeout:.0f} s")
                labels = ", ".join(t.label for t in pending)
                raise ClusterError(f"Slurm job {self.job}: {nodeset.fold(t.node for t in pending)} not answering "
                                   f"after {timeout:.0f} s ({labels}); nodes that load TensorFlow slower than that need "
                                   f"longer: submit with {START_ENV}=SECONDS in your environment")
            if pending:
                time.sleep(0.3)

    def close(self) -> None:
        """Stop the servers' step: srun passes SIGTERM on to its tasks; a step that outlives its
        grace is killed (Slurm then ends its tasks)."""
        step, self._step = self._step, None
        if step is not None and step.poll() is None:
            step.send_signal(signal.SIGTERM)
            try:
                step.wait(STOP_GRACE_S)
            except subprocess.TimeoutExpired:
                os.killpg(step.pid, signal.SIGKILL)
                step.wait()
        if self._log is not None:
            self._log.unlink(missing_ok=True)
            self._log = None

    def launcher(self, node: str) -> tuple[str, ...]:
        """srun, one task on ``node``, in a step of its own beside the servers'."""
        return ("srun", "--nodes=1", "--ntasks=1", f"--nodelist={node}", "--overlap", "--quiet",
                "--kill-on-bad-exit=1", "--job-name=picluster-task")

    def check_shared(self, paths: dict[str, Path]) -> None:
        """One step on every node of the job: each says which of ``paths`` it cannot see."""
        nodes = sorted({t.node for t in self.layout.tasks})
        script = 'for p in "$@"; do [ -e "$p" ] || echo "$SLURMD_NODENAME $p"; done'
        cmd = ["srun", f"--nodes={len(nodes)}", f"--ntasks={len(nodes)}", "--ntasks-per-node=1", "--overlap", "--quiet",
               f"--nodelist={','.join(nodes)}", "sh", "-c", script, "sh", *[str(p) for p in paths.values()]]
        started = verbosity.command(log, "local", cmd)
        try:
            done = subprocess.run(cmd, capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL)
        except subprocess.TimeoutExpired:
            raise ClusterError(f"Slurm job {self.job}: checking the nodes' files took over 120 s") from None
        verbosity.ended(log, "local", started, done.returncode, done.stderr.strip())
        if done.returncode != 0:
            why = (done.stderr.strip().splitlines() or [f"exit status {done.returncode}"])[-1]
            raise ClusterError(f"Slurm job {self.job}: cannot check the nodes' files: {why}")
        missing: dict[str, list[str]] = {}
        for line in done.stdout.splitlines():
            node, _, path = line.partition(" ")
            missing.setdefault(path, []).append(node)
        names = {str(p): what for what, p in paths.items()}
        for path, where in missing.items():
            raise ClusterError(f"{nodeset.fold(where)} cannot see {names.get(path, 'the path')} {path}: in a Slurm job, "
                               "data and runs go on a file system every node mounts (the inventory's data_dir)")

    # -- inspecting ---------------------------------------------------------------------------
    def status(self) -> list[TaskState]:
        return [TaskState(t.label, t.node, t.address, "up" if answers(t.host, t.port) else "down", t)
                for t in self.layout.tasks]

    def agents(self) -> list[Agent]:
        # A job's nodes run no agent of the job's own; the inventory's (cluster up) is not known here.
        roles: dict[str, set[str]] = {}
        for t in self.layout.tasks:
            roles.setdefault(t.node, set()).add(t.job)
        hosts = {t.node: t.host for t in self.layout.tasks}
        return [Agent(node, tuple(sorted(r)), hosts[node], None) for node, r in roles.items()]


def layout_of(names: list[str], addresses: Mapping[str, str], ps: int, port: int) -> Layout:
    """ps tasks on the first ``ps`` nodes at ``port``, a worker on every node at ``port + 1``: the
    nodes without a ps first, so a job that uses fewer workers than nodes (HAR's default: one
    per node without a ps) leaves the ps nodes to their ps."""
    tasks = [Task("ps", i, name, addresses[name], port) for i, name in enumerate(names[:ps])]
    order = names[ps:] + names[:ps]
    tasks += [Task("worker", i, name, addresses[name], port + 1) for i, name in enumerate(order)]
    return Layout(tuple(tasks))


def sizes(environ: Mapping[str, str] = os.environ) -> tuple[int, int] | None:
    """(nodes, ps tasks) of the Slurm job this process runs in, from its environment alone; None
    outside one."""
    if job_id(environ) is None:
        return None
    nodes = _whole(environ, "SLURM_JOB_NUM_NODES", 1, 1, 100000)
    return nodes, _whole(environ, PS_ENV, default_ps(nodes), 0, nodes)


def default_ps(nodes: int) -> int:
    """One ps task, as an inventory without roles gets (model/inventory.py's default_ps)."""
    return 1


def shared_dir(environ: Mapping[str, str] = os.environ) -> Path | None:
    """The folder every node of the job sees (the inventory's data_dir, the NFS share), as
    `picluster submit` passes it; None when not given."""
    value = environ.get(SHARE_ENV, "")
    return Path(value) if value.startswith("/") and job_id(environ) is not None else None


def work_folder(share: Path) -> Path:
    """Where a job writes its runs on the share: the submitter's own folder there when the cluster
    has one for them ([users]: <share>/users/<name>, which only they can write), else the share."""
    import pwd

    own = share / "users" / pwd.getpwuid(os.getuid()).pw_name
    return own if own.is_dir() else share


def scontrol_nodes(text: str) -> list[dict[str, str]]:
    """``scontrol -o show node``'s lines (one node each) as their KEY=VALUE fields."""
    return [dict(word.split("=", 1) for word in line.split() if "=" in word) for line in text.splitlines()]


# sinfo, one line per node: name, state and the reason an administrator or slurmctld gave.
SINFO_NODES = "sinfo --noheader --Node --format='%N|%T|%E'"
# States in which a node runs jobs; "*" after a state means slurmctld gets no answer from it.
_SERVING = {"idle", "allocated", "mixed", "completing", "planned", "reserved"}


def sinfo_states(text: str) -> dict[str, str]:
    """Node -> state, with the reason in brackets when there is one, from SINFO_NODES' lines."""
    states = {}
    for line in text.splitlines():
        name, _, rest = line.partition("|")
        state, _, reason = rest.partition("|")
        reason = reason.strip()
        states[name.strip()] = state.strip() + (f" ({reason})" if reason and reason != "none" else "")
    return states


def not_serving(states: Mapping[str, str]) -> dict[str, str]:
    """The nodes of sinfo_states that Slurm will not start a job on now (down, drained, not answering)."""
    return {n: s for n, s in states.items() if s.split(" ", 1)[0] not in _SERVING}


def node_addresses(text: str) -> dict[str, str]:
    """NodeName -> NodeAddr from ``scontrol -o show node``; an address that is not an IP address
    (a host name Slurm resolves) is refused, as the inventory refuses one."""
    out: dict[str, str] = {}
    for fields in scontrol_nodes(text):
        name, addr = fields.get("NodeName"), fields.get("NodeAddr")
        if not name or not addr:
            continue
        try:
            out[name] = str(ipaddress.ip_address(addr))
        except ValueError:
            raise ClusterError(f"Slurm node {name}: NodeAddr {addr!r} is not an IP address") from None
    return out


def _scontrol(*args: str) -> str:
    started = verbosity.command(log, "local", ["scontrol", *args])
    try:
        done = subprocess.run(["scontrol", *args], capture_output=True, text=True, timeout=30)
    except FileNotFoundError:
        raise ClusterError("SLURM_JOB_ID is set but scontrol is not installed on this node") from None
    except subprocess.TimeoutExpired:
        raise ClusterError(f"scontrol {' '.join(args)}: no answer from slurmctld in 30 s") from None
    verbosity.ended(log, "local", started, done.returncode, done.stderr.strip())
    if done.returncode != 0:
        why = (done.stderr.strip().splitlines() or [f"exit status {done.returncode}"])[-1]
        raise ClusterError(f"scontrol {args[0]} {args[1]}: {why}")
    return done.stdout


def _whole(environ: Mapping[str, str], key: str, default: int, low: int, high: int) -> int:
    value = environ.get(key)
    if value is None or value == "":
        return default
    if not re.fullmatch(r"\d{1,6}", value) or not low <= int(value) <= high:
        raise ClusterError(f"{key}={value!r} must be a whole number from {low} to {high}")
    return int(value)
