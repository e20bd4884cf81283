"""The thesis's Table 5: Monte-Carlo pi on 1 to 16 Raspberry Pi 3 B+, seconds (None = out of memory).

The reference our sweeps and their figures are held against (the lab benchmark and ``picluster
plot``).  A single 1 GB Pi ran out of memory above 6e7 samples: the thesis drew each task's
share as one [n, 2] tensor.
"""

NODES = (1, 2, 4, 8, 16)
SECONDS: dict[int, dict[int, float | None]] = {
    10**7: {1: 1.495, 2: 1.180, 4: 1.320, 8: 1.961, 16: 2.34},
    2 * 10**7: {1: 2.594, 2: 1.704, 4: 1.572, 8: 2.087, 16: 2.48},
    3 * 10**7: {1: 3.673, 2: 2.284, 4: 1.848, 8: 2.299, 16: 2.57},
    4 * 10**7: {1: 4.758, 2: 2.818, 4: 2.090, 8: 2.350, 16: 2.63},
    5 * 10**7: {1: 6.561, 2: 3.373, 4: 2.391, 8: 2.480, 16: 2.79},
    6 * 10**7: {1: 7.713, 2: 3.910, 4: 2.648, 8: 2.628, 16: 2.593},
    7 * 10**7: {1: None, 2: 4.451, 4: 2.923, 8: 2.782, 16: 2.421},
    8 * 10**7: {1: None, 2: 4.998, 4: 3.218, 8: 2.953, 16: 2.561},
    9 * 10**7: {1: None, 2: 5.678, 4: 3.482, 8: 3.147, 16: 2.842},
    10**8: {1: None, 2: 6.103, 4: 3.741, 8: 3.234, 16: 2.611},
}
SAMPLES = tuple(SECONDS)


def seconds(samples: int, nodes: int) -> float | None:
    """The thesis's time for this cell; None when it has none (out of memory, or not in the table)."""
    return SECONDS.get(samples, {}).get(nodes)
