import math

import pytest

from picluster.errors import UsageError
from picluster.montecarlo import Estimate, split_samples


def test_split_follows_the_thesis():
    assert split_samples(10, 3) == [4, 3, 3]
    assert split_samples(100_000_000, 8) == [12_500_000] * 8
    assert sum(split_samples(10**18 + 7, 16)) == 10**18 + 7
    with pytest.raises(UsageError):
        split_samples(10, 0)


def test_estimate_statistics():
    e = Estimate(samples=1_000_000, nodes=2, hits=785_398, seed=1, compute_s=0.5)
    assert e.pi == pytest.approx(3.141592)
    p = 0.785398
    assert e.std_error == pytest.approx(4 * math.sqrt(p * (1 - p) / 1_000_000))
    assert e.samples_per_s == pytest.approx(2_000_000)


@pytest.mark.slow
def test_montecarlo_on_real_cluster(state):
    from picluster.local import LocalCluster
    from picluster.montecarlo import MonteCarlo

    cluster = LocalCluster.start(ps=1, workers=2, temporary=True)
    try:
        with MonteCarlo(cluster.layout, 2) as job:
            a = job.estimate(3_000_001, seed=11)
            b = job.estimate(3_000_001, seed=11)
            c = job.estimate(3_000_001, seed=12)
        with MonteCarlo(cluster.layout, 1) as single:
            d = single.estimate(3_000_001, seed=11)
        with pytest.raises(UsageError, match="more than the 2 workers"):
            MonteCarlo(cluster.layout, 3)
    finally:
        cluster.stop()
    assert a.hits == b.hits
    assert a.hits != c.hits
    assert abs(a.pi - math.pi) < 5 * a.std_error
    assert abs(c.pi - math.pi) < 5 * c.std_error
    assert abs(d.pi - math.pi) < 5 * d.std_error
    # Chunks of every task use disjoint RNG streams, so one node draws other points than two.
    assert d.hits != a.hits
