"""Training-window augmentation of the inertial signals (numpy, in the replica's feed loop).

Only training batches are augmented, never validation or test windows.  The replica seeds the
generator by (seed, epoch, task), so a run is as reproducible with augmentation as without.

Spec (``--augment``): comma-separated parts, e.g. ``rotate:45,mirror:0.5,scale:0.1,shift:8``
- ``rotate:DEG``  a random 3-D rotation per window, uniform axis, angle uniform in [-DEG, DEG]
                  (180 = any orientation), applied to the body_acc, total_acc and gyro triads together;
- ``mirror:P``    with probability P, the window's left/right mirror (reflection of the device's
                  y axis): accelerations (polar vectors) get y -> -y, angular rates (axial vectors)
                  transform with det = -1, so x -> -x, z -> -z;
- ``scale:S``     every channel of a window times one factor ~ U(1 - S, 1 + S);
- ``shift:N``     the window shifted by up to N steps either way, the edge sample repeated.
Chosen on validation (docs/har.md): rotation is the main gain, and every part adds to it; any
orientation (rotate:180) hurts, because the direction of gravity tells the postures apart.
"""

import math

import numpy as np

ACC = ((0, 1, 2), (6, 7, 8))  # body_acc, total_acc (picluster.data.har.spec.CHANNELS)
GYRO = (3, 4, 5)
# Each part's range: (low, high, whole number).
PARTS = {"rotate": (0.0, 180.0, False), "mirror": (0.0, 1.0, False), "scale": (0.0, 0.99, False), "shift": (0, 64, True)}


def parse(spec: str) -> dict[str, float]:
    """``"rotate:45,shift:8"`` -> {"rotate": 45.0, "shift": 8.0}; ValueError naming what is wrong."""
    out: dict[str, float] = {}
    for part in filter(None, (p.strip() for p in (spec or "").split(","))):
        name, _, text = part.partition(":")
        if name not in PARTS:
            raise ValueError(f"unknown part {name!r}: the parts are {', '.join(f'{p}:N' for p in PARTS)}")
        if name in out:
            raise ValueError(f"{name!r} is given twice")
        if not text and name != "mirror":
            raise ValueError(f"{name!r} needs a value ({name}:N)")
        low, high, whole = PARTS[name]
        try:
            value = float(text) if text else 0.5  # a bare "mirror": half the windows
        except ValueError:
            raise ValueError(f"{name}:{text} is not a number") from None
        if not math.isfinite(value) or not low <= value <= high or (whole and value != int(value)):
            raise ValueError(f"{name} must be {'a whole number' if whole else 'a number'} from {low:g} to {high:g}, got {text}")
        out[name] = value
    return out


def rotations(rng: np.random.Generator, n: int, max_deg: float) -> np.ndarray:
    """n rotation matrices [n, 3, 3]: axis uniform on the sphere, angle uniform in [-max, max] (Rodrigues)."""
    axis = rng.normal(size=(n, 3))
    axis /= np.linalg.norm(axis, axis=1, keepdims=True)
    angle = np.deg2rad(rng.uniform(-max_deg, max_deg, size=n))
    k = np.zeros((n, 3, 3))
    k[:, 0, 1], k[:, 0, 2], k[:, 1, 2] = -axis[:, 2], axis[:, 1], -axis[:, 0]
    k[:, 1, 0], k[:, 2, 0], k[:, 2, 1] = axis[:, 2], -axis[:, 1], axis[:, 0]
    s, c = np.sin(angle)[:, None, None], np.cos(angle)[:, None, None]
    return np.eye(3)[None] + s * k + (1 - c) * (k @ k)


def augment(x: np.ndarray, rng: np.random.Generator, spec: dict[str, float]) -> np.ndarray:
    """x [B, T, 9] -> a new array, each window transformed on its own (``x`` itself when spec is empty).

    The generator's draws, in order: rotations, mirror coins, scales, shifts; a part that is off
    draws nothing, so a spec's stream depends only on its own parts."""
    if not spec:
        return x
    x = np.array(x, np.float32, copy=True)
    n, t, _ = x.shape
    matrices = np.broadcast_to(np.eye(3), (n, 3, 3)).copy()
    if spec.get("rotate"):
        matrices = rotations(rng, n, spec["rotate"])
    gyro_sign = np.ones(n)
    if spec.get("mirror"):
        flip = rng.random(n) < spec["mirror"]
        reflect = np.diag([1.0, -1.0, 1.0])
        matrices[flip] = matrices[flip] @ reflect
        gyro_sign[flip] = -1.0  # an axial vector under a reflection: det(M) M w
    if spec.get("rotate") or spec.get("mirror"):
        m = matrices.astype(np.float32)
        for triad in ACC:
            x[:, :, triad] = np.einsum("nij,ntj->nti", m, x[:, :, triad])
        x[:, :, GYRO] = np.einsum("nij,ntj->nti", m, x[:, :, GYRO]) * gyro_sign[:, None, None].astype(np.float32)
    if spec.get("scale"):
        x *= rng.uniform(1 - spec["scale"], 1 + spec["scale"], size=(n, 1, 1)).astype(np.float32)
    if spec.get("shift"):
        most = int(spec["shift"])
        shifts = np.asarray(rng.integers(-most, most + 1, size=n))
        idx = np.clip(np.arange(t)[None, :] - shifts[:, None], 0, t - 1)
        x = np.take_along_axis(x, idx[:, :, None], axis=1)
    return x
