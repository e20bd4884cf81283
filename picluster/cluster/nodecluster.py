"""Servers on inventory nodes, over SSH: start detached, check, stop.

On each node the run directory ``~/.local/state/picluster/node`` holds the cluster file, the
start script and, per task, a pid file and a log.  ``up`` starts only what does not answer, so
after a task died it restarts just that one.  Each node also runs its agent on the cluster
address.  The start script is what the node runs again at boot (``start_script``).
"""

import json
import shlex
import threading
import time
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING

from picluster.cluster import pidfiles, server, sharecopy
from picluster.cluster.base import Agent, Cluster, TaskState
from picluster.cluster.door import door_path
from picluster.cluster.exits import TAIL_LINES, Exit, Exited
from picluster.cluster.jobfolder import JobFolder
from picluster.cluster.probe import answers, unanswered
from picluster.model import nodeset
from picluster.model.clusterspec import Layout, Task, from_inventory
from picluster.model.fanout import Results, fan_out
from picluster.model.inventory import Inventory, Node
from picluster.util.errors import ClusterError

if TYPE_CHECKING:
    from picluster.cluster.ssh import Remote

PIDFILES_SOURCE = Path(pidfiles.__file__).read_text()
RUN_DIR = ".local/state/picluster/node"  # under the node user's home
AGENT = "agent"
START_SCRIPT = "start.sh"  # in RUN_DIR: what `up` started, run again at boot (start_script)
CHECK_S = 0.5  # between checks of the starting processes (one SSH command per node)
PIDFILES = "pidfiles.py"  # in RUN_DIR: the node side of the pid files (pidfiles.py), run by the node's python3
SEAL_WAIT_S = 10  # for a started process's pid file: its start is recorded first
MAX_TIMEOUT_S = 3600  # the longest `cluster up --timeout`


class NodeCluster(Cluster):
    """The inventory's nodes: servers and agents started over SSH by ``up``, left running by jobs."""

    kind = "inventory"
    what = "the inventory"
    inventory: Inventory
    worker_runtimes = ("resident", "shared", "separate")  # its servers have doors and pid files (jobfolder.py)

    def __init__(self, inv: Inventory) -> None:
        self.inventory = inv
        self.layout = from_inventory(inv)
        self.title = f"{inv.name}: {len(inv.nodes)} nodes"
        self._remotes: dict[str, Remote] = {}  # a job's connections to the nodes its processes run on
        self._opening = threading.Lock()  # a job opens its nodes' connections from several threads

    def status(self) -> list[TaskState]:
        """Each task, "up" or "down", probed from here (the agents are not: `top` shows them)."""
        return [TaskState(t.label, t.node, t.address, state, t) for t, state in status(self.inventory)]

    def agents(self) -> list[Agent]:
        inv = self.inventory
        return [Agent(n.name, tuple(inv.roles_of(n.name)), n.address, inv.agent_port) for n in inv.nodes]

    def up(self, timeout: float = 120.0) -> Results[list[str]]:
        return up(self.inventory, timeout)

    def down(self) -> Results[list[str]]:
        return down(self.inventory)

    def repair(self) -> None:
        self.up()

    # -- a job's own processes: over SSH, one connection per node the job uses ----------------

    def stage(self, files: list[tuple[str, Path]], folder: Path, name: str, nodes: list[str], job: str) -> dict[str, str] | None:
        from picluster.cluster import staging

        inv = self.inventory
        reached = fan_out(self._reach, sorted(set(nodes)), name=lambda n: n).raise_failures(f"{job}: reaching the workers")
        return staging.stage(inv, {n: reached[n] for n in nodes}, files, name, RUN_DIR,
                             lambda: open_node(inv, inv.node(inv.nfs_master)))

    def start_task(self, spec, grace: float, on_line):
        """On its node over the connection ``stage`` opened; a task on "localhost" (a chief) here."""
        from picluster.cluster import tasks

        remote = self._remotes.get(spec.node)
        if remote is None:
            return super().start_task(spec, grace, on_line)
        return tasks.start(spec, grace, on_line, remote, node_python(self.inventory))

    def unreachable(self, node: str) -> bool:
        return node in self._remotes and not answers(self.inventory.node(node).address, 22, 1.0)

    def shared_copy(self, relative: str) -> Path | None:
        """A copy of the share's file here, fetched from the NFS master when it changed (sharecopy.py)."""
        if Path(self.inventory.data_dir).is_dir():
            return None  # the share is mounted here: data_dir names it
        remote = open_node(self.inventory, self.inventory.node(self.inventory.nfs_master))
        try:
            return sharecopy.copy_here(self.inventory, remote, relative)
        finally:
            remote.close()

    def job_folder(self, node: str, name: str) -> JobFolder:
        """``name`` under the node's run folder, over a connection kept until ``release``."""
        return JobFolder(node, self._reach(node), PurePosixPath(RUN_DIR) / name, f"$HOME/{RUN_DIR}")

    def _reach(self, node: str) -> "Remote":
        """The job's connection to ``node``, opened on first use (from any of the job's threads)."""
        with self._opening:
            remote = self._remotes.get(node)
        if remote is None:
            opened = open_node(self.inventory, self.inventory.node(node))
            with self._opening:
                remote = self._remotes.setdefault(node, opened)
            if remote is not opened:  # another thread of the job reached the node first
                opened.close()
        return remote

    def release(self) -> None:
        remotes, self._remotes = self._remotes, {}
        for remote in remotes.values():
            remote.close()


def node_python(inv: Inventory) -> str:
    """The venv's python as a shell word (inventory.venv allows no shell metacharacters)."""
    if inv.venv.startswith("/"):
        return f"{inv.venv}/bin/python"
    return f"$HOME/{inv.venv.removeprefix('~/')}/bin/python"


def open_node(inv: Inventory, node: Node, timeout: float = 10.0) -> "Remote":
    """An open ``Remote`` to ``node`` as the inventory's user (its host key checked by the
    process's policy, picluster.cluster.hostkeys)."""
    from picluster.cluster.ssh import Remote, connect

    conn = connect(node.address, inv.user, inv.ssh_key, timeout)
    remote = Remote(conn, inv.user, timeout=60.0, open_timeout=timeout, name=node.name)
    remote.open()
    return remote


def _detached(name: str, command: str) -> str:
    """Shell lines that start ``command`` detached from the SSH session, as process ``name``.

    A small ``sh`` waits for it and writes its exit status to ``name.exit``: a process that dies
    at start-up (a venv without picluster) is then reported with its status, not waited on.
    ``name.pid`` holds the process itself (what ``down`` and the tests signal), not the shell, and
    comes with its start (pidfiles.seal): from then on the pid is only taken for that process.
    """
    watcher = f"{command} & echo $! > {name}.pid.new; python3 {PIDFILES} seal {name}; wait $!; echo $? > {name}.exit"
    return (f"rm -f {name}.pid {name}.start {name}.ready {name}.exit; "
            f"setsid nohup sh -c {shlex.quote(watcher)} >{name}.log 2>&1 </dev/null & "
            # The pid file is put in place once sealed: wait for it, so checks that follow can rely on it.
            f"for i in $(seq {int(SEAL_WAIT_S * 10)}); do [ -s {name}.pid ] && break; sleep 0.1; done")


def start_script(inv: Inventory, node: Node, tasks: list[Task]) -> str:
    """The node's start script: each of its tasks and its agent, started unless running.

    `up` writes it beside cluster.json and runs it; at boot the node's picluster-node.service
    (provisioning's runtime step) runs it again, so a rebooted node's tasks come back by
    themselves; `down` removes it, so a stopped cluster stays stopped across reboots."""
    py, run = node_python(inv), f"$HOME/{RUN_DIR}"
    lines = ["# Written by 'picluster cluster up', run at boot by picluster-node.service, removed by 'cluster down'.",
             f"cd {run} || exit 1"]
    for task in tasks:
        name = _name(task)
        # A worker's server opens a door: a job's client then runs inside it (door.py).
        door = door_path(run, task.job, task.index) if task.job == "worker" else None
        # ... and reads ahead what jobs read from the share, once it serves.
        share = shlex.quote(str(inv.data_dir)) if door is not None else None
        words = server.command(py, cluster_file=f"{run}/cluster.json", job=task.job, task=task.index,
                               ready_file=f"{run}/{name}.ready", door=door, share=share)  # shell words: $HOME expands
        lines.append(_unless_running(name, server.MODULE, " ".join(words), task.label))
    agent = (f"{py} -m picluster.monitor.agent --addr {node.address} --port {inv.agent_port} --node {shlex.quote(node.name)} "
             f"--cluster-file {run}/cluster.json --ready-file {run}/agent.ready")
    lines.append(_unless_running(AGENT, "picluster.monitor.agent", agent, AGENT))
    return "\n".join(lines) + "\n"


def _unless_running(name: str, module: str, command: str, label: str) -> str:
    # The pid file must name this very process of this module (pidfiles.running): after a reboot it
    # names whatever process took that number since.
    return (f"if ! python3 {PIDFILES} running {name} {module}; then "
            f"{_detached(name, command)}; echo started {label}; fi")


def _start_command(inv: Inventory, node: Node, tasks: list[Task], layout: Layout) -> str:
    run = f"$HOME/{RUN_DIR}"
    return "\n".join([
        f"mkdir -p {run} && chmod 700 {run} && cd {run}",
        f"cat > cluster.json.new <<'PICLUSTER_EOF'\n{json.dumps({'layout': layout.to_json()})}\nPICLUSTER_EOF",
        "mv cluster.json.new cluster.json",
        _ship_pidfiles(),
        f"cat > {START_SCRIPT}.new <<'PICLUSTER_START_EOF'\n{start_script(inv, node, tasks)}PICLUSTER_START_EOF",
        f"mv {START_SCRIPT}.new {START_SCRIPT}",
        f"sh {START_SCRIPT}",
    ])


def _ship_pidfiles() -> str:
    """Shell lines that write pidfiles.py into the run folder (the current one): the coordinator's
    version, which every later check, the boot's start script and ``down`` run."""
    return f"cat > {PIDFILES}.new <<'PICLUSTER_PIDFILES_EOF'\n{PIDFILES_SOURCE}PICLUSTER_PIDFILES_EOF\nmv {PIDFILES}.new {PIDFILES}"


def _name(task: Task) -> str:
    return f"{task.job}-{task.index}"


def up(inv: Inventory, timeout: float = 120.0) -> Results[list[str]]:
    """Start what is not running on every node; per node, the processes started.

    Returns once every task answers; a server or agent that exits first is reported within
    a second or so, with its node, exit status and the end of its log (``Exited``).
    """
    layout = from_inventory(inv)
    nodes = [n for n in inv.nodes if any(t.node == n.name for t in layout.tasks)]
    remotes: dict[str, Remote] = {}

    def start(node: Node) -> list[str]:
        tasks = [t for t in layout.tasks if t.node == node.name]
        remote = remotes[node.name] = open_node(inv, node)
        out = remote.run(_start_command(inv, node, tasks, layout)).stdout
        return [line.split(" ", 1)[1] for line in out.splitlines() if line.startswith("started ")]

    try:
        started = fan_out(start, nodes).raise_failures("cluster up")
        _wait_started(layout, {n.name: (n, remotes[n.name]) for n in nodes}, timeout)
    finally:
        for remote in remotes.values():
            remote.close()
    return started


def _wait_started(layout: Layout, nodes: "dict[str, tuple[Node, Remote]]", timeout: float) -> None:
    """Until every process is ready and every task answers: the nodes say which are ready,
    alive or dead (with exit status and log tail); the first deaths end the wait."""
    deadline = time.monotonic() + timeout
    waiting = set(nodes)
    while waiting:
        checked = fan_out(lambda name: _check(nodes[name][1], _names(layout, name)), sorted(waiting), name=lambda n: n)
        checked.raise_failures("cluster up")
        exits = [Exit(node, label, status, tail) for node, states in checked.items()
                 for label, (state, status, tail) in states.items() if state == "dead"]
        if exits:
            raise Exited("cluster up", exits)
        ready = {node for node, states in checked.items() if all(s[0] == "ready" for s in states.values())}
        # Ready files say the servers bound their address; this machine must reach them too.
        waiting -= {node for node in ready if not unanswered([t for t in layout.tasks if t.node == node])}
        if waiting and time.monotonic() > deadline:
            raise ClusterError(_not_answering(layout, {n: checked[n] for n in waiting}, timeout))
        if waiting:
            time.sleep(CHECK_S)


def _not_answering(layout: Layout, states: dict[str, dict], timeout: float) -> str:
    """One line for the tasks `cluster up` gave up on, with what to do: a server still starting
    (a slow card, a first import of TensorFlow) needs more time, and keeps starting meanwhile; one
    whose node says it is ready but that this machine cannot reach is a network matter."""
    pending = [t for t in layout.tasks if t.node in states]
    unreached = [t for t in pending if states[t.node].get(t.label, ("",))[0] == "ready"]
    starting = [t for t in pending if t not in unreached]
    nodes = nodeset.fold(states)
    if starting:
        labels = ", ".join(t.label for t in starting)
        return (f"{nodes}: not answering after {timeout:.0f} s ({labels}: still starting); they go on starting: "
                f"'picluster cluster up --timeout {_longer(timeout)}' waits for them, 'picluster cluster down' stops them")
    where = ", ".join(f"{t.label} at {t.host}:{t.port}" for t in unreached)
    return (f"{nodes}: not answering after {timeout:.0f} s, though started on the node ({where}): this machine "
            f"cannot reach it; check the inventory's addresses and that 'picluster provision' let this machine in")


def _longer(timeout: float) -> int:
    """The wait `cluster up` suggests after ``timeout`` ran out: three times as long, at least five
    minutes, never more than its --timeout takes (an hour)."""
    return min(max(int(timeout) * 3, 300), MAX_TIMEOUT_S)


def _names(layout: Layout, node: str) -> dict[str, str]:
    """Process name on the node -> label: its tasks' ("worker-1" -> "worker:1") and the agent."""
    return {_name(t): t.label for t in layout.tasks if t.node == node} | {AGENT: AGENT}


def _check(remote: "Remote", names: dict[str, str]) -> dict[str, tuple[str, int | None, tuple[str, ...]]]:
    """label -> ("ready" | "alive" | "dead", exit status or None, last log lines when dead)."""
    out = remote.run(f"cd $HOME/{RUN_DIR} || exit 0\npython3 {PIDFILES} check --tail {TAIL_LINES} {' '.join(names)}").stdout
    states = json.loads(out) if out.strip() else {}
    return {names[name]: (state, status, tuple(tail)) for name, (state, status, tail) in states.items() if name in names}


def status(inv: Inventory) -> list[tuple[Task, str]]:
    """Each task, "up" or "down": probed at once, so dead nodes cost one timeout, not one each."""
    tasks = from_inventory(inv).tasks
    answered = fan_out(lambda t: answers(t.host, t.port), tasks, name=lambda t: t.label)
    return [(t, "up" if answered[t.label] else "down") for t in tasks]


def down(inv: Inventory) -> Results[list[str]]:
    """Stop every task and agent picluster started on the nodes; verify each is gone."""
    script = (f"cd $HOME/{RUN_DIR} 2>/dev/null || exit 0\n"
              f"rm -f {START_SCRIPT}\n"  # nothing starts at the next boot
              f"{_ship_pidfiles()}\n"  # its own version, whichever picluster started the processes
              f"python3 {PIDFILES} stop")  # every pid file's process, proven (pidfiles.running)

    def stop(node: Node) -> list[str]:
        remote = open_node(inv, node)
        try:
            out = remote.run(script).stdout
        finally:
            remote.close()
        return [line.split(" ", 1)[1] for line in out.splitlines() if line.startswith("stopped ")]

    return fan_out(stop, inv.nodes).raise_failures("cluster down")
