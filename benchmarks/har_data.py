"""HAR data benchmark: preparing from the HAPT package, and loading the cached .npz.

    .venv/bin/python benchmarks/har_data.py            # timings (targets: < 60 s and < 2 s)
    .venv/bin/python benchmarks/har_data.py --filters  # also the median-length / gravity-order study

Runs in a temporary folder; nothing is left behind.
"""

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from rich.console import Console
from rich.table import Table

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from picluster.data.har import hapt, reconstruct
from picluster.data.har.dataset import HAPT, cache_path, from_train_test, load, save
from picluster.data.har.spec import TEST_SUBJECTS


def timings(console: Console, repeats: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = cache_path(Path(tmp))
        t0 = time.perf_counter()
        recordings = hapt.read_recordings()
        t1 = time.perf_counter()
        windows = reconstruct.reconstruct(recordings)
        t2 = time.perf_counter()
        data = from_train_test(windows.without_subjects(TEST_SUBJECTS), windows.of_subjects(TEST_SUBJECTS), HAPT)
        save(data, path)
        t3 = time.perf_counter()
        loads = []
        for _ in range(repeats):
            start = time.perf_counter()
            load(path)
            loads.append(time.perf_counter() - start)
        # A fresh interpreter, as a training process would: imports + load + checksum.
        code = f"from picluster.data.har import load_har; load_har({str(Path(tmp))!r})"
        start = time.perf_counter()
        subprocess.run([sys.executable, "-c", code], check=True, cwd=Path(__file__).resolve().parents[1])
        cold = time.perf_counter() - start
        size = path.stat().st_size

    inflate_s, scan_s, unpickle_s = unpickle_split(repeats)

    table = Table(title="HAR data (HAPT source)", title_justify="left")
    table.add_column("step")
    table.add_column("seconds", justify="right")
    table.add_row("read HAPT.pkl.gz (gunzip + restricted unpickle)", f"{t1 - t0:.2f}")
    table.add_row(f"  of which gunzip, median of {repeats}", f"{inflate_s:.2f}")
    table.add_row(f"  of which the opcode pre-scan (depth, size, work bounds), median of {repeats}", f"{scan_s:.2f}")
    table.add_row(f"  of which the restricted unpickle itself, median of {repeats}", f"{unpickle_s:.2f}")
    table.add_row(f"filter + window {len(recordings)} recordings", f"{t2 - t1:.2f}")
    table.add_row("split + checksum + write .npz", f"{t3 - t2:.2f}")
    table.add_row("prepare total (target < 60 s)", f"{t3 - t0:.2f}", end_section=True)
    table.add_row(f"load cached .npz, median of {repeats} (target < 2 s)", f"{statistics.median(loads):.2f}")
    table.add_row("load in a fresh interpreter (with imports)", f"{cold:.2f}")
    console.print(table)
    console.print(f"{len(windows)} windows, cache {size / 2**20:.1f} MiB")


def unpickle_split(repeats: int) -> tuple[float, float, float]:
    """Medians of gunzip, the pre-scan that bounds the pickle, and the restricted load, side by side."""
    import io

    from picluster.data.har import prescan
    from picluster.data.har.unpickle import RestrictedUnpickler

    inflate, scan, load_ = [], [], []
    for _ in range(repeats):
        t0 = time.perf_counter()
        data = hapt._inflate(hapt.package_file())
        t1 = time.perf_counter()
        prescan.check(data)
        t2 = time.perf_counter()
        RestrictedUnpickler(io.BytesIO(data)).load()
        t3 = time.perf_counter()
        inflate.append(t1 - t0)
        scan.append(t2 - t1)
        load_.append(t3 - t2)
    return statistics.median(inflate), statistics.median(scan), statistics.median(load_)


def _rms(a: np.ndarray) -> float:
    return float(np.sqrt(np.mean(a**2)))


def _swing(a: np.ndarray) -> float:
    return float((a.max(axis=1) - a.min(axis=1)).mean())


def filter_study(console: Console) -> None:
    """Signal statistics for each median length and gravity order (window counts do not depend on them)."""
    recordings = hapt.read_recordings()
    table = Table(title="Filter choices (mean over windows)", title_justify="left")
    for name in ("median", "gravity order", "walk body_acc RMS", "still body_acc RMS", "walk |g| swing", "still |g| swing", "walk body_acc |mean|"):
        table.add_column(name, justify="right")
    choices = [(m, reconstruct.GRAVITY_ORDER) for m in (1, 3, 5, 7)] + [
        (reconstruct.MEDIAN_LENGTH, o) for o in (1, 2, 4, 5)
    ]
    for median, order in sorted(set(choices)):
        w = reconstruct.reconstruct(recordings, median, order)
        body, total = w.x[..., 0:3].astype(np.float64), w.x[..., 6:9].astype(np.float64)
        g = np.linalg.norm(total - body, axis=2)
        walk, still = w.y < 3, w.y >= 3
        chosen = (median, order) == (reconstruct.MEDIAN_LENGTH, reconstruct.GRAVITY_ORDER)
        table.add_row(
            f"{median}{' *' if chosen else ''}", str(order),
            f"{_rms(body[walk]):.4f}", f"{_rms(body[still]):.4f}",
            f"{_swing(g[walk]):.4f}", f"{_swing(g[still]):.4f}",
            f"{float(np.abs(body[walk].mean(axis=1)).mean()):.4f}",
        )
    console.print(table)
    console.print("* chosen.  |g| swing: max - min of the gravity magnitude within a window, in g.")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=5, help="cached loads to time")
    parser.add_argument("--filters", action="store_true", help="also compare median lengths and gravity orders")
    args = parser.parse_args()
    console = Console()
    timings(console, args.repeats)
    if args.filters:
        filter_study(console)


if __name__ == "__main__":
    main()
