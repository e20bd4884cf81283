"""One TensorFlow task: ``python -m picluster.cluster.server --cluster-file F --job worker --task 0``.

The process re-executes itself once with the bind shim preloaded, starts a
``tf.distribute.Server``, checks that it listens only on its own address,
writes a ready file, and serves until it is killed.
"""

import argparse
import json
import os
import sys
from pathlib import Path

from picluster import atomic
from picluster.cluster.lifetime import die_with_parent
from picluster.cluster.shim import only_on, reexec_with_shim


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m picluster.cluster.server")
    parser.add_argument("--cluster-file", required=True, type=Path, help="JSON: {'layout': [...]} ")
    parser.add_argument("--job", required=True, choices=["ps", "worker"])
    parser.add_argument("--task", required=True, type=int)
    parser.add_argument("--threads", type=int, default=0, help="intra/inter-op threads (0: TensorFlow's default)")
    parser.add_argument("--ready-file", type=Path)
    parser.add_argument("--parent", type=int, help="exit when this pid (the coordinator) exits")
    args = parser.parse_args(argv)

    if args.parent:
        die_with_parent(args.parent)

    from picluster.clusterspec import Layout

    layout = Layout.from_json(json.loads(args.cluster_file.read_text())["layout"])
    me = layout.task(args.job, args.task)
    reexec_with_shim(me.host, me.port, "picluster.cluster.server")

    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "1")
    import tensorflow as tf

    if args.threads:
        # The server's devices take their pools from the context, not from the ConfigProto.
        # One spare inter-op thread: a long kernel must not hold up sends to other tasks.
        tf.config.threading.set_intra_op_parallelism_threads(args.threads)
        tf.config.threading.set_inter_op_parallelism_threads(args.threads + 1)
    config = tf.compat.v1.ConfigProto(
        intra_op_parallelism_threads=args.threads,
        inter_op_parallelism_threads=args.threads + 1 if args.threads else 0,
    )
    server = tf.distribute.Server(
        tf.train.ClusterSpec(layout.cluster_dict()),
        job_name=me.job,
        task_index=me.index,
        protocol="grpc",
        config=config,
        start=True,
    )
    wrong = only_on(me.host, me.port)
    if wrong:
        print(f"picluster.cluster.server: refusing to serve: {wrong}", file=sys.stderr)
        return 3
    print(f"picluster.cluster.server: {me.label} serving {server.target} (pid {os.getpid()})", flush=True)
    if args.ready_file:
        atomic.write_json(args.ready_file, {"pid": os.getpid(), "target": server.target})
    server.join()
    return 0


if __name__ == "__main__":
    sys.exit(main())
