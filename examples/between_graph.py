"""Between-graph replication, as the thesis ran it: one copy of this script beside every worker.

Run it on the cluster with

    picluster launch --mode each-worker examples/between_graph.py --steps 400

picluster stages the script on every worker node (on the NFS share when it is mounted, else a
copy over SFTP) and starts it there with TF_CONFIG naming the cluster and this worker's task.
Each copy builds its own graph with the variables on the ps tasks (`replica_device_setter`)
and trains asynchronously on its own shard of a small synthetic linear regression through its
worker's server, which `picluster cluster up` started: connect to it, do not start another.
Worker 0 is the chief: it initialises the variables.  A restarted copy rejoins the training
where the others are: the chief initialises only variables that are not set yet.
"""

import argparse
import json
import os
import sys
import time

import numpy as np

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
import tensorflow as tf

FEATURES = 16


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=400, help="global steps, over all workers")
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--lr", type=float, default=0.05)
    parser.add_argument("--log-every", type=int, default=100, help="this worker's steps between lines")
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()

    config = json.loads(os.environ.get("TF_CONFIG") or "{}")
    if config.get("task", {}).get("type") != "worker":
        print("TF_CONFIG names no worker task: run this with 'picluster launch --mode each-worker'", file=sys.stderr)
        return 2
    cluster, index = config["cluster"], int(config["task"]["index"])
    chief = index == 0
    tf.compat.v1.disable_eager_execution()

    # The same true weights everywhere; each worker draws its own examples.
    true_w = np.random.default_rng(args.seed).normal(size=(FEATURES, 1)).astype(np.float32)
    rng = np.random.default_rng([args.seed, index])
    x_data = rng.normal(size=(8192, FEATURES)).astype(np.float32)
    y_data = x_data @ true_w + 0.5 + 0.01 * rng.normal(size=(8192, 1)).astype(np.float32)

    setter = tf.compat.v1.train.replica_device_setter(worker_device=f"/job:worker/task:{index}",
                                                      cluster=tf.train.ClusterSpec(cluster))
    # One variable container per job: a later job on the same servers starts from fresh variables.
    with tf.compat.v1.device(setter), tf.compat.v1.container(f"job-{os.environ.get('PICLUSTER_JOB_ID', 'manual')}"):
        global_step = tf.compat.v1.train.get_or_create_global_step()
        w = tf.compat.v1.get_variable("w", [FEATURES, 1], initializer=tf.compat.v1.zeros_initializer())
        b = tf.compat.v1.get_variable("b", [], initializer=tf.compat.v1.zeros_initializer())
        x = tf.compat.v1.placeholder(tf.float32, [None, FEATURES])
        y = tf.compat.v1.placeholder(tf.float32, [None, 1])
        loss = tf.reduce_mean(tf.square(tf.matmul(x, w) + b - y))
        train = tf.compat.v1.train.GradientDescentOptimizer(args.lr).minimize(loss, global_step=global_step)
        uninitialised = tf.compat.v1.report_uninitialized_variables()

    target = f"grpc://{cluster['worker'][index]}"  # this worker's server, started by 'picluster cluster up'
    session_config = tf.compat.v1.ConfigProto(device_filters=["/job:ps", f"/job:worker/task:{index}"])
    started = time.perf_counter()
    with tf.compat.v1.Session(target, config=session_config) as probe:
        fresh = len(probe.run(uninitialised)) > 0
        while not chief and len(probe.run(uninitialised)):
            time.sleep(0.2)  # MonitoredTrainingSession would re-check only every 30 s
    # A restarted chief must not reset what the others trained: initialise only a fresh job.
    scaffold = tf.compat.v1.train.Scaffold(init_op=None if fresh or not chief else tf.no_op())
    hooks = [tf.compat.v1.train.StopAtStepHook(last_step=args.steps)]
    mine, value = 0, float("nan")
    with tf.compat.v1.train.MonitoredTrainingSession(
        master=target, is_chief=chief, scaffold=scaffold, hooks=hooks, config=session_config,
        save_checkpoint_secs=None, save_summaries_steps=None, save_summaries_secs=None,
        log_step_count_steps=None, stop_grace_period_secs=2,
    ) as session:
        while not session.should_stop():
            pick = rng.integers(0, len(x_data), args.batch)
            _, value, step = session.run([train, loss, global_step], {x: x_data[pick], y: y_data[pick]})
            mine += 1
            if mine == 1 or mine % args.log_every == 0:
                print(f"worker {index}: step {mine} (global {step}) loss {value:.6f}", flush=True)
    print(f"worker {index}: {mine} steps of {args.steps} in {time.perf_counter() - started:.1f} s, last loss {value:.6f}")
    print(f"done: global step {args.steps} reached")
    return 0


if __name__ == "__main__":
    sys.exit(main())
