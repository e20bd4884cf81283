"""Servers on inventory nodes, over SSH: start detached, check, stop.

On each node the run directory ``~/.local/state/picluster/node`` holds the cluster file and,
per task, a pid file and a log.  ``up`` starts only what does not answer, so after a task
died it restarts just that one.  Each node also runs its agent on the cluster address.
"""

import json
import shlex

from picluster.cluster.probe import answers, wait_answering
from picluster.clusterspec import Layout, Task, from_inventory
from picluster.fanout import Results, fan_out
from picluster.inventory import Inventory, Node

RUN_DIR = ".local/state/picluster/node"  # under the node user's home


def node_python(inv: Inventory) -> str:
    """The venv's python as a shell word (inventory.venv allows no shell metacharacters)."""
    if inv.venv.startswith("/"):
        return f"{inv.venv}/bin/python"
    return f"$HOME/{inv.venv.removeprefix('~/')}/bin/python"


def open_node(inv: Inventory, node: Node, timeout: float = 10.0):
    """An open ``Remote`` to ``node`` as the inventory's user."""
    from picluster.cluster.ssh import Remote, connect

    conn = connect(node.address, inv.user, inv.ssh_key, None, timeout)
    remote = Remote(conn, inv.user, timeout=60.0, open_timeout=timeout)
    remote.open()
    return remote


def _start_command(inv: Inventory, node: Node, tasks: list[Task], layout: Layout) -> str:
    py, run = node_python(inv), f"$HOME/{RUN_DIR}"
    lines = [f"mkdir -p {run} && chmod 700 {run} && cd {run}",
             f"cat > cluster.json.new <<'PICLUSTER_EOF'\n{json.dumps({'layout': layout.to_json()})}\nPICLUSTER_EOF",
             "mv cluster.json.new cluster.json"]
    for task in tasks:
        name = f"{task.job}-{task.index}"
        # Start only what is not running: the pid file names a live picluster server of this task.
        lines.append(
            f"if ! {{ [ -f {name}.pid ] && kill -0 $(cat {name}.pid) 2>/dev/null && "
            f"grep -q picluster.cluster.server /proc/$(cat {name}.pid)/cmdline; }}; then "
            f"rm -f {name}.ready; setsid nohup {py} -m picluster.cluster.server --cluster-file {run}/cluster.json "
            f"--job {task.job} --task {task.index} --ready-file {run}/{name}.ready >{name}.log 2>&1 </dev/null & "
            f"echo $! > {name}.pid; echo started {task.label}; fi"
        )
    agent = (f"{py} -m picluster.monitor.agent --addr {node.address} --port {inv.agent_port} --node {shlex.quote(node.name)} "
             f"--cluster-file {run}/cluster.json --ready-file {run}/agent.ready")
    lines.append(
        "if ! { [ -f agent.pid ] && kill -0 $(cat agent.pid) 2>/dev/null; }; then "
        f"setsid nohup {agent} >agent.log 2>&1 </dev/null & echo $! > agent.pid; echo started agent; fi"
    )
    return "\n".join(lines)


def up(inv: Inventory, timeout: float = 120.0) -> Results[list[str]]:
    """Start what is not running on every node; per node, the processes started."""
    layout = from_inventory(inv)
    nodes = [n for n in inv.nodes if any(t.node == n.name for t in layout.tasks)]

    def start(node: Node) -> list[str]:
        tasks = [t for t in layout.tasks if t.node == node.name]
        remote = open_node(inv, node)
        try:
            out = remote.run(_start_command(inv, node, tasks, layout)).stdout
        finally:
            remote.close()
        return [line.split(" ", 1)[1] for line in out.splitlines() if line.startswith("started ")]

    started = fan_out(start, nodes).raise_failures("cluster up")
    wait_answering(layout.tasks, timeout)
    return started


def status(inv: Inventory) -> list[tuple[Task, str]]:
    """Each task, "up" or "down": probed at once, so dead nodes cost one timeout, not one each."""
    tasks = from_inventory(inv).tasks
    answered = fan_out(lambda t: answers(t.host, t.port), tasks, name=lambda t: t.label)
    return [(t, "up" if answered[t.label] else "down") for t in tasks]


def down(inv: Inventory) -> Results[list[str]]:
    """Stop every task and agent picluster started on the nodes; verify each is gone."""
    script = (
        f"cd $HOME/{RUN_DIR} 2>/dev/null || exit 0\n"
        "for f in *.pid; do [ -f \"$f\" ] || continue; p=$(cat \"$f\");\n"
        "  if kill -0 \"$p\" 2>/dev/null && grep -q picluster /proc/$p/cmdline; then kill -TERM -\"$p\" 2>/dev/null || kill -TERM \"$p\"; echo \"stopped ${f%.pid}\"; fi; done\n"
        "for i in 1 2 3 4 5 6 7 8 9 10; do alive=0; for f in *.pid; do [ -f \"$f\" ] && kill -0 $(cat \"$f\") 2>/dev/null && alive=1; done;"
        " [ $alive = 0 ] && break; sleep 0.5; done\n"
        "for f in *.pid; do [ -f \"$f\" ] && kill -KILL -$(cat \"$f\") 2>/dev/null; rm -f \"$f\" \"${f%.pid}.ready\"; done; exit 0"
    )

    def stop(node: Node) -> list[str]:
        remote = open_node(inv, node)
        try:
            out = remote.run(script).stdout
        finally:
            remote.close()
        return [line.split(" ", 1)[1] for line in out.splitlines() if line.startswith("stopped ")]

    return fan_out(stop, inv.nodes).raise_failures("cluster down")


def stop_task_command(job: str, index: int) -> str:
    """Shell lines that stop this node's server of task ``job:index`` (as ``up`` started it) and wait until
    it is gone, so that another process can take its address: a training replica that serves
    its worker task itself (``picluster train har`` on an inventory cluster).  ``up`` starts it again."""
    name, run = f"{job}-{index}", f"$HOME/{RUN_DIR}"
    return (
        f"f={run}/{name}.pid; if [ -f $f ] && p=$(cat $f) && kill -0 $p 2>/dev/null && grep -q picluster.cluster.server /proc/$p/cmdline; then "
        "kill -TERM -$p 2>/dev/null || kill -TERM $p; "
        "for i in $(seq 100); do s=$(cut -d' ' -f3 /proc/$p/stat 2>/dev/null); [ -z \"$s\" ] || [ \"$s\" = Z ] && break; sleep 0.1; done; "
        f"kill -KILL -$p 2>/dev/null; fi; rm -f $f {run}/{name}.ready"
    )
