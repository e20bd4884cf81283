"""The sync step's straggler: named from when each worker's gradients reached ps 0."""

import numpy as np

from picluster.jobs.har.progress import epoch_line
from picluster.jobs.har.straggler import Arrivals


def test_the_worker_the_others_wait_for_is_named_and_equal_workers_are_not():
    rng = np.random.default_rng(0)
    even, late = Arrivals(8), Arrivals(8)
    for step in range(7):  # an 8-worker HAR epoch is 7 updates
        t = step + 0.3 + rng.uniform(0, 0.02, 8)  # a 0.3 s step, arrivals 20 ms apart at most
        even.add(np.arange(8), t)
        t[5] += 0.12  # worker 5 runs slower: everyone waits 120 ms more for it
        late.add(np.roll(np.arange(8), 3), np.roll(t, 3))  # the queue's order is not the task order
    assert even.straggler(step_s=0.3) is None
    task, waited = late.straggler(step_s=0.42)
    assert task == 5 and 0.10 < waited < 0.14  # 120 ms, less the median's own lateness (< 20 ms)


def test_a_worker_last_now_and_then_or_by_a_hair_is_not_named():
    now_and_then = Arrivals(4)
    for step in range(10):
        t = np.full(4, 1.0)
        t[step % 2] += 0.1  # workers 0 and 1 take turns: each last in half the steps
        now_and_then.add(np.arange(4), t)
    assert now_and_then.straggler(step_s=0.3) is None
    by_a_hair = Arrivals(4)
    for _ in range(10):
        by_a_hair.add(np.arange(4), [1.0, 1.0, 1.0, 1.002])  # 2 ms: timer noise
    assert by_a_hair.straggler(step_s=0.3) is None
    pair = Arrivals(2)
    for step in range(6):  # of 2 equal workers one is last 4 times in 6 by chance often enough
        pair.add([0, 1], [1.0, 1.2] if step < 4 else [1.2, 1.0])
    assert pair.straggler(step_s=0.5) is None
    assert Arrivals(1).straggler(1.0) is None and Arrivals(3).straggler(1.0) is None  # no steps yet
    few = Arrivals(16)
    for _ in range(3):  # a 16-worker epoch's 2 timed steps, and one more: too few to name anyone
        few.add(range(16), [1.0] * 15 + [2.0])
    assert few.straggler(step_s=1.5) is None
    few.add(range(16), [1.0] * 15 + [2.0])
    assert few.straggler(step_s=1.5) == (15, 1.0)


def test_the_epoch_line_names_the_straggler():
    row = {"epoch": "3", "train_loss": "0.5", "train_acc": "0.8", "val_loss": "0.6", "val_acc": "0.7", "val_f1": "0.7",
           "epoch_s": "2.0", "input_s": "0.1", "compute_s": "1.5", "exchange_s": "0.4", "straggler": "5",
           "straggler_ms": "123.4"}
    lines = [epoch_line(row), epoch_line(row | {"straggler": "", "straggler_ms": ""})]
    assert lines[0].endswith("  straggler worker:5 (+123 ms a step)") and "straggler" not in lines[1]
