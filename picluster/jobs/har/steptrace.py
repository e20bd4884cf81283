"""Where a worker's step went: its own ops against the exchange, read from one traced step.

An exchange probe (pull every weight, push a same-sized update, between epochs) held every sync
worker up while it ran.  Instead, one step amid each epoch's runs with TensorFlow's full trace,
whose step stats time every op of the partitions the step ran: the time this worker's own device
was busy with ops of its own (the union of their intervals, so parallel ops count once) is its
compute, for every step of the epoch; the rest of the steps' wall time is the exchange
(receiving the weights, sending the gradients, and in sync mode waiting for the others and the
update).  Not the traced step's own wall time less its compute: gathering the trace from every
task lengthens that step, and with small steps (25 windows a worker) its excess alone exceeded
the epoch's exchange and left no compute.
"""

import tensorflow as tf

# Ops that wait on another task rather than compute here: their time is the exchange's.
WAITING = ("RecvTensor", "_Recv", "_HostRecv", "QueueDequeue", "QueueEnqueue", "Send", "_HostSend", "CollectiveReduce",
           "CollectiveBcast")

OPTIONS = tf.compat.v1.RunOptions(trace_level=tf.compat.v1.RunOptions.FULL_TRACE)


def busy_seconds(metadata, task: int) -> float:
    """Seconds ``/job:worker/task:<task>``'s device ran ops of its own in the traced step."""
    spans = []
    for dev in metadata.step_stats.dev_stats:
        if f"/job:worker/replica:0/task:{task}/" not in dev.device or "stream" in dev.device:
            continue
        for node in dev.node_stats:
            label = node.timeline_label or node.node_name
            if any(w in label for w in WAITING) or node.node_name.startswith(WAITING):
                continue
            spans.append((node.all_start_micros, node.all_start_micros + node.all_end_rel_micros))
    busy, end = 0, None
    for start, stop in sorted(spans):
        if end is None or start > end:
            busy += stop - start
            end = stop
        elif stop > end:
            busy += stop - end
            end = stop
    return busy / 1e6


def split(step_seconds: float, steps: int, busy: float | None) -> tuple[float, float]:
    """(compute, exchange) of an epoch's ``step_seconds`` over ``steps`` steps, from the traced
    step's own ops (``busy``; None when none was traced: all of it compute)."""
    if busy is None:
        return step_seconds, 0.0
    compute = min(step_seconds, steps * busy)
    return compute, step_seconds - compute
