"""What lets more workers train faster (docs/har.md, *Scaling*): a batch per worker with the rate
scaled and warmed up, the ps tasks' shares of the bytes, the async rate over staleness."""

import json
import types

import numpy as np
import pytest

from picluster.jobs.har.config import TrainConfig
from picluster.util.errors import UsageError

CLUSTER = {"ps": ["127.0.0.1:1", "127.0.0.1:2"], "worker": ["127.0.0.1:3", "127.0.0.1:4"]}


def test_sync_feeds_a_batch_per_worker_and_scales_the_rate_by_default():
    c = TrainConfig(workers=8)
    assert c.worker_batch(8) == 100 and c.lr_scale(8) == pytest.approx(8 ** 0.5)
    assert c.steps_per_epoch(8000, 8) == (10, 10)  # 8000 windows: 10 updates of 800
    linear = TrainConfig(workers=8, lr_scaling="linear")
    assert linear.lr_scale(8) == pytest.approx(8.0)


def test_global_batch_is_the_thesis_split_with_the_rate_unscaled():
    c = TrainConfig(workers=8, batch_per_worker=False)
    assert c.worker_batch(8) == 12 and c.lr_scale(8) == pytest.approx((96 / 100) ** 0.5)
    with pytest.raises(UsageError, match="--global-batch splits a batch"):
        TrainConfig(workers=8, batch=4, batch_per_worker=False)
    assert TrainConfig(workers=8, batch=4).worker_batch(8) == 4  # per worker: any batch will do


def test_async_updates_are_one_workers_batch_and_keep_the_rate():
    c = TrainConfig(workers=8, mode="async")
    assert c.worker_batch(8) == 100 and c.lr_scale(8) == 1.0
    assert TrainConfig(standalone=True).lr_scale(2) == 1.0


def test_a_config_of_an_earlier_version_keeps_the_way_it_trained(tmp_path):
    """Resuming a run written before these fields existed must train as it did."""
    old = json.loads(TrainConfig().to_json())
    for name in ("batch_per_worker", "lr_scaling", "warmup_epochs", "warmup_updates", "async_lr", "adam_beta1"):
        del old[name]
    (tmp_path / "config.json").write_text(json.dumps(old))
    c = TrainConfig.load(tmp_path / "config.json")
    assert (c.batch_per_worker, c.lr_scaling, c.warmup_epochs, c.warmup_updates, c.async_lr, c.adam_beta1) == (False, "none", 0.0, 0, "constant", 0.9)
    # A run of the version before the warm-up could count updates kept its warm-up in epochs.
    old = json.loads(TrainConfig(warmup_epochs=2.0, warmup_updates=0).to_json())
    del old["warmup_updates"]
    (tmp_path / "config.json").write_text(json.dumps(old))
    c = TrainConfig.load(tmp_path / "config.json")
    assert (c.warmup_epochs, c.warmup_updates) == (2.0, 0)


def test_two_ps_tasks_hold_even_shares_of_the_bytes():
    """Round robin by variable put nearly every weight on one ps and the biases on the other."""
    import tensorflow as tf

    from picluster.jobs.har.graph import Graph

    tf.compat.v1.disable_eager_execution()
    x = np.zeros((1600, 128, 9), np.float32)
    g = Graph.replica(TrainConfig(workers=2, ps=2), types.SimpleNamespace(x_train=x), CLUSTER, 0)
    share: dict[str, int] = {}
    for v in g.variables:
        share[v.device] = share.get(v.device, 0) + int(np.prod(v.shape)) * 4
    assert set(share) == {"/job:ps/task:0", "/job:ps/task:1"}, share
    assert max(share.values()) <= 1.25 * min(share.values()), share


def test_only_the_chief_builds_what_saves_and_only_an_evaluating_one_the_best_saver():
    """Each Saver or snapshot costs a Pi-shaped host about half a second of its start-up: a worker
    that is not the launch's chief neither saves nor restores, and a chief whose evaluator runs
    beside the coordinator keeps no best model (that evaluator does)."""
    import tensorflow as tf

    from picluster.jobs.har.graph import Graph

    tf.compat.v1.disable_eager_execution()
    data = types.SimpleNamespace(x_train=np.zeros((1600, 128, 9), np.float32))

    def built(rank: int, evaluator: str) -> tuple[Graph, set[str]]:
        g = Graph.replica(TrainConfig(workers=2, evaluator=evaluator), data, CLUSTER, rank)
        return g, {op.type for op in g.graph.get_operations()}

    worker, kinds = built(1, "coordinator")
    assert worker.saver is None and worker.best_saver is None and worker.snapshot == []
    assert "SaveV2" not in kinds and "RestoreV2" not in kinds
    assert not hasattr(worker.kind, "announce") and len(worker.kind.arrive) == 3
    chief, kinds = built(0, "coordinator")
    assert chief.saver is not None and chief.best_saver is None and len(chief.snapshot) == len(chief.saved)
    assert "SaveV2" in kinds and not hasattr(chief.kind, "arrive")
    evaluating, _ = built(0, "chief")
    assert evaluating.saver is not None and evaluating.best_saver is not None and evaluating.snapshot == []
    alone = Graph(TrainConfig(standalone=True), data)
    assert alone.saver is not None and alone.best_saver is not None


def test_the_rate_warms_up_to_the_scaled_rate_then_stays():
    import tensorflow as tf

    from picluster.jobs.har.graph import learning_rate

    tf.compat.v1.disable_eager_execution()
    c = TrainConfig(workers=4, warmup_epochs=2.0)  # sqrt(4) = 2x the rate
    with tf.Graph().as_default():
        step = tf.compat.v1.placeholder(tf.int64, [])
        lr = learning_rate(c, step, per_epoch=10, workers=4)
        with tf.compat.v1.Session() as s:
            got = [s.run(lr, {step: n}) for n in (0, 10, 20, 100)]
    assert got == pytest.approx([0.001, 0.0015, 0.002, 0.002])


@pytest.mark.parametrize("per_epoch", [10, 40])
def test_a_warm_up_in_updates_is_the_same_length_whatever_an_epoch_holds(per_epoch):
    import tensorflow as tf

    from picluster.jobs.har.graph import learning_rate

    tf.compat.v1.disable_eager_execution()
    c = TrainConfig.for_model(workers=4, warmup_updates=10)
    assert (c.warmup_updates, c.warmup_epochs) == (10, 0.0)
    with tf.Graph().as_default():
        step = tf.compat.v1.placeholder(tf.int64, [])
        lr = learning_rate(c, step, per_epoch=per_epoch, workers=4)
        with tf.compat.v1.Session() as s:
            got = [s.run(lr, {step: n}) for n in (0, 5, 10, 100)]
    assert got == pytest.approx([0.001, 0.0015, 0.002, 0.002])


def test_a_launch_with_fewer_workers_goes_on_with_the_rate_of_its_epoch_not_of_its_restored_step():
    """An elastic restart with one worker fewer takes more updates an epoch: the warm-up and the
    cosine go on from the epoch the run reached, where the restored global step alone (counted at
    the last launch's updates an epoch) would put the rate back."""
    import tensorflow as tf

    from picluster.jobs.har.graph import Graph

    tf.compat.v1.disable_eager_execution()
    data = types.SimpleNamespace(x_train=np.zeros((1200, 128, 9), np.float32))

    def rates(workers: int, step: int, start_epoch: int, start_step: int) -> tuple[float, float]:
        # The emulator's graph: the same schedule as a cluster's, in one process.
        warm = Graph(TrainConfig(emulate=True, standalone=True, workers=workers, batch=100, warmup_epochs=2.0, epochs=10), data)
        cosine = Graph(TrainConfig(emulate=True, standalone=True, workers=workers, batch=100, warmup_epochs=0.0, lr_schedule="cosine", epochs=10), data)
        got = []
        for g in (warm, cosine):
            g.schedule_at(start_epoch, start_step)
            with g.graph.as_default(), tf.compat.v1.Session(graph=g.graph) as s:
                s.run(tf.compat.v1.global_variables_initializer())
                s.run(g.global_step.assign(step))
                got.append(float(s.run(g.learning_rate, g.schedule)))
        return got[0], got[1]

    # 4 workers take 3 updates an epoch (1200 windows, 100 each), 3 workers 4.
    assert TrainConfig(workers=4).steps_per_epoch(1200, 4)[1] == 3 and TrainConfig(workers=3).steps_per_epoch(1200, 3)[1] == 4
    base, peak = 0.001, 0.001 * 3 ** 0.5
    # One epoch done by 4 workers (step 3), going on with 3: halfway through the 2-epoch warm-up,
    # as 3 workers would be after their own first epoch (step 4); the cosine a tenth of the way.
    warm, cosine = rates(3, step=3, start_epoch=1, start_step=3)
    assert warm == pytest.approx(base + (peak - base) * 0.5) == pytest.approx(rates(3, 4, 1, 4)[0])
    assert cosine == pytest.approx(peak * 0.5 * (1 + np.cos(np.pi * 0.1)))
    # Steps past the launch's first count at its own updates an epoch.
    assert rates(3, step=5, start_epoch=1, start_step=3)[0] == pytest.approx(base + (peak - base) * 6 / 8)
    # A launch that starts where its step says (the same workers throughout) feeds nothing.
    g = Graph(TrainConfig(emulate=True, standalone=True, workers=3, batch=100), data)
    g.schedule_at(2, 8)
    assert g.schedule == {}


def test_the_warm_up_is_given_in_one_unit():
    # Either option alone replaces the default warm-up, whichever unit that is counted in.
    assert (TrainConfig.for_model(warmup_epochs=1.0).warmup_updates, TrainConfig.for_model(warmup_epochs=1.0).warmup_epochs) == (0, 1.0)
    assert TrainConfig.for_model(warmup_updates=6).warmup_epochs == 0.0
    with pytest.raises(UsageError, match=r"--warmup-updates 6 and --warmup-epochs 1 both set the warm-up: give one"):
        TrainConfig.for_model(warmup_updates=6, warmup_epochs=1.0)
    assert TrainConfig.for_model(warmup_updates=0, warmup_epochs=0.0).warmup_epochs == 0.0


def test_cosine_decays_the_scaled_rate_to_zero_at_the_last_epoch():
    import tensorflow as tf

    from picluster.jobs.har.graph import learning_rate

    tf.compat.v1.disable_eager_execution()
    c = TrainConfig(workers=4, warmup_epochs=0.0, lr_schedule="cosine", epochs=10)
    with tf.Graph().as_default():
        step = tf.compat.v1.placeholder(tf.int64, [])
        lr = learning_rate(c, step, per_epoch=10, workers=4)
        with tf.compat.v1.Session() as s:
            got = [s.run(lr, {step: n}) for n in (0, 50, 100)]
    assert got == pytest.approx([0.002, 0.001, 0.0], abs=1e-7)


def test_a_ps_task_left_without_variables_is_refused():
    from picluster.jobs.har.placement import check_shards

    held = [types.SimpleNamespace(device=f"/job:ps/task:{t}") for t in (0, 1, 0)]
    check_shards(2, held)
    with pytest.raises(UsageError, match=r"--ps 3 leaves ps task 2 without variables .* use --ps 2 or fewer"):
        check_shards(3, held)


def test_a_global_batch_needs_one_updates_windows_not_the_batch_times_the_workers(tiny):
    """--global-batch splits --batch over the workers: 200 windows an update fit 240, whatever the
    workers; a batch per worker needs workers x batch."""
    from picluster.jobs.har.data import load_data

    assert len(load_data(TrainConfig(data_dir=str(tiny), batch=200, batch_per_worker=False, workers=4)).x_train) == 240
    with pytest.raises(UsageError, match=r"fewer than one update takes \(800"):
        load_data(TrainConfig(data_dir=str(tiny), batch=200, workers=4))


def test_a_sync_update_of_eight_workers_or_more_takes_the_recipes_adam_beta2_unless_given():
    """Few, large updates: Adam's second moment averages ~20 updates from 8 workers on, as chosen on
    validation with the emulator; fewer workers, async, one Pi and an option given keep their value."""
    assert TrainConfig.for_model(workers=8).adam_beta2 == TrainConfig.for_model(workers=16).adam_beta2 == 0.95
    assert TrainConfig.for_model(workers=8, emulate=True, standalone=True).adam_beta2 == 0.95  # the emulator makes the same updates
    assert TrainConfig.for_model(workers=4).adam_beta2 == 0.999
    assert TrainConfig.for_model(workers=8, mode="async").adam_beta2 == 0.999
    assert TrainConfig.for_model(workers=8, standalone=True).adam_beta2 == 0.999
    assert TrainConfig.for_model(workers=16, adam_beta2=0.999).adam_beta2 == 0.999


def test_eight_sync_workers_or_more_split_a_fixed_update_of_400_windows_unless_its_size_is_given():
    """From 8 workers the recipe's update is 400 windows split over them at rate 0.002 (one Pi's
    statistics, chosen on validation with the emulator); --batch or --global-batch given drops the
    whole size choice, --lr given replaces the rate only; fewer workers keep a batch per worker."""
    for workers in (8, 16, 64):
        c = TrainConfig.for_model(workers=workers)
        assert (c.batch, c.batch_per_worker, c.learning_rate, c.adam_beta2) == (400, False, 0.002, 0.95)
        assert c.worker_batch(workers) == 400 // workers
        assert c.lr_scale(workers) == pytest.approx((400 // workers * workers / 400) ** 0.5)
    assert TrainConfig.for_model(workers=16, emulate=True, standalone=True).batch_per_worker is False  # the emulator makes them too
    c = TrainConfig.for_model(workers=4)  # fewer: 100 windows each
    assert (c.batch, c.batch_per_worker, c.learning_rate) == (100, True, 0.001)
    for other in ({"mode": "async"}, {"standalone": True}):
        c = TrainConfig.for_model(workers=16, **other)
        assert (c.batch, c.batch_per_worker, c.learning_rate) == (100, True, 0.001)
    given = TrainConfig.for_model(workers=16, batch=50)  # windows per worker, as --batch says
    assert (given.batch, given.batch_per_worker, given.learning_rate, given.adam_beta2) == (50, True, 0.001, 0.95)
    split = TrainConfig.for_model(workers=16, batch_per_worker=False)  # --global-batch alone: the default 100, split
    assert (split.batch, split.learning_rate) == (100, 0.001)
    rate = TrainConfig.for_model(workers=16, learning_rate=0.003)
    assert (rate.batch, rate.batch_per_worker, rate.learning_rate) == (400, False, 0.003)
