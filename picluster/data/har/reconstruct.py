"""UCI HAR windows rebuilt from raw 50 Hz recordings, following the UCI HAR README.

Noise: a median filter, then a 3rd-order low-pass Butterworth at 20 Hz.  Gravity: a low-pass
Butterworth at 0.3 Hz of the denoised acceleration; body_acc = total_acc - gravity.  The README
publishes neither the median length nor the gravity filter order; MEDIAN_LENGTH and GRAVITY_ORDER
were chosen by measurement (see benchmarks/har_data.py --filters and the README).  Every filter
runs forward and backward (zero phase) so gravity is not delayed with respect to the signal it
is subtracted from.

Windows of 128 samples with a step of 64 are cut inside each maximal run of one basic activity
(labels 1..6): a window never straddles two activities or a transition.
"""

from dataclasses import dataclass

import numpy as np

from picluster.data.har.spec import RATE_HZ, STEP, WINDOW
from picluster.data.har.windows import Windows

MEDIAN_LENGTH = 3
NOISE_ORDER, NOISE_CUTOFF_HZ = 3, 20.0
GRAVITY_ORDER, GRAVITY_CUTOFF_HZ = 3, 0.3
BASIC_ACTIVITIES = range(1, 7)


@dataclass(frozen=True)
class Recording:
    """One raw experiment: acc (n, 3) in g, gyro (n, 3) in rad/s, label (n,) per sample (-1 none)."""

    subject: int
    acc: np.ndarray
    gyro: np.ndarray
    label: np.ndarray


def denoise(signal: np.ndarray, median: int = MEDIAN_LENGTH, rate: float = RATE_HZ) -> np.ndarray:
    """Median filter then low-pass at 20 Hz, along axis 0 of an (n, channels) array."""
    from scipy import ndimage
    from scipy import signal as sp

    x = np.asarray(signal, dtype=np.float64)
    if median > 1:
        # 'nearest' rather than medfilt's zero padding, which would pull total_acc towards 0 g at the ends.
        x = ndimage.median_filter(x, size=(median,) + (1,) * (x.ndim - 1), mode="nearest")
    sos = sp.butter(NOISE_ORDER, NOISE_CUTOFF_HZ, btype="low", fs=rate, output="sos")
    return sp.sosfiltfilt(sos, x, axis=0)


def gravity(total_acc: np.ndarray, order: int = GRAVITY_ORDER, rate: float = RATE_HZ) -> np.ndarray:
    """The gravity component of an (n, 3) acceleration: its content below 0.3 Hz."""
    from scipy import signal as sp

    sos = sp.butter(order, GRAVITY_CUTOFF_HZ, btype="low", fs=rate, output="sos")
    return sp.sosfiltfilt(sos, np.asarray(total_acc, dtype=np.float64), axis=0)


def channels(acc: np.ndarray, gyro: np.ndarray, median: int = MEDIAN_LENGTH, gravity_order: int = GRAVITY_ORDER) -> np.ndarray:
    """(n, 9) in spec.CHANNELS order: body_acc, body_gyro, total_acc."""
    total = denoise(acc, median)
    body_gyro = denoise(gyro, median)
    return np.concatenate([total - gravity(total, gravity_order), body_gyro, total], axis=1)


def activity_segments(label: np.ndarray) -> list[tuple[int, int, int]]:
    """(start, stop, label) of every maximal run of one basic activity."""
    label = np.asarray(label)
    if len(label) == 0:
        return []
    edges = np.flatnonzero(np.diff(label)) + 1
    starts = np.concatenate([[0], edges])
    stops = np.concatenate([edges, [len(label)]])
    return [(int(a), int(b), int(label[a])) for a, b in zip(starts, stops) if label[a] in BASIC_ACTIVITIES]


def window_starts(start: int, stop: int) -> range:
    """Starts of the windows that fit in [start, stop), first one at start."""
    return range(start, stop - WINDOW + 1, STEP)


def recording_windows(rec: Recording, median: int = MEDIAN_LENGTH, gravity_order: int = GRAVITY_ORDER) -> Windows:
    # Filter the whole recording, then cut: filtering each segment alone would add edge transients.
    signal = channels(rec.acc, rec.gyro, median, gravity_order).astype(np.float32)
    starts, labels = [], []
    for start, stop, activity in activity_segments(rec.label):
        for s in window_starts(start, stop):
            starts.append(s)
            labels.append(activity - 1)
    if not starts:
        return Windows.empty()
    index = np.asarray(starts)[:, None] + np.arange(WINDOW)[None, :]
    return Windows(signal[index], np.asarray(labels, np.int64), np.full(len(starts), rec.subject, np.int64))


def reconstruct(recordings, median: int = MEDIAN_LENGTH, gravity_order: int = GRAVITY_ORDER) -> Windows:
    """All windows of all recordings, in recording order."""
    return Windows.concat([recording_windows(r, median, gravity_order) for r in recordings])
