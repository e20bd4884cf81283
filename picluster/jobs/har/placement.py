"""Where a cluster's variables live: each on the ps task holding the fewest bytes so far.

Several ps tasks share the variables by bytes, not by count (``GreedyLoadBalancingStrategy``:
round robin put every weight matrix on one ps and every bias on another).  The emulator
(emulate mode of graph.py) has no ps, and asks here which variables a cluster would group on each.
"""

import tensorflow as tf

from picluster.util.errors import UsageError


class ByteBalancer:
    """replica_device_setter's ps_strategy: each variable to the ps task holding the fewest bytes so
    far (the greedy rule of TF 1's GreedyLoadBalancingStrategy, which TF 2 no longer exports).
    Every worker builds the same graph in the same order, so all agree on the placement."""

    def __init__(self, tasks: int) -> None:
        self.load = [0] * tasks

    def __call__(self, op) -> int:
        shape = tf.TensorShape(op.get_attr("shape"))
        size = shape.num_elements() if shape.is_fully_defined() else 1
        return self.place(max(1, size) * tf.as_dtype(op.get_attr("dtype")).size)

    def place(self, size: int) -> int:
        """The task for a variable of ``size`` bytes."""
        task = min(range(len(self.load)), key=lambda t: (self.load[t], t))
        self.load[task] += size
        return task


def ps_groups(tasks: int) -> list[list[int]]:
    """The indexes of the trainable variables on each ps task, in by_ps's order of devices, as a
    cluster's workers place them (replica_device_setter with ByteBalancer, every variable in the
    order made: the cluster's graph also has the chief's one-byte readiness flag after the barrier's
    counter, which the emulator's has not)."""
    balancer, trainable = ByteBalancer(tasks), {v.ref() for v in tf.compat.v1.trainable_variables()}
    groups: dict[str, list[int]] = {}
    index = 0
    for v in tf.compat.v1.global_variables():
        task = balancer(v.op)
        if v.op.name == "workers_joined":
            balancer.place(1)  # chief_ready, a bool
        if v.ref() in trainable:
            groups.setdefault(f"/job:ps/task:{task}", []).append(index)
            index += 1
    return [members for _, members in sorted(groups.items())]


def check_shards(tasks: int, variables) -> None:
    """Every ps task must hold a share: an empty one would be started, waited for and never used."""
    used = {v.device for v in variables}
    empty = [t for t in range(tasks) if f"/job:ps/task:{t}" not in used]
    if empty:
        raise UsageError(f"--ps {tasks} leaves ps task {empty[0]} without variables (this model has {len(used)} "
                         f"to place); use --ps {len(used)} or fewer")
