"""Post-local SGD (jobs/har/localsgd.py): local steps exchange nothing, a sync averages the models."""

import json
import sys
import threading
import types
from pathlib import Path

import numpy as np
import pytest

from picluster.jobs.har.config import TrainConfig
from picluster.jobs.har.metrics import read_rows
from picluster.util.errors import UsageError

from conftest import picluster
from train_fixtures import TINY_CONV, error_line, write_tiny_har

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))


@pytest.mark.parametrize("options, why", [
    ({"standalone": True}, "a standalone run has one model"),
    ({"mode": "async"}, "--mode async has no sync"),
    ({"workers": 1}, "one worker has no other model to average with"),
    ({"exchange": "variables"}, "it needs --exchange fused"),
    ({"ema": 0.9}, "--ema is not kept by the local steps"),
])
def test_local_steps_are_refused_where_there_is_no_sync_of_models(options, why):
    with pytest.raises(UsageError, match=f"--local-steps 4 averages sync workers' models: {why}; drop --local-steps"):
        TrainConfig.for_model(local_steps=4, **options)


def test_a_config_of_an_earlier_version_syncs_every_step(tmp_path):
    old = json.loads(TrainConfig().to_json())
    del old["local_steps"], old["local_after"]
    (tmp_path / "config.json").write_text(json.dumps(old))
    assert TrainConfig.load(tmp_path / "config.json").local_steps == 1


@pytest.mark.e2e
def test_local_steps_move_nothing_and_a_sync_leaves_every_worker_the_mean_model():
    """Real servers in this process, the graph `train har` builds for each of 2 workers: after
    local steps on different data, the ps holds the mean of the two models, both workers read it
    back, and the global step counts the steps the sync covered."""
    import tensorflow as tf
    from har_rpcs import count, free_ports

    from picluster.jobs.har.graph import Graph

    tf.compat.v1.disable_eager_execution()
    workers, k = 2, 3
    ports = free_ports(1 + workers)
    cluster = {"ps": [f"127.0.0.1:{ports[0]}"], "worker": [f"127.0.0.1:{p}" for p in ports[1:]]}
    servers = [tf.distribute.Server(cluster, "ps", 0, start=True)]
    servers += [tf.distribute.Server(cluster, "worker", t, start=True) for t in range(workers)]
    cfg = TrainConfig(workers=workers, local_steps=k, local_after=0, evaluator="coordinator", layers=1, conv_filters=4,
                      conv_pool=8, rnn_hidden=8, augment="")
    rng = np.random.default_rng(0)
    data = types.SimpleNamespace(x_train=rng.normal(size=(600, 128, 9)).astype(np.float32))
    graphs = [Graph.replica(cfg, data, cluster, t, f"local{ports[0]}") for t in range(workers)]
    sessions = []
    for t, g in enumerate(graphs):
        config = tf.compat.v1.ConfigProto(device_filters=["/job:ps", f"/job:worker/task:{t}"])
        sessions.append(tf.compat.v1.Session(f"grpc://{cluster['worker'][t]}", graph=g.graph, config=config))
        with g.graph.as_default():
            if t == 0:
                sessions[t].run(tf.compat.v1.global_variables_initializer())
            sessions[t].run(tf.compat.v1.local_variables_initializer())
    options = tf.compat.v1.RunOptions(output_partition_graphs=True)
    before = sessions[0].run(graphs[0].variables)
    locals_, moved, errors = {}, {}, []

    def local_steps(t):
        g, s = graphs[t], sessions[t]
        s.run(g.local_start)
        for i in range(k):
            feed = {g.x: data.x_train[100 * (2 * i + t):100 * (2 * i + t + 1)], g.y: np.full(100, t, np.int64), g.keep: 1.0,
                    g.local_done: i}
            metadata = tf.compat.v1.RunMetadata()
            s.run(g.local.step, feed, options=options, run_metadata=metadata)
            moved[t] = count(metadata, f"worker:{t}")
        locals_[t] = s.run(g.local.model)

    def sync(t):
        try:
            sessions[t].run(graphs[t].local_sync, {graphs[t].local_done: k})
        except BaseException as exc:
            errors.append(exc)

    for t in range(workers):
        local_steps(t)
    assert moved == {t: {"partitions": 1, "remote_partitions": 0, "remote_tensors": 0, "remote_dtypes": {}} for t in range(workers)}
    assert not np.allclose(locals_[0][0], locals_[1][0])  # each learned from its own windows
    threads = [threading.Thread(target=sync, args=(t,)) for t in range(workers)]
    for th in threads:
        th.start()
    for th in threads:
        th.join(120)
    assert not errors, errors
    after = sessions[0].run(graphs[0].variables)
    flat_before = np.concatenate([np.ravel(v) for v in before])
    flat_after = np.concatenate([np.ravel(v) for v in after])
    # The ps's trainable variables in creation order are the local model's layout (one ps).
    layout = graphs[0].local
    trainable = {v.name for v in graphs[0].variables}
    offsets, at = {}, 0
    for i in layout.groups[0][1]:
        size = int(np.prod(layout.made[i].shape))
        offsets[layout.made[i].name] = (at, size)
        at += size
    mean_model = (locals_[0][0] + locals_[1][0]) / 2
    expected = np.concatenate([mean_model[o:o + n] for name, (o, n) in offsets.items() if name in trainable])
    assert not np.allclose(flat_after, flat_before)
    np.testing.assert_allclose(flat_after, expected, rtol=1e-5, atol=1e-6)
    for t in range(workers):
        held = sessions[t].run(graphs[t].local.model)[0]
        np.testing.assert_allclose(held, sessions[t].run(graphs[t].local.anchor)[0])
        np.testing.assert_allclose(np.concatenate([held[o:o + n] for name, (o, n) in offsets.items() if name in trainable]),
                                   flat_after, rtol=1e-6)
        assert sessions[t].run(graphs[t].local_step_seen) == k
    assert sessions[0].run(graphs[0].global_step) == k
    for s in sessions:
        s.close()


@pytest.mark.e2e
def test_train_with_local_steps_learns_and_counts_every_step(state, tmp_path):
    tiny = write_tiny_har(tmp_path / "har")
    run_dir = tmp_path / "run"
    result = picluster("train", "har", "--data-dir", tiny, "--run-dir", run_dir, *TINY_CONV, "--epochs", "4", "--workers", "2",
                       "--local-steps", "2", "--local-after", "1", timeout=240)
    assert result.returncode == 0, result.stderr
    assert "Traceback" not in result.stderr
    assert "models averaged every 2 local steps after epoch 1" in result.stderr.splitlines()[0]
    rows = read_rows(run_dir / "metrics.csv")
    steps = [int(r["global_step"]) for r in rows]
    per_epoch = steps[0]
    # Epochs 2-4 synced every 2 local steps and at each epoch's end; the step count goes on as if
    # every step had synced, so epochs, the rate and a resume count the same way.
    assert steps == [per_epoch * e for e in range(1, 5)]
    assert float(rows[-1]["train_loss"]) < float(rows[0]["train_loss"])
    assert json.loads((run_dir / "config.json").read_text())["local_steps"] == 2


def test_local_steps_refused_on_the_command_line_in_one_line(state, tmp_path):
    tiny = write_tiny_har(tmp_path / "har")
    result = picluster("train", "har", "--data-dir", tiny, "--run-dir", tmp_path / "run", "--mode", "async", "--local-steps", "4")
    assert result.returncode == 2, result.stderr
    assert "--local-steps 4 averages sync workers' models: --mode async has no sync" in error_line(result.stderr)
    assert not (tmp_path / "run").exists()
