"""TensorFlow 2 parameter-server training with a custom loop: the coordinator side.

Run it on the cluster with

    picluster launch examples/ps_coordinator.py --steps 400

picluster writes TF_CONFIG (the cluster's ps and worker tasks, and this process as the chief)
and runs this script on the coordinator machine; the ps and worker servers that
`picluster cluster up` started do the work.  The model is a small synthetic linear regression
(16 features, known weights), so convergence is easy to check: the loss falls towards the noise
floor and the learned weights approach the true ones.

ClusterCoordinator schedules each step on a free worker and, if a worker dies, runs it again on
another; the worker rejoins when its server is back (`picluster launch --restart-limit N`
restarts it).  A parameter server that dies ends the job: its variables are gone.
"""

import argparse
import sys
import time

import tensorflow as tf

FEATURES = 16


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=400)
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--lr", type=float, default=0.05)
    parser.add_argument("--log-every", type=int, default=100)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()

    started = time.perf_counter()
    resolver = tf.distribute.cluster_resolver.TFConfigClusterResolver()  # reads TF_CONFIG
    strategy = tf.distribute.experimental.ParameterServerStrategy(resolver)
    coordinator = tf.distribute.experimental.coordinator.ClusterCoordinator(strategy)
    workers = len(resolver.cluster_spec().as_dict()["worker"])
    print(f"connected to {workers} worker(s) in {time.perf_counter() - started:.1f} s", flush=True)

    true_w = tf.random.stateless_normal([FEATURES, 1], seed=[args.seed, 0])
    true_b = 0.5
    with strategy.scope():  # variables live on the ps tasks
        w = tf.Variable(tf.zeros([FEATURES, 1]), name="w")
        b = tf.Variable(0.0, name="b")

    def dataset_fn():  # built on each worker: its own endless stream of examples
        x = tf.random.stateless_normal([8192, FEATURES], seed=[args.seed, 1])
        noise = 0.01 * tf.random.stateless_normal([8192, 1], seed=[args.seed, 2])
        y = tf.matmul(x, true_w) + true_b + noise
        return tf.data.Dataset.from_tensor_slices((x, y)).shuffle(8192, seed=args.seed).repeat().batch(args.batch)

    iterator = iter(coordinator.create_per_worker_dataset(dataset_fn))

    @tf.function
    def train_step(iterator):
        def replica_fn(batch):
            x, y = batch
            with tf.GradientTape() as tape:
                loss = tf.reduce_mean(tf.square(tf.matmul(x, w) + b - y))
            grad_w, grad_b = tape.gradient(loss, [w, b])
            w.assign_sub(args.lr * grad_w)
            b.assign_sub(args.lr * grad_b)
            return loss

        return strategy.run(replica_fn, args=(next(iterator),))

    for step in range(1, args.steps + 1):
        loss = coordinator.schedule(train_step, args=(iterator,))
        if step == 1 or step % args.log_every == 0:
            print(f"step {step}/{args.steps} loss {float(loss.fetch()):.6f}", flush=True)
    coordinator.join()
    error = float(tf.reduce_max(tf.abs(w.read_value() - true_w)))
    print(f"done: {args.steps} steps in {time.perf_counter() - started:.1f} s, max |w - w*| {error:.4f}, b {float(b.numpy()):.4f}")
    return 0 if error < 0.05 else 3


if __name__ == "__main__":
    sys.exit(main())
