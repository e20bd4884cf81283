"""Tiny HAR-shaped data sets the training tests make themselves, and the tiny model that fits them."""

from pathlib import Path

import numpy as np
import pytest

from picluster.data.har.dataset import CACHE_NAME, HarData, checksum, save

TINY_MODEL = ["--model", "resbidir", "--layers", "1", "--residual", "1", "--hidden", "8", "--batch", "20", "--lr", "0.01"]
TINY_CONV = ["--model", "convlstm", "--layers", "1", "--conv-filters", "4", "--conv-pool", "8", "--rnn-hidden", "8",
             "--batch", "20", "--lr", "0.01"]


def write_tiny_har(folder: Path, n_train: int = 240, n_eval: int = 60, steps: int = 128, seed: int = 0) -> Path:
    """Six classes told apart by a per-class offset on one channel: a tiny LSTM learns it in a few epochs."""
    rng = np.random.default_rng(seed)
    arrays = {}
    for split, n in (("train", n_train), ("val", n_eval), ("test", n_eval)):
        y = np.arange(n) % 6
        x = rng.normal(0.0, 0.3, size=(n, steps, 9)).astype(np.float32)
        x[np.arange(n), :, y] += 2.0
        arrays[f"x_{split}"] = x
        arrays[f"y_{split}"] = y.astype(np.int64)
        # Two test volunteers: the first 12 test windows are volunteer 4's, the rest volunteer 2's.
        arrays[f"subject_{split}"] = np.full(n, {"train": 1, "val": 5, "test": 2}[split], np.int64)
        if split == "test":
            arrays["subject_test"][:12] = 4
    save(HarData(**arrays, source="tests", checksum=checksum(arrays)), folder / CACHE_NAME)
    return folder


def checkpointed_step(run_dir: Path) -> int:
    """The global step of the checkpoint a resume restores: the one the state file names.

    Not the newest *.index: a chief killed mid-save leaves files the state file does not name yet.
    """
    text = (run_dir / "checkpoints" / "checkpoint").read_text()
    line = next(ln for ln in text.splitlines() if ln.startswith("model_checkpoint_path:"))
    return int(line.split("-")[-1].rstrip('"'))


def error_line(err: str) -> str:
    """The one error line of a failed run (progress lines may precede it)."""
    lines = [ln for ln in err.splitlines() if ln.startswith("picluster: error:")]
    assert len(lines) == 1, err
    return lines[0]


@pytest.fixture
def tiny(tmp_path):
    """A tiny HAR data set (write_tiny_har) in the test's folder."""
    return write_tiny_har(tmp_path / "har")


def client_process(run_dir, task):
    """Worker ``task``'s training client for ``run_dir`` (a psutil.Process, not the tether it runs
    under, whose command line holds the client's), or None: its task is in the TF_CONFIG it got."""
    import json

    import psutil

    for proc in psutil.process_iter(["cmdline"]):
        cmd = proc.info["cmdline"] or []
        if "picluster.jobs.har.process" in cmd and "picluster.cluster.tether" not in cmd and str(run_dir) in cmd:
            try:
                spec = json.loads(proc.environ().get("TF_CONFIG", "{}"))
            except psutil.Error:
                continue
            if spec.get("task", {}).get("index") == task:
                return proc
    return None


def evaluator_process(run_dir):
    """The evaluator beside the coordinator for ``run_dir`` (a psutil.Process, not its tether), or None."""
    import psutil

    for proc in psutil.process_iter(["cmdline"]):
        cmd = proc.info["cmdline"] or []
        if "picluster.jobs.har.evaluator" in cmd and "picluster.cluster.tether" not in cmd and str(run_dir) in cmd:
            return proc
    return None


def relaunched(run: Path, proc, seen: set, timeout: float = 240) -> dict:
    """Wait for a new launch of an elastic run (one not in ``seen``, added to it) that restored a
    checkpoint and trained an epoch past it: the chief's resume note (mirrored back from a node),
    then a row written after it.  The note.  The last launch's own rows past the checkpoint stay
    until the new one writes those epochs again, so a row's number alone would not tell."""
    import json
    import time

    from picluster.jobs.har import metrics

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            note = json.loads((Path(run) / "resume.json").read_text())
        except (FileNotFoundError, ValueError):
            note = None
        if note and note["launch"] not in seen:
            rows = metrics.read_rows(Path(run) / "metrics.csv")
            if any(int(r["epoch"]) > note["epoch"] and float(r.get("time") or 0) > note["time"] for r in rows):
                seen.add(note["launch"])
                return note
        assert proc.poll() is None, proc.communicate()
        time.sleep(0.3)
    raise AssertionError(f"no new launch within {timeout} s")
