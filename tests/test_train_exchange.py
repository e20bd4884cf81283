"""The fused exchange (jobs/har/fusion.py): the same training as variable by variable, in a few messages."""

import json
import sys
from pathlib import Path

import numpy as np
import pytest

from picluster.jobs.har.metrics import read_rows

from conftest import picluster
from train_fixtures import TINY_CONV, write_tiny_har

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

@pytest.mark.e2e
@pytest.mark.parametrize("mode", ["sync", "async"])
def test_a_fused_step_moves_a_few_tensors_where_variables_moved_dozens(mode):
    """Counted in the partition graphs TensorFlow ran for a real step of the default model."""
    from har_rpcs import measure

    per_variable = measure("variables", mode, 2, 1)
    fused = measure("fused", mode, 2, 1)
    assert per_variable["rpcs_per_worker_step"] >= 30, per_variable
    # one RunGraph on the ps; weights in, gradients out, the global step before and after (+1 async: the staleness read)
    assert fused["rpcs_per_worker_step"] <= 6, fused
    assert fused["chief_rpcs"] <= (10 if mode == "sync" else 6), fused  # sync's chief also takes the arrivals and hands out tokens


@pytest.mark.e2e
def test_a_16_bit_wire_carries_bfloat16_each_way():
    """The weights a worker reads and the gradients the ps receives are bfloat16 on the wire; only
    the step counters stay what they are."""
    from har_rpcs import measure

    plain, half = measure("fused", "sync", 2, 1), measure("fused", "sync", 2, 1, wire="bfloat16")
    assert "bfloat16" not in plain["remote_dtypes"] and plain["remote_dtypes"].get("float32", 0) >= 2, plain
    # A worker's step: the weights in and its gradients out, both bfloat16, in as many messages as before.
    assert half["remote_dtypes"].get("bfloat16", 0) >= 2 and "float32" not in half["remote_dtypes"], half
    assert half["rpcs_per_worker_step"] == plain["rpcs_per_worker_step"]


@pytest.mark.e2e
def test_a_16_bit_wire_trains_what_its_emulation_trains(state, tmp_path):
    """Sync over a bfloat16 wire, and the emulator of that cluster: the same numbers, row for row."""
    tiny = write_tiny_har(tmp_path / "har")
    rows, tests = [], []
    for where in (["--workers", "3"], ["--workers", "3", "--emulate"]):
        run_dir = tmp_path / where[-1]
        result = picluster("train", "har", "--data-dir", tiny, "--run-dir", run_dir, *TINY_CONV, "--epochs", "2", "--seed", "3",
                           "--wire", "bfloat16", *where, "--json", timeout=240)
        assert result.returncode == 0, result.stderr
        assert json.loads((run_dir / "config.json").read_text())["wire"] == "bfloat16"
        rows.append([(r["train_loss"], r["val_loss"], r["val_acc"]) for r in read_rows(run_dir / "metrics.csv")])
        tests.append(json.loads(result.stdout)["test_accuracy"])
    assert len(rows[0]) == 2 and rows[0] == rows[1] and tests[0] == tests[1]


@pytest.mark.e2e
def test_fused_and_per_variable_exchanges_train_the_same_numbers(state, tmp_path):
    """Sync, 2 workers, no dropout (its masks come from other random ops once the model is built
    twice): the same initial weights, the same averaged gradients, the same updates."""
    tiny = write_tiny_har(tmp_path / "har")
    columns = ("train_loss", "train_acc", "val_loss", "val_acc")
    runs = {}
    for exchange in ("fused", "variables"):
        run_dir = tmp_path / exchange
        result = picluster("train", "har", "--data-dir", tiny, "--run-dir", run_dir, *TINY_CONV, "--epochs", "2",
                           "--workers", "2", "--keep-prob", "1", "--seed", "5", "--exchange", exchange, "--json", timeout=240)
        assert result.returncode == 0, result.stderr
        assert json.loads(result.stdout)["test_accuracy"] > 0
        assert json.loads((run_dir / "config.json").read_text())["exchange"] == exchange
        runs[exchange] = np.array([[float(r[c]) for c in columns] for r in read_rows(run_dir / "metrics.csv")])
    assert runs["fused"].shape == (2, 4)
    np.testing.assert_allclose(runs["fused"], runs["variables"], rtol=1e-4, atol=1e-5)
