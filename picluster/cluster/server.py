"""TensorFlow tasks: ``python -m picluster.cluster.server --cluster-file F --job worker --task 0``
serves one task; ``--all`` serves every task of the layout from this one process (a temporary
local cluster: TensorFlow is imported once, not once per task).  ``--door PATH`` also runs jobs'
clients inside the process (door.py): a node's worker needs no second TensorFlow runtime.

The process re-executes itself once with the bind shim preloaded, starts a
``tf.distribute.Server`` per task, checks that each listens only on its own address,
writes a ready file per task, and serves until it is killed.
"""

import argparse
import json
import os
import sys
from pathlib import Path

from picluster.cluster.lifetime import die_with_parent
from picluster.cluster.shim import SHIM_MARK, only_on, reexec_with_shim
from picluster.util import atomic, cpus


def ready_name(job: str, index: int) -> str:
    """A task's ready file in its run directory (``--ready-dir``)."""
    return f"{job}-{index}.ready"


MODULE = "picluster.cluster.server"
COLLECTIVE_LEADER = "/job:worker/replica:0/task:0"
RESERVED = 2  # ports Slurm reserves for the servers' step (--resv-ports): the ps tasks', the workers'


def command(python: str, *, cluster_file: str | None = None, layout: str | None = None, job: str | None = None,
            task: int | None = None, every: bool = False, slurm_node: bool = False, threads: int | None = None,
            ready_file: str | None = None, ready_dir: str | None = None, parent: int | None = None,
            door: str | None = None, share: str | None = None) -> list[str]:
    """The server's command line, as each kind of cluster starts it: one task (local.py, and as a
    node's shell words, nodecluster.py), ``every`` task in one process (inprocess.py), or a Slurm
    node's tasks (``slurm_node``, allocation.py).  The flags are the ones ``main`` parses, here
    beside it; values go in as given (a node's are shell words, its paths under ``$HOME``)."""
    argv = [python, "-m", MODULE]
    argv += ["--cluster-file", cluster_file] if cluster_file is not None else ["--layout", layout or ""]
    argv += ["--job", job or "", "--task", str(task)] if job is not None else []
    argv += ["--all"] if every else []
    argv += ["--slurm-node"] if slurm_node else []
    argv += ["--threads", str(threads)] if threads is not None else []
    argv += ["--ready-file", ready_file] if ready_file is not None else []
    argv += ["--ready-dir", ready_dir] if ready_dir is not None else []
    argv += ["--parent", str(parent)] if parent is not None else []
    argv += ["--door", door] if door is not None else []
    argv += ["--share", share] if share is not None else []
    return argv


def arguments() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=f"python -m {MODULE}")
    where = parser.add_mutually_exclusive_group(required=True)
    where.add_argument("--cluster-file", type=Path, help="JSON: {'layout': [...]} ")
    where.add_argument("--layout", help="the layout itself, as JSON (a Slurm job step: no file to share)")
    parser.add_argument("--job", choices=["ps", "worker"])
    parser.add_argument("--task", type=int)
    parser.add_argument("--all", action="store_true", help="serve every task of the layout (all on this machine)")
    parser.add_argument("--slurm-node", action="store_true",
                        help="serve every task of the Slurm node this step task runs on (SLURMD_NODENAME)")
    parser.add_argument("--threads", type=int, default=0,
                        help="intra/inter-op threads (0: the CPUs this process may use, its cgroup's quota counted; cpus.py)")
    parser.add_argument("--ready-file", type=Path, help="written once the task serves (one task)")
    parser.add_argument("--ready-dir", type=Path, help="where each task's ready file goes once it serves (--all)")
    parser.add_argument("--parent", type=int, help="exit when this pid (the coordinator) exits")
    parser.add_argument("--door", type=Path, help="open a door here: jobs' clients run inside this process (one task; door.py)")
    parser.add_argument("--share", help="with --door: the cluster's share as mounted here; what jobs read from it is read once the task serves")
    return parser


def step_ports(value: str) -> list[int]:
    """SLURM_STEP_RESV_PORTS ("12000-12001", "12000,12005") as ports."""
    ports: list[int] = []
    for part in filter(None, value.split(",")):
        first, _, last = part.strip().partition("-")
        if not first.isdigit() or (last and not last.isdigit()):
            raise ValueError(f"SLURM_STEP_RESV_PORTS {value!r} is not a list of ports")
        ports += range(int(first), int(last or first) + 1)
    return ports


def main(argv: list[str] | None = None) -> int:
    parser = arguments()
    args = parser.parse_args(argv)
    whole = args.all or args.slurm_node
    if (args.all and args.slurm_node) or (whole and (args.job, args.task) != (None, None)) or (not whole and None in (args.job, args.task)):
        parser.error("give --job and --task, or --all, or --slurm-node")
    if args.door and whole:
        parser.error("--door serves the clients of one task: give --job and --task")
    if args.share and not args.door:
        parser.error("--share is read ahead for the clients of a door: give --door too")

    if args.parent:
        die_with_parent(args.parent)

    from picluster.model.clusterspec import Layout

    layout = Layout.from_json(json.loads(args.layout) if args.layout else json.loads(args.cluster_file.read_text())["layout"])
    if args.slurm_node:
        # The two ports Slurm reserved for this step, the same on every node of it: said first,
        # so the job's coordinator knows where the servers will listen.
        try:
            ports = step_ports(os.environ.get("SLURM_STEP_RESV_PORTS", ""))
        except ValueError as exc:
            print(f"picluster.cluster.server: {exc}", file=sys.stderr)
            return 2
        if len(ports) < RESERVED:
            print(f"picluster.cluster.server: Slurm reserved {len(ports)} port(s) for this step, not {RESERVED} "
                  "(slurm.conf needs MpiParams=ports: provision the cluster again)", file=sys.stderr)
            return 2
        layout = layout.with_ports(ports[0], ports[1])
        if os.environ.get(SHIM_MARK) != "1":  # once, before the re-execution below
            print(f"picluster.cluster.server: reserved ports {ports[0]} {ports[1]}", flush=True)
        node = os.environ.get("SLURMD_NODENAME", "")
        mine = [t for t in layout.tasks if t.node == node]
        if not mine:
            print(f"picluster.cluster.server: no task of the layout is on Slurm node {node!r}", file=sys.stderr)
            return 2
    else:
        mine = list(layout.tasks) if args.all else [layout.task(args.job, args.task)]
    hosts = {t.host for t in mine}
    if len(hosts) != 1:
        print(f"picluster.cluster.server: tasks served together need one address, not {sorted(hosts)}", file=sys.stderr)
        return 2
    reexec_with_shim(mine[0].host, [t.port for t in mine], "picluster.cluster.server")

    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "1")
    import tensorflow as tf

    # TensorFlow would size its pools from every core it sees, quota or not (cpus.py).
    args.threads = args.threads or cpus.usable()
    if args.threads:
        # The server's devices take their pools from the context, not from the ConfigProto.
        # One spare inter-op thread: a long kernel must not hold up sends to other tasks.
        tf.config.threading.set_intra_op_parallelism_threads(args.threads)
        tf.config.threading.set_inter_op_parallelism_threads(args.threads + 1)
    config = tf.compat.v1.ConfigProto(
        intra_op_parallelism_threads=args.threads,
        inter_op_parallelism_threads=args.threads + 1 if args.threads else 0,
    )
    # TensorFlow's collective ops (a training's --exchange collective) resolve their groups through
    # one task's server; a session without collective ops never asks it.
    config.experimental.collective_group_leader = COLLECTIVE_LEADER
    spec = tf.train.ClusterSpec(layout.cluster_dict())
    if args.door:  # open before the ready file: a client may knock as soon as the task is ready
        from picluster.cluster.door import Door

        door = Door(args.door, mine[0].label)
        door.open()
    servers = []
    for me in mine:
        try:
            server = tf.distribute.Server(spec, job_name=me.job, task_index=me.index, protocol="grpc", config=config, start=True)
        except (tf.errors.OpError, RuntimeError, ValueError) as exc:  # a port taken meanwhile, and the like
            why = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            print(f"picluster.cluster.server: {me.label} error: cannot serve: {why}", file=sys.stderr, flush=True)
            return 1
        wrong = only_on(me.host, me.port)
        if wrong:
            print(f"picluster.cluster.server: {me.label} refusing to serve: {wrong}", file=sys.stderr)
            return 3
        servers.append(server)
        print(f"picluster.cluster.server: {me.label} serving {server.target} (pid {os.getpid()})", flush=True)
        if args.ready_file:
            atomic.write_json(args.ready_file, {"pid": os.getpid(), "target": server.target})
        if args.ready_dir:
            atomic.write_json(args.ready_dir / ready_name(me.job, me.index), {"pid": os.getpid(), "target": server.target})
    if args.door and args.share:
        door.read_ahead(args.share)
    servers[0].join()
    return 0


if __name__ == "__main__":
    sys.exit(main())
