"""The all-reduce exchange (jobs/har/exchange/allreduce.py, group.py): the workers sum the gradient
themselves over TCP, every one of them gets the same bytes, and a cluster trains what its
emulation trains."""

import json
import socket
import threading
import time
import types

import numpy as np
import pytest

from picluster.jobs.har.exchange.group import Group, partners, tree_sum
from picluster.jobs.har.metrics import read_rows
from picluster.util.errors import ClusterError

from conftest import picluster, picluster_popen
from train_fixtures import TINY_CONV, client_process


def _groups(n: int, launch: str = "L") -> tuple[list[Group], list[str]]:
    groups = [Group(r, n, launch) for r in range(n)]
    return groups, [g.listen("127.0.0.1") for g in groups]


def _together(groups: list[Group], work) -> list:
    """``work(rank)`` on every rank at once (each in a thread, as each in its own process); the results."""
    out: list = [None] * len(groups)
    errors: list[BaseException] = []

    def run(rank: int) -> None:
        try:
            out[rank] = work(rank)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(r,)) for r in range(len(groups))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    if errors:
        raise errors[0]
    return out


@pytest.mark.parametrize("n", [1, 2, 3, 4, 5, 6, 7, 8, 9, 16])
@pytest.mark.parametrize("length", [1, 7, 1001])
def test_every_rank_gets_the_same_mean_summed_in_the_trees_order(n, length):
    rng = np.random.default_rng(n * 1000 + length)
    xs = [(rng.normal(size=length) * 10.0 ** rng.integers(-3, 3)).astype(np.float32) for _ in range(n)]
    groups, table = _groups(n)
    try:
        got = _together(groups, lambda r: (groups[r].join(table), groups[r].mean(xs[r]))[1])
    finally:
        for g in groups:
            g.close()
    want = tree_sum(xs, lambda a, b: a + b) / np.float32(n)  # the order the emulator follows
    for mean in got:
        assert mean.dtype == np.float32 and mean.tobytes() == want.tobytes()
    assert abs(float(np.mean(want)) - float(np.mean(np.mean(xs, axis=0)))) < 1e-3 * (1 + float(np.abs(want).max()))


def test_the_tree_folds_the_ranks_past_a_power_of_two_then_adds_neighbours_level_by_level():
    add = lambda a, b: f"({a}+{b})"
    assert tree_sum(list("abcde"), add) == "(((a+e)+b)+(c+d))"
    assert tree_sum(list("abcd"), add) == "((a+b)+(c+d))"
    assert tree_sum(["a"], add) == "a"
    assert partners(0, 5) == [1, 2, 4] and partners(4, 5) == [0] and partners(3, 5) == [2, 1]


def test_the_broadcast_gives_every_rank_rank_zeros_values_exactly():
    groups, table = _groups(5)
    sent = np.array([1e300, -0.0, 3.0, 2.0 ** 52 + 1, np.pi])
    try:
        got = _together(groups, lambda r: (groups[r].join(table), groups[r].broadcast(sent if r == 0 else None, 5))[1])
    finally:
        for g in groups:
            g.close()
    for values in got:
        assert values[[0, 2, 3, 4]].tobytes() == sent[[0, 2, 3, 4]].tobytes() and values[1] == 0.0


def test_a_stranger_or_another_launch_is_turned_away_and_the_partner_still_joins():
    groups, table = _groups(2, "this")
    host, port = table[1].rsplit(":", 1)
    strangers = [socket.create_connection((host, int(port))) for _ in range(2)]
    strangers[0].sendall(b"GET / HTTP/1.0\r\n\r\n")  # not ours at all
    strangers[1].sendall(Group(0, 2, "other")._hello(0))  # rank 0 of another launch
    try:
        got = _together(groups, lambda r: (groups[r].join(table, timeout=20), groups[r].mean(np.full(3, r, np.float32)))[1])
        assert all(m.tolist() == [0.5, 0.5, 0.5] for m in got)
        for s in strangers:  # each was closed by the listener, not kept as a partner
            s.settimeout(5)
            try:
                assert s.recv(1) == b""
            except ConnectionResetError:  # closed with the stranger's bytes unread
                pass
    finally:
        for g in groups:
            g.close()
        for s in strangers:
            s.close()


def test_a_lost_partner_holds_the_step_until_the_launch_is_closed():
    """As a step blocked on the ps would: the coordinator counts the lost worker alone, then stops
    the others (close); no rank returns a sum without its partner's part."""
    groups, table = _groups(2)
    _together(groups, lambda r: groups[r].join(table))
    groups[1].close()  # its worker is gone
    started = time.monotonic()
    closer = threading.Timer(1.5, groups[0].close)
    closer.start()
    with pytest.raises(ClusterError, match="closed"):
        groups[0].mean(np.ones(100_000, np.float32))
    assert time.monotonic() - started >= 1.4


def test_an_allreduce_replica_places_nothing_on_a_ps_and_sends_one_flat_vector():
    import tensorflow as tf

    from picluster.jobs.har.config import TrainConfig
    from picluster.jobs.har.graph import Graph

    tf.compat.v1.disable_eager_execution()
    cluster = {"ps": ["127.0.0.1:1"], "worker": ["127.0.0.1:2", "127.0.0.1:3"]}
    data = types.SimpleNamespace(x_train=np.zeros((1600, 128, 9), np.float32))
    g = Graph.replica(TrainConfig(workers=2, exchange="allreduce"), data, cluster, 1)
    assert g.kind.name == "allreduce" and g.sync
    assert {op.device for op in g.graph.get_operations()} == {""}  # a session of its own process: no task at all
    assert g.kind.flat.shape.num_elements() == g.parameters == g.kind.mean_in.shape.num_elements()


def test_allreduce_goes_with_sync_mode_only(state, tmp_path):
    result = picluster("train", "har", "--exchange", "allreduce", "--mode", "async", "--workers", "2", "--run-dir", tmp_path / "r")
    assert result.returncode == 2 and result.stderr.count("\n") == 1, result.stderr
    assert "--exchange allreduce" in result.stderr and "--mode sync" in result.stderr
    assert not (tmp_path / "r").exists()


# -- real runs on the embedded local cluster -----------------------------------------------------


def _run(tiny, run_dir, *options) -> tuple[list, float]:
    result = picluster("train", "har", "--data-dir", tiny, "--run-dir", run_dir, *TINY_CONV, "--seed", "3", *options, "--json",
                       timeout=300)
    assert result.returncode == 0, result.stderr
    rows = [(r["train_loss"], r["train_acc"], r["val_loss"], r["val_acc"]) for r in read_rows(run_dir / "metrics.csv")]
    return rows, json.loads(result.stdout)["test_accuracy"]


@pytest.mark.e2e
def test_six_workers_train_one_update_by_every_exchange_and_the_all_reduce_its_emulations(state, tiny, tmp_path):
    """Six workers: the all-reduce folds two ranks into two others before the halving, and its
    numbers are still the emulator's, digit for digit (the same tree of sums); the all-reduce, the
    tree (a group of 4 and one of 2) and TensorFlow's collective (one ring of 6; rings of 3, then of
    2) all train the ps's update, summed in other orders."""
    ps = _run(tiny, tmp_path / "ps", "--workers", "6", "--epochs", "3", "--exchange", "fused")
    cluster = _run(tiny, tmp_path / "allreduce", "--workers", "6", "--epochs", "3", "--exchange", "allreduce")
    emulated = _run(tiny, tmp_path / "emulated", "--workers", "6", "--epochs", "3", "--exchange", "allreduce", "--emulate")
    assert len(cluster[0]) == 3 and cluster == emulated
    for exchange, other in [("allreduce", cluster)] + [(e, _run(tiny, tmp_path / e, "--workers", "6", "--epochs", "3", "--exchange", e))
                                                       for e in ("tree", "collective", "collective-tree")]:
        assert len(other[0]) == 3, exchange
        np.testing.assert_allclose(np.array(other[0], float), np.array(ps[0], float), rtol=2e-3, atol=2e-3, err_msg=exchange)


@pytest.mark.e2e
def test_an_allreduce_run_that_loses_a_worker_or_is_resumed_goes_on_from_the_chiefs_checkpoint_as_if_nothing_happened(state, tiny, tmp_path):
    """Only the chief restores; the broadcast gives the others its weights, Adam's moments and
    step.  The killed client's partners wait in their sums until the coordinator stops the launch;
    the next launch (the worker's server still answers: all three again) restores and broadcasts,
    and `--resume` does the same: both train what an undisturbed run trains."""
    # 20 epochs: the kill at the third must land while the run trains, also on a busy machine.
    calm, _ = _run(tiny, tmp_path / "calm", "--workers", "3", "--exchange", "allreduce", "--epochs", "20")
    first, _ = _run(tiny, tmp_path / "part", "--workers", "3", "--epochs", "2", "--exchange", "allreduce")
    resumed = picluster("train", "har", "--resume", tmp_path / "part", "--epochs", "4", "--json", timeout=300)
    assert resumed.returncode == 0, resumed.stderr
    rows = [(r["train_loss"], r["train_acc"], r["val_loss"], r["val_acc"]) for r in read_rows(tmp_path / "part" / "metrics.csv")]
    assert first == calm[:2] and rows == calm[:4]

    run_dir = tmp_path / "run"
    proc = picluster_popen("train", "har", "--data-dir", tiny, "--run-dir", run_dir, *TINY_CONV, "--workers", "3",
                           "--exchange", "allreduce", "--epochs", "20", "--seed", "3", "--json")
    try:
        deadline = time.monotonic() + 180
        while len(read_rows(run_dir / "metrics.csv")) < 3:
            assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
            time.sleep(0.2)
        victim = client_process(run_dir, 2)
        assert victim is not None
        victim.kill()
        out, err = proc.communicate(timeout=300)
    finally:
        proc.kill()
    assert proc.returncode == 0, err
    lost = json.loads(out)["elastic"]
    assert [(f["task"], f["cause"]) for f in lost["failures"]] == [("worker:2", "signal 9")], err
    assert lost["restarts"] == 1 and lost["workers_per_epoch"] == {str(e): 3 for e in range(1, 21)}
    rows = [(r["train_loss"], r["train_acc"], r["val_loss"], r["val_acc"]) for r in read_rows(run_dir / "metrics.csv")]
    assert rows == calm


# -- TensorFlow's own designs beside it: the tree of aggregators and the collective all-reduce -----


def test_a_tree_member_sends_to_its_groups_first_worker_and_only_first_workers_reach_the_ps():
    import tensorflow as tf

    from picluster.jobs.har.config import TrainConfig
    from picluster.jobs.har.exchange.tree import groups
    from picluster.jobs.har.graph import Graph

    tf.compat.v1.disable_eager_execution()
    assert groups(6) == [[0, 1, 2, 3], [4, 5]] and groups(16)[3] == [12, 13, 14, 15]
    cluster = {"ps": ["127.0.0.1:1"], "worker": [f"127.0.0.1:{p}" for p in range(2, 8)]}
    data = types.SimpleNamespace(x_train=np.zeros((600, 128, 9), np.float32))

    def queues(rank: int) -> dict[str, str]:
        g = Graph.replica(TrainConfig(workers=6, exchange="tree"), data, cluster, rank)
        return {op.name: op.device.removesuffix("/device:CPU:*") for op in g.graph.get_operations() if op.type == "FIFOQueueV2"}

    member = queues(5)  # group [4, 5]: its gradients and weights go through worker 4
    assert member["tree_up_5"] == member["tree_down_5"] == "/job:worker/task:4"
    first = queues(4)
    assert first["tree_sum_4"] == first["tree_token_4"] == "/job:ps/task:0" and first["tree_up_5"] == "/job:worker/task:4"


def test_a_collective_replica_keeps_the_model_on_its_own_task():
    import tensorflow as tf

    from picluster.jobs.har.config import TrainConfig
    from picluster.jobs.har.graph import Graph

    tf.compat.v1.disable_eager_execution()
    cluster = {"ps": ["127.0.0.1:1"], "worker": [f"127.0.0.1:{p}" for p in range(2, 10)]}
    data = types.SimpleNamespace(x_train=np.zeros((1600, 128, 9), np.float32))
    for exchange, rings in (("collective", 1), ("collective-tree", 2)):
        g = Graph.replica(TrainConfig(workers=8, exchange=exchange), data, cluster, 5)
        # Nothing on the ps or another worker (the savers' ops, unplaced, run where the session does).
        assert {op.device for op in g.graph.get_operations()} <= {"/job:worker/task:5", ""}
        sizes = sorted({op.get_attr("group_size") for op in g.graph.get_operations() if op.type == "CollectiveReduce"})
        assert sizes == ([8] if rings == 1 else [2, 4])  # one ring of 8, or a ring of 4 then one of the 2 groups


# -- the default ---------------------------------------------------------------------------------


@pytest.mark.parametrize("given,want", [
    ({"workers": 16}, "allreduce"),
    ({"workers": 2}, "allreduce"),
    ({"workers": 8, "emulate": True, "standalone": True}, "allreduce"),  # the emulator emulates what a cluster gets
    ({"workers": 8, "mode": "async"}, "fused"),
    ({"workers": 8, "wire": "bfloat16"}, "fused"),  # the fused ps exchange's own options
    ({"workers": 8, "local_steps": 2}, "fused"),
    ({"workers": 8, "exchange": "tree"}, "tree"),
])
def test_a_sync_run_gets_the_all_reduce_and_async_or_the_ps_options_the_ps(given, want):
    from picluster.jobs.har.config import TrainConfig

    assert TrainConfig.for_model(**given).exchange == want


def test_a_run_says_in_one_line_how_its_updates_meet_and_why(tmp_path):
    from rich.console import Console

    from picluster.jobs.har.config import TrainConfig
    from picluster.jobs.har.progress import Printer

    def said(**given) -> list[str]:
        console = Console(width=400, record=True, file=open(tmp_path / "out.txt", "w"))  # noqa: SIM115
        Printer(TrainConfig.for_model(**given), "RUN", console=console)
        return console.export_text().splitlines()

    assert said(workers=16)[1] == ("exchange: allreduce, all-reduce between the workers over TCP, no ps in a step "
                                   "(the default for sync updates; --exchange picks another)")
    assert said(workers=4, exchange="fused")[1].endswith("(given by --exchange)")
    assert said(workers=4, wire="bfloat16")[1].startswith("exchange: fused, through the ps")
    assert len(said(standalone=True)) == 1  # one process alone exchanges nothing


def test_the_next_run_of_the_same_shape_in_a_process_reuses_the_all_reduce_graph():
    """A node's resident server runs run after run: building the graph again is most of a Pi-shaped
    host's start-up.  A graph that names its launch (the ps's queues) is never kept."""
    import tensorflow as tf

    from picluster.jobs.har import replica
    from picluster.jobs.har.config import TrainConfig
    from picluster.jobs.har.exchange import Place

    tf.compat.v1.disable_eager_execution()
    cluster = {"ps": ["127.0.0.1:1"], "worker": ["127.0.0.1:2", "127.0.0.1:3"]}
    data = types.SimpleNamespace(x_train=np.zeros((600, 128, 9), np.float32), checksum="c")
    cfg = TrainConfig(workers=2, exchange="allreduce", layers=1, conv_filters=4, rnn_hidden=4)
    first = replica._graph(cfg, data, Place(cluster, 1, 1, 2, "launch-a"))
    again = replica._graph(replace_(cfg, target_val_accuracy=0.9), data, Place(cluster, 1, 1, 2, "launch-b"))
    assert again is first and again.kind.place.launch == "launch-b"
    assert replica._graph(replace_(cfg, seed=2), data, Place(cluster, 1, 1, 2, "launch-c")) is not first  # other initial weights
    ps = TrainConfig(workers=2, exchange="fused", layers=1, conv_filters=4, rnn_hidden=4)
    assert replica._graph(ps, data, Place(cluster, 1, 1, 2, "d")) is not replica._graph(ps, data, Place(cluster, 1, 1, 2, "d"))


def replace_(cfg, **changes):
    from dataclasses import replace

    return replace(cfg, **changes)
