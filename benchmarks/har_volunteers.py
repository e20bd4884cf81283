"""Where HAR's test errors are: accuracy per test volunteer, and how the LAYING windows lie.

Run: .venv/bin/python benchmarks/har_volunteers.py [RUN_DIR ...]

For each run directory: the selected model's test accuracy per volunteer and its most frequent
confusions (from the run's best/ checkpoint, so runs made before result.json carried
``test_accuracy_by_volunteer`` work too).  Then, from the prepared data set alone: per split,
the LAYING windows whose mean gravity points along -y (lying on the other side), by volunteer.
A look at the data, not a test: nothing asserts.
"""

import os
import sys
from collections import Counter
from pathlib import Path

import numpy as np

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from picluster.data.har.spec import CLASSES  # noqa: E402

LAYING = CLASSES.index("LAYING")
TOTAL_ACC_Y = 7  # channel order: body_acc xyz, body_gyro xyz, total_acc xyz


def per_volunteer(run: Path) -> None:
    import tensorflow as tf

    from picluster.jobs.har.config import TrainConfig
    from picluster.jobs.har.data import load_data
    from picluster.jobs.har.graph import Graph

    tf.compat.v1.disable_eager_execution()
    cfg = TrainConfig.load(run / "config.json")
    data = load_data(cfg)
    g = Graph(cfg, data)
    with g.graph.as_default(), tf.compat.v1.Session() as session:
        g.best_saver.restore(session, tf.train.latest_checkpoint(str(run / "best")))
        x, y, who = data.x_test, data.y_test, data.subject_test
        pred = np.concatenate([session.run(g.pred, {g.x: x[i:i + 1000]}) for i in range(0, len(x), 1000)])
    print(f"{run}: test accuracy {np.mean(pred == y):.1%}")
    for v in np.unique(who):
        mine = who == v
        wrong = Counter((CLASSES[a], CLASSES[b]) for a, b in zip(y[mine], pred[mine]) if a != b)
        top = ", ".join(f"{n} {a}->{b}" for (a, b), n in wrong.most_common(3))
        print(f"  volunteer {v:2d}: {np.mean(pred[mine] == y[mine]):6.1%} of {mine.sum()}  {top}")


def laying_orientation() -> None:
    from picluster.data.har import load_har

    data = load_har()
    for split in ("train", "val", "test"):
        x, y, who = (getattr(data, f"{k}_{split}") for k in ("x", "y", "subject"))
        laying = y == LAYING
        gravity_y = x[laying][:, :, TOTAL_ACC_Y].mean(axis=1)
        other_side = Counter(who[laying][gravity_y < -0.5].tolist())
        print(f"{split}: {laying.sum()} LAYING windows, {sum(other_side.values())} with gravity along -y"
              + (f" (volunteers {dict(sorted(other_side.items()))})" if other_side else ""))


if __name__ == "__main__":
    for arg in sys.argv[1:]:
        per_volunteer(Path(arg))
    laying_orientation()
