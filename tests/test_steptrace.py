"""An epoch's steps split into compute and exchange from one traced step (jobs/har/steptrace.py)."""

import pytest
import tensorflow as tf

from picluster.jobs.har import steptrace


def _metadata(task: int, spans: list[tuple[str, int, int]]) -> tf.compat.v1.RunMetadata:
    meta = tf.compat.v1.RunMetadata()
    mine = meta.step_stats.dev_stats.add(device=f"/job:worker/replica:0/task:{task}/device:CPU:0")
    other = meta.step_stats.dev_stats.add(device="/job:ps/replica:0/task:0/device:CPU:0")
    for name, start, length in spans:
        mine.node_stats.add(node_name=name, timeline_label=name, all_start_micros=start, all_end_rel_micros=length)
    other.node_stats.add(node_name="apply", all_start_micros=0, all_end_rel_micros=10**6)  # the ps's: not this worker's
    return meta


def test_busy_counts_this_workers_own_ops_once_and_not_its_waits():
    meta = _metadata(3, [("conv", 0, 100_000), ("lstm", 50_000, 100_000),  # overlapping: 150 ms together
                         ("_Recv weights", 150_000, 400_000), ("dense", 600_000, 50_000)])
    assert steptrace.busy_seconds(meta, 3) == pytest.approx(0.2)
    assert steptrace.busy_seconds(meta, 4) == 0.0


def test_the_traced_steps_compute_counts_for_every_step_and_the_rest_is_exchange():
    assert steptrace.split(3.6, 14, 0.05) == pytest.approx((0.7, 2.9))
    # A traced step longer than the others (its trace gathered from every task) changes nothing:
    # only its own ops are read.  Compute never exceeds the steps' time.
    assert steptrace.split(1.0, 14, 0.1) == (1.0, 0.0)
    assert steptrace.split(2.0, 5, None) == (2.0, 0.0)  # nothing traced (one process alone): all compute
