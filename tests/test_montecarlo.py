import math
from types import SimpleNamespace

import pytest

from picluster.jobs.montecarlo.estimate import Estimate, split_samples
from picluster.util.errors import UsageError


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


@pytest.mark.e2e
def test_montecarlo_on_real_cluster(state, monkeypatch):
    from picluster.cluster.local import LocalCluster
    from picluster.jobs.montecarlo.estimate import MonteCarlo

    cluster = LocalCluster.start(ps=1, workers=2, temporary=True)
    try:
        with MonteCarlo(cluster.layout, 2) as job:
            a = job.estimate(3_000_001, seed=11)
            seen = []
            with monkeypatch.context() as patch:
                patch.setattr("picluster.jobs.montecarlo.estimate.CHUNKS_PER_ROUND", 1)
                a_rounds = job.estimate(3_000_001, seed=11, progress=lambda done, total: seen.append(done))
            b = job.estimate(3_000_001, seed=11)
            c = job.estimate(3_000_001, seed=12)
        with MonteCarlo(cluster.layout, 1) as single:
            d = single.estimate(3_000_001, seed=11)
        with pytest.raises(UsageError, match="more than the 2 nodes with a TensorFlow server"):  # the ps is on the workers' node
            MonteCarlo(cluster.layout, 3)
    finally:
        cluster.stop()
    assert a.hits == b.hits
    # Cut into rounds of one chunk, the run draws the same points and reports progress.
    assert a_rounds.hits == a.hits
    assert len(seen) > 1 and seen == sorted(seen) and seen[-1] == 3_000_001
    assert a.hits != c.hits
    assert abs(a.pi - math.pi) < 5 * a.std_error
    assert abs(c.pi - math.pi) < 5 * c.std_error
    assert abs(d.pi - math.pi) < 5 * d.std_error
    # Chunks of every task use disjoint RNG streams, so one node draws other points than two.
    assert d.hits != a.hits


def test_rounds_keep_chunk_indices_and_cover_every_sample():
    from picluster.jobs.montecarlo.estimate import rounds

    counts = [1000, 997, 0]
    plan = rounds(counts, chunk=10, chunks_per_round=7)
    assert [sum(c[i] for _, c in plan) for i in range(3)] == counts
    assert all(first == [r * 7] * 3 for r, (first, _) in enumerate(plan))
    assert len(plan) == 15 and plan[-1][1] == [20, 17, 0]
    assert rounds([5], chunk=10, chunks_per_round=7) == [([0], [5])]


class _Drawn:
    """MonteCarlo without servers: every estimate hits pi/4 of its samples."""

    def __init__(self, layout, workers):
        self.workers = workers

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False

    def estimate(self, samples, seed, progress=None):
        return Estimate(samples=samples, nodes=self.workers, hits=round(samples * math.pi / 4), seed=seed, compute_s=0.5)


def _every_kind_of_cluster(tmp_path):
    """One of each kind `attach` can give a job, and how `run montecarlo` names it."""
    from picluster.cluster.allocation import Allocation, layout_of
    from picluster.cluster.inprocess import InProcessCluster
    from picluster.cluster.local import LocalCluster
    from picluster.cluster.nodecluster import NodeCluster
    from picluster.model.inventory import parse_inventory

    layout = layout_of(["node01", "node02"], {"node01": "127.0.0.11", "node02": "127.0.0.12"}, 1, 2224)
    inv = parse_inventory({"cluster": {"name": "pis", "user": "pi", "nodes": "node[01-02]", "addresses": "127.0.0.[11-12]"}})
    return [
        (Allocation("7", layout), "Slurm job 7's allocation"),
        (NodeCluster(inv), "inventory cluster"),
        (LocalCluster(tmp_path, layout, {}, temporary=False), "local cluster"),
        (LocalCluster(tmp_path, layout, {}, temporary=True), "temporary local cluster"),
        (InProcessCluster(tmp_path, layout, {}, temporary=True), "temporary local cluster"),
    ]


def test_run_montecarlo_names_every_kind_of_cluster_in_its_report(tmp_path, monkeypatch, capsys):
    """The human report, not only --json, for each cluster a job can run on (a Slurm job's too)."""
    import picluster.cluster.attach  # brings in every kind it can return; its place() the stub uses
    from picluster.cli.run import run
    from picluster.cluster.base import Cluster

    def concrete(cls):
        for sub in cls.__subclasses__():
            if sub.__module__.startswith("picluster.") and not getattr(sub, "__abstractmethods__", None):
                yield sub
            yield from concrete(sub)

    clusters = _every_kind_of_cluster(tmp_path)
    assert set(concrete(Cluster)) == {type(c) for c, _ in clusters}  # a new kind is added above
    monkeypatch.chdir(tmp_path)  # no ./picluster.toml
    monkeypatch.delenv("PICLUSTER_INVENTORY", raising=False)
    monkeypatch.setattr("picluster.jobs.montecarlo.job.MonteCarlo", _Drawn)
    for cluster, named in clusters:
        def placed_then_body(job, inventory, live, on=cluster):
            job.placed(picluster.cluster.attach.place(None))  # as the controller does first
            return job.body(on, SimpleNamespace(progress=lambda *a: None))

        monkeypatch.setattr("picluster.jobs.controller.run", placed_then_body)
        run.main(["montecarlo", "--samples", "1e7", "--nodes", "1", "--seed", "7"], prog_name="picluster run", standalone_mode=False)
        shown = capsys.readouterr().out
        assert shown.startswith(f"Monte-Carlo pi on 1 node(s) ({named}): 10,000,000 samples, seed 7\n"), shown
        assert "  estimate        3.14159" in shown
