"""What one HAR training step sends between tasks: tensors and RPCs per worker-step, counted.

Run: .venv/bin/python benchmarks/har_rpcs.py [--workers 2] [--ps 1] [--mode sync] [--exchange fused,variables] [--local 1,4]
(counts, not time: it needs no quiet machine.)

Real TensorFlow servers in this process (ps and workers on 127.0.0.1), each worker with the
graph `picluster train har` builds for it (jobs/har/graph.py), every worker taking real steps at
once.  On one step TensorFlow hands back the partition graphs it ran (``output_partition_graphs``):
one partition per task, and every ``_Recv`` whose sender is another task is one tensor fetched
with a ``RecvTensor`` RPC.  A worker-step's RPCs are its remote partitions (one ``RunGraph`` each)
plus those tensors.  This counts what the graph sends, whatever the links or the machine.
"""

import argparse
import csv
import json
import socket
import sys
import threading
import types
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

ROWS = Path(__file__).resolve().parent / "results" / "har_rpcs.csv"
FIELDS = ("exchange", "mode", "workers", "ps", "worker_partitions", "remote_partitions", "remote_tensors",
          "rpcs_per_worker_step", "chief_remote_tensors", "chief_rpcs", "local_step_rpcs", "sync_rpcs", "chief_sync_rpcs", "wire")


def free_ports(n: int) -> list[int]:
    socks = [socket.socket() for _ in range(n)]
    for s in socks:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in socks]
    for s in socks:
        s.close()
    return ports


def task_of(device: str) -> str:
    """'/job:ps/replica:0/task:0/device:CPU:0' -> 'ps:0'."""
    parts = dict(p.split(":", 1) for p in device.strip("/").split("/") if ":" in p)
    return f"{parts.get('job', '?')}:{parts.get('task', '?')}"


def count(metadata, own: str) -> dict:
    """Partitions on other tasks and tensors received from another task, in one step's metadata."""
    remote_partitions = remote_tensors = 0
    dtypes: dict[str, int] = {}
    for graph in metadata.partition_graphs:
        tasks = {task_of(n.device) for n in graph.node if n.device}
        if tasks and tasks != {own}:
            remote_partitions += 1
        for node in graph.node:
            if node.op not in ("_Recv", "_HostRecv"):
                continue
            sender, receiver = node.attr["send_device"].s.decode(), node.attr["recv_device"].s.decode()
            if task_of(sender) != task_of(receiver):
                remote_tensors += 1
                kind = tf_dtype_name(node.attr["tensor_type"].type)
                dtypes[kind] = dtypes.get(kind, 0) + 1
    return {"partitions": len(metadata.partition_graphs), "remote_partitions": remote_partitions,
            "remote_tensors": remote_tensors, "remote_dtypes": dtypes}


def tf_dtype_name(enum: int) -> str:
    import tensorflow as tf

    return tf.dtypes.as_dtype(enum).name


def measure(exchange: str, mode: str, workers: int, ps: int, steps: int = 3, local: int = 1, wire: str = "float32") -> dict:
    """One row; ``local`` above 1: post-local SGD's step (--local-steps), its RPCs counted per
    local step and per sync (one every ``local`` steps), and amortised per worker-step."""
    import tensorflow as tf

    from picluster.jobs.har.config import TrainConfig
    from picluster.jobs.har.graph import Graph

    tf.compat.v1.disable_eager_execution()
    ports = free_ports(ps + workers)
    cluster = {"ps": [f"127.0.0.1:{p}" for p in ports[:ps]], "worker": [f"127.0.0.1:{p}" for p in ports[ps:]]}
    servers = [tf.distribute.Server(cluster, "ps", t, start=True) for t in range(ps)]
    servers += [tf.distribute.Server(cluster, "worker", t, start=True) for t in range(workers)]
    cfg = TrainConfig(workers=workers, ps=ps, mode=mode, exchange=exchange, evaluator="coordinator", local_steps=local,
                      local_after=0, wire=wire)
    rng = np.random.default_rng(0)
    data = types.SimpleNamespace(x_train=rng.normal(size=(2000, 128, 9)).astype(np.float32))
    batch = cfg.worker_batch(workers)
    launch = f"rpcs{ports[0]}"
    graphs = [Graph.replica(cfg, data, cluster, t, launch) for t in range(workers)]
    sessions = []
    for t, g in enumerate(graphs):
        config = tf.compat.v1.ConfigProto(device_filters=["/job:ps", f"/job:worker/task:{t}"])
        sessions.append(tf.compat.v1.Session(f"grpc://{cluster['worker'][t]}", graph=g.graph, config=config))
    with graphs[0].graph.as_default():
        sessions[0].run(tf.compat.v1.global_variables_initializer())
        weights = getattr(graphs[0].kind, "weights", None)
        if weights is not None and weights.start is not None:
            sessions[0].run(weights.start)  # the 16-bit copies, as the chief fills them
    if local > 1:
        for g, s in zip(graphs, sessions):
            with g.graph.as_default():
                s.run(tf.compat.v1.local_variables_initializer())
            s.run(g.local_start)
    options = tf.compat.v1.RunOptions(output_partition_graphs=True)
    found: dict[int, dict] = {}
    errors: list[BaseException] = []

    def work_local(t: int) -> None:
        g, s = graphs[t], sessions[t]
        try:
            for i in range(local):
                feed = {g.x: data.x_train[:batch], g.y: np.zeros(batch, np.int64), g.keep: 0.85, g.local_done: i}
                metadata = tf.compat.v1.RunMetadata()
                s.run(g.local.step, feed, options=options, run_metadata=metadata)
            found[t] = count(metadata, f"worker:{t}")
            metadata = tf.compat.v1.RunMetadata()
            s.run(g.local_sync, {g.local_done: local}, options=options, run_metadata=metadata)
            synced[t] = count(metadata, f"worker:{t}")
        except BaseException as exc:
            errors.append(exc)

    synced: dict[int, dict] = {}

    def work(t: int) -> None:
        g, s = graphs[t], sessions[t]
        try:
            arrivals = g.kind.arrivals
            fetches = [g.train, g.xent, g.correct, g.step_before, g.step_after] + ([arrivals] if arrivals is not None else [])
            for i in range(steps):
                feed = {g.x: data.x_train[:batch], g.y: np.zeros(batch, np.int64), g.keep: 0.85}
                if i == steps - 1:
                    metadata = tf.compat.v1.RunMetadata()
                    s.run(fetches, feed, options=options, run_metadata=metadata)
                    found[t] = count(metadata, f"worker:{t}")
                else:
                    s.run(fetches, feed)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=work if local == 1 else work_local, args=(t,)) for t in range(workers)]
    for th in threads:
        th.start()
    for th in threads:
        th.join(300)
    for s in sessions:
        s.close()
    if errors:
        raise errors[0]
    def rpcs(step: dict) -> float:
        return step["remote_partitions"] + step["remote_tensors"]

    if local > 1:  # a sync's RPCs shared among the local steps it follows
        found = {t: {k: found[t][k] + synced[t][k] / local if k != "remote_dtypes" else found[t][k] for k in found[t]} for t in found}
    others = [found[t] for t in range(1, workers)] or [found[0]]
    per = {k: float(np.median([o[k] for o in others])) for k in others[0] if k != "remote_dtypes"}
    chief = found[0]
    extra = {}
    if local > 1:
        extra = {"local_step_rpcs": float(np.median([rpcs(found[t]) - rpcs(synced[t]) / local for t in found])),
                 "sync_rpcs": float(np.median([rpcs(synced[t]) for t in range(1, workers)] or [rpcs(synced[0])])),
                 "chief_sync_rpcs": rpcs(synced[0])}
    return {"exchange": exchange if local == 1 else f"{exchange}+local{local}", "mode": mode, "workers": workers, "ps": ps, **extra,
            "worker_partitions": per["partitions"], "remote_partitions": per["remote_partitions"],
            "remote_tensors": per["remote_tensors"],
            "rpcs_per_worker_step": per["remote_partitions"] + per["remote_tensors"],
            "chief_remote_tensors": chief["remote_tensors"], "chief_rpcs": chief["remote_partitions"] + chief["remote_tensors"],
            "wire": wire, "remote_dtypes": others[0]["remote_dtypes"], "chief_remote_dtypes": chief["remote_dtypes"]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workers", default="2")
    ap.add_argument("--ps", default="1")
    ap.add_argument("--mode", default="sync,async")
    ap.add_argument("--exchange", default="variables,fused")
    ap.add_argument("--wire", default="float32", help="the fused exchange's type on the wire (float32 or bfloat16)")
    ap.add_argument("--local", default="1", help="--local-steps values, comma-separated (sync only) [1]")
    ap.add_argument("--keep", help="also write the rows to this CSV (for docs/data)")
    args = ap.parse_args()
    rows = []
    for exchange in args.exchange.split(","):
        for mode in args.mode.split(","):
            for ps in (int(p) for p in args.ps.split(",")):
                for workers in (int(w) for w in args.workers.split(",")):
                    for local in (int(k) for k in args.local.split(",")):
                        if local > 1 and mode != "sync":
                            continue
                        row = measure(exchange, mode, workers, ps, local=local, wire=args.wire if exchange == "fused" else "float32")
                        print(json.dumps(row), flush=True)
                        rows.append(row)
    for path in [ROWS] + ([Path(args.keep)] if args.keep else []):
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(path, "w", newline="") as f:
            w = csv.DictWriter(f, FIELDS, restval="", extrasaction="ignore")
            w.writeheader()
            w.writerows(rows)


if __name__ == "__main__":
    main()
