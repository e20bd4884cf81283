"""The synchronous update: every worker's gradient, averaged per ps task, applied once.

On a cluster (``sync_step``) the gradients travel through one-slot queues on the ps tasks; in the
statistics emulator (``emulated_step``) every worker's tower is in one graph and the same sums are
made there, op for op, so its numbers are the cluster's.
"""

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import tensorflow as tf

from picluster.jobs.har import fusion

if TYPE_CHECKING:
    from picluster.jobs.har.exchange.kind import Place


def emulated_step(every, variables, groups, fused: bool, apply, wire=tf.float32):
    """The update a sync cluster makes (``sync_step``), from every worker's gradients ``every``
    made in this graph: per ps group, each worker's share (one flat tensor when ``fused``, through
    ``wire``'s type) summed in worker order and divided by the workers, the sum of the means'
    squares per group, then ``apply`` (the same op for op, so the numbers are the cluster's)."""
    means, squares = [None] * len(variables), []
    for members in groups:
        sent = [[fusion.from_wire(fusion.to_wire(fusion.flatten([grads[i] for i in members], None), wire, None))] if fused
                else [grads[i] for i in members] for grads in every]
        mean = [tf.add_n(list(gs)) / float(len(every)) for gs in zip(*sent)]
        squares.append(tf.add_n([tf.reduce_sum(tf.square(g)) for g in mean]))
        if fused:
            mean = fusion.split(mean[0], [variables[i].shape for i in members])
        for i, g in zip(members, mean):
            means[i] = g
    return apply(means, squares)


@dataclass(frozen=True)
class Carried:
    """How a sync step's gradients travel: fused (``fused_on``: this worker's device; fusion.py),
    in ``wire``'s type, through queues named with ``tag`` (one set of queues per kind of sync)."""

    fused_on: str | None = None
    tag: str = ""
    wire: Any = tf.float32


def sync_step(grads, variables, global_step, place: "Place", apply, carried: Carried = Carried()):
    """One synchronous step: every worker's gradient, averaged, applied once by the chief (``place``:
    this worker's rank among the launch's workers, and the launch).

    Per ps task, each worker puts the gradients of that ps's variables in its own one-slot queue
    there and then waits for a token; the chief takes one gradient from every queue, each ps
    averages its own share (the work is spread as the bytes are), the chief applies the means
    (``apply(means, squares)``: the means in the order of ``variables`` and each ps's sum of their
    squares, for a global norm; Adam's clipped apply, or post-local SGD's average of the models)
    and hands each worker a token.  Each worker also leaves (its task, the time) in one queue on
    ps 0 once its gradients are all there, stamped by ps 0's clock so that the workers' clocks
    never need to agree; the chief takes them with the gradients (the ``arrivals`` it returns),
    and the last one each step is the worker the others waited for.  Unlike
    SyncReplicasOptimizer, which accepts any ``replicas_to_aggregate`` gradients (a fast worker
    may supply two), every step holds exactly one gradient per worker.  Queue names carry the
    launch id (and ``tag``, one set of queues per kind of sync), so a persistent cluster's
    leftovers from an earlier launch are never read.  Fused (``fused_on``: this worker's device;
    fusion.py) each worker's share for a ps is one flat tensor (of ``wire``'s type: the ps casts
    a 16-bit one back), and the ps averages it flat before cutting it into the variables' gradients.
    """
    task, workers, launch = place.rank, place.workers, place.launch
    fused_on, tag, wire = carried.fused_on, carried.tag, carried.wire
    pushes, means = [], [None] * len(variables)
    squares = []
    for s, (device, members) in enumerate(fusion.by_ps(variables)):
        sent = [fusion.to_wire(fusion.flatten([grads[i] for i in members], fused_on), wire, fused_on)] if fused_on else [grads[i] for i in members]
        with tf.compat.v1.device(device):
            queues = [tf.queue.FIFOQueue(1, [g.dtype for g in sent], shapes=[g.shape for g in sent],
                                         shared_name=f"{tag}grads_{s}_{w}_{launch}", name=f"{tag}grads_{s}_{w}")
                      for w in range(workers)]
        pushes.append(queues[task].enqueue(sent))
        if task == 0:
            with tf.control_dependencies(pushes[-1:]), tf.compat.v1.device(device):
                taken = [q.dequeue() for q in queues]
                taken = [[fusion.from_wire(g) for g in t] if isinstance(t, list | tuple) else [fusion.from_wire(t)] for t in taken]
                mean = [tf.add_n(list(gs)) / float(workers) for gs in zip(*taken)]
                squares.append(tf.add_n([tf.reduce_sum(tf.square(g)) for g in mean]))
                if fused_on:
                    mean = fusion.split(mean[0], [variables[i].shape for i in members])
            for i, g in zip(members, mean):
                means[i] = g
    with tf.compat.v1.device("/job:ps/task:0"):
        tokens = [tf.queue.FIFOQueue(1, [tf.int64], shapes=[[]], shared_name=f"{tag}token_{w}_{launch}", name=f"{tag}token_{w}")
                  for w in range(workers)]
        arrivals = tf.queue.FIFOQueue(workers, [tf.int32, tf.float64], shapes=[[], []], shared_name=f"{tag}arrivals_{launch}",
                                      name=f"{tag}arrivals")
        with tf.control_dependencies(pushes):
            arrived = arrivals.enqueue([tf.constant(task, tf.int32), tf.timestamp()])
    if task != 0:
        with tf.control_dependencies([*pushes, arrived]):
            return tokens[task].dequeue(), None
    with tf.control_dependencies([arrived]), tf.compat.v1.device("/job:ps/task:0"):
        stamps = arrivals.dequeue_many(workers)
    applied = apply(means, squares)
    with tf.control_dependencies([applied, *stamps]):
        step = global_step.read_value()
        return tf.group(*[tokens[w].enqueue([step]) for w in range(1, workers)]), stamps
