"""Which worker a sync step waited for: from the times each worker's gradients reached ps 0.

Every step but an epoch's first (which the others begin while the chief evaluates) the chief
gets (task, time) for each worker, stamped by ps 0's clock (graph.py).  The last to arrive held
the step; how long the typical worker waited for it is the last time less the median.  Over an
epoch one worker is named the straggler only when it was last in most steps and the wait it
caused is a real part of a step: on equal nodes the last place moves around, and nothing is
named.
"""

from dataclasses import dataclass, field

import numpy as np


# Last in more than this share of the epoch's steps: half of them, and with few workers more
# (of 2 equal workers each is last half the time, so a short epoch would name one by chance).
def most_steps(workers: int) -> float:
    return max(0.5, min(0.8, 1.6 / workers))


SHARE_OF_STEP = 0.1  # and the others waited at least this share of a step for it, on average
MIN_WAIT_S = 0.005  # and at least this long: below it, timer noise
MIN_STEPS = 4  # fewer timed steps in an epoch (16 workers make 3) say nothing either way


@dataclass
class Arrivals:
    workers: int
    last: np.ndarray = field(init=False)  # per task: steps in which it arrived last
    waited: np.ndarray = field(init=False)  # per task: seconds the median worker waited for it, summed
    steps: int = 0

    def __post_init__(self) -> None:
        self.last = np.zeros(self.workers, np.int64)
        self.waited = np.zeros(self.workers)

    def add(self, tasks, times) -> None:
        """One step's arrivals (the chief's fetch of ``Graph.arrivals``)."""
        tasks, times = np.asarray(tasks), np.asarray(times, np.float64)
        slowest = int(np.argmax(times))
        self.last[tasks[slowest]] += 1
        self.waited[tasks[slowest]] += float(times[slowest] - np.median(times))
        self.steps += 1

    def straggler(self, step_s: float) -> tuple[int, float] | None:
        """(task, seconds a step the others waited for it) when one worker held most steps back
        by a real share of a step; None otherwise."""
        if self.steps < MIN_STEPS or self.workers < 2:
            return None
        task = int(np.argmax(self.last))
        per_step = float(self.waited[task]) / self.steps
        if self.last[task] <= most_steps(self.workers) * self.steps or per_step < max(MIN_WAIT_S, SHARE_OF_STEP * step_s):
            return None
        return task, per_step
