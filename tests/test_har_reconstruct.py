"""Filters, windowing and the volunteer split of the HAPT reconstruction, on signals made here."""

import numpy as np
import pytest

from picluster.data.har import hapt
from picluster.data.har.dataset import from_train_test
from picluster.data.har.reconstruct import (
    Recording,
    activity_segments,
    channels,
    denoise,
    gravity,
    reconstruct,
    recording_windows,
)
from picluster.data.har.spec import TEST_SUBJECTS, VALIDATION_SUBJECTS

from har_synthetic import hapt_pickle, recording_columns, write_gz

RATE = 50
t = np.arange(2000) / RATE


def test_gravity_of_a_constant_signal_is_the_constant():
    total = np.tile([0.12, -0.31, 0.94], (len(t), 1))
    np.testing.assert_allclose(gravity(total), total, atol=1e-9)


@pytest.mark.parametrize("order", [1, 2, 3, 4])
def test_gravity_keeps_the_slow_part_and_body_gets_the_motion(order):
    still = np.array([0.0, 0.2, 0.98])
    motion = 0.3 * np.sin(2 * np.pi * 2.0 * t)[:, None] * np.array([1.0, -0.5, 0.25])
    g = gravity(still + motion, order=order)
    middle = slice(250, -250)  # away from the ends, where any filter guesses
    np.testing.assert_allclose(g[middle], np.broadcast_to(still, g[middle].shape), atol=0.01)


def test_channels_are_body_acc_body_gyro_total_acc():
    acc = np.array([0.0, 0.2, 0.98]) + 0.3 * np.sin(2 * np.pi * 1.5 * t)[:, None] * np.array([1.0, 0.0, 0.0])
    gyro = 0.5 * np.cos(2 * np.pi * 0.7 * t)[:, None] * np.array([0.0, 1.0, 0.0])
    out = channels(acc, gyro)
    middle = slice(250, -250)
    np.testing.assert_allclose(out[middle, 0:3], (acc - [0.0, 0.2, 0.98])[middle], atol=0.01)
    np.testing.assert_allclose(out[middle, 3:6], gyro[middle], atol=0.01)
    np.testing.assert_allclose(out[middle, 6:9], acc[middle], atol=0.01)
    # total = body + gravity exactly, everywhere
    np.testing.assert_allclose(out[:, 6:9] - out[:, 0:3], gravity(out[:, 6:9]), atol=1e-12)


def test_median_filter_removes_a_single_sample_spike_that_the_low_pass_alone_keeps():
    x = np.zeros((500, 1))
    x[250] = 10.0
    assert np.abs(denoise(x, median=3)).max() < 1e-9
    assert np.abs(denoise(x, median=1)).max() > 1.0


def test_noise_filter_passes_motion_and_cuts_near_nyquist():
    slow = np.sin(2 * np.pi * 2.0 * t)[:, None]
    np.testing.assert_allclose(denoise(slow)[100:-100], slow[100:-100], atol=0.03)
    fast = np.sin(2 * np.pi * 24.0 * t)[:, None]
    assert np.abs(denoise(fast, median=1)[100:-100]).max() < 0.2


# A raw recording whose windows can be counted by hand (128 samples, step 64, inside runs of 1..6):
SEGMENTS = [(-1, 50), (1, 300), (7, 40), (4, 128), (5, 127), (6, 256), (2, 200), (-1, 30)]
# label 1 at 50..349: starts 50, 114, 178 (242 + 128 > 350)
# label 7 (transition): none; label 4 at 390..517: exactly one; label 5: 127 samples, none
# label 6 at 645..900: 645, 709, 773; label 2 at 901..1100, straight after 6: 901, 965
EXPECTED_STARTS = [50, 114, 178, 390, 645, 709, 773, 901, 965]
EXPECTED_Y = [0, 0, 0, 3, 5, 5, 5, 1, 1]


def _raw(seed: int = 0):
    label = np.concatenate([np.full(n, v) for v, n in SEGMENTS])
    rng = np.random.default_rng(seed)
    n = len(label)
    acc = np.array([0.0, 0.1, 1.0]) + 0.2 * rng.normal(size=(n, 3))
    gyro = 0.3 * rng.normal(size=(n, 3))
    return acc, gyro, label


def test_segments_are_runs_of_one_basic_activity():
    _, _, label = _raw()
    assert activity_segments(label) == [(50, 350, 1), (390, 518, 4), (518, 645, 5), (645, 901, 6), (901, 1101, 2)]


def test_windows_of_a_recording_are_exactly_predictable():
    acc, gyro, label = _raw()
    w = recording_windows(Recording(7, acc, gyro, label))
    assert w.x.shape == (len(EXPECTED_STARTS), 128, 9) and w.x.dtype == np.float32
    assert w.y.tolist() == EXPECTED_Y
    assert w.subject.tolist() == [7] * len(EXPECTED_STARTS)
    signal = channels(acc, gyro).astype(np.float32)
    for k, start in enumerate(EXPECTED_STARTS):
        np.testing.assert_array_equal(w.x[k], signal[start : start + 128])


def test_recording_without_a_long_enough_activity_gives_no_windows():
    label = np.concatenate([np.full(100, 3), np.full(100, -1), np.full(127, 4)])
    w = recording_windows(Recording(1, np.ones((327, 3)), np.zeros((327, 3)), label))
    assert len(w) == 0 and w.x.shape == (0, 128, 9)


def test_from_the_raw_package_format_to_split_windows(tmp_path):
    # Volunteers: 1 (train), 5 (validation), 2 (test); two experiments for volunteer 1.
    assert 5 in VALIDATION_SUBJECTS and 2 in TEST_SUBJECTS and 1 not in VALIDATION_SUBJECTS + TEST_SUBJECTS
    users = {}
    for user, seeds in ((1, (1, 2)), (2, (3,)), (5, (4,))):
        users[user] = [recording_columns(*_raw(seed)) for seed in seeds]
    recordings = hapt.read_recordings(write_gz(tmp_path / "HAPT.pkl.gz", hapt_pickle(users)))
    assert [(r.subject, len(r.label)) for r in recordings] == [(1, 1131), (1, 1131), (2, 1131), (5, 1131)]

    windows = reconstruct(recordings)
    data = from_train_test(windows.without_subjects(TEST_SUBJECTS), windows.of_subjects(TEST_SUBJECTS), "synthetic")
    assert data.y_train.tolist() == EXPECTED_Y * 2 and set(data.subject_train.tolist()) == {1}
    assert data.y_val.tolist() == EXPECTED_Y and set(data.subject_val.tolist()) == {5}
    assert data.y_test.tolist() == EXPECTED_Y and set(data.subject_test.tolist()) == {2}
    acc, gyro, _ = _raw(3)
    np.testing.assert_array_equal(data.x_test[4], channels(acc, gyro).astype(np.float32)[645:773])
