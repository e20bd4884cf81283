"""`picluster plot`: real figures rendered to files, checked as valid PNG and SVG holding the expected series."""

import csv
import itertools
import math
import os
import re
import struct
import sys
import time
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from picluster.cluster.base import Agent
from picluster.monitor.poll import Monitor
from picluster.monitor.record import COLUMNS, Recorder

from conftest import one_line, picluster

SVG = "{http://www.w3.org/2000/svg}"


def write_csv(path: Path, header: list[str], rows: list[list]) -> Path:
    with open(path, "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(header)
        writer.writerows(rows)
    return path


def png_size(path: Path) -> tuple[int, int]:
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and data[12:16] == b"IHDR", f"{path} is not a PNG"
    return struct.unpack(">II", data[16:24])


def svg(path: Path) -> tuple[dict[str, ET.Element], str]:
    """Elements by id, and all the text, of an SVG file (which must parse)."""
    root = ET.parse(path).getroot()
    assert root.tag == f"{SVG}svg"
    ids = {el.get("id"): el for el in root.iter() if el.get("id")}
    text = " ".join("".join(el.itertext()) for el in root.iter(f"{SVG}text"))
    return ids, text


def points(group: ET.Element) -> list[tuple[float, float]]:
    """The (x, y) display coordinates of the line drawn in a gid group."""
    path = next(group.iter(f"{SVG}path"))
    numbers = [float(n) for n in re.findall(r"-?[\d.]+(?:e-?\d+)?", path.get("d", ""))]
    return list(zip(numbers[::2], numbers[1::2]))


def height_at(line: list[tuple[float, float]], x: float) -> float:
    """The line's y where it crosses x (between its two nearest vertices)."""
    for (x0, y0), (x1, y1) in itertools.pairwise(line):
        if min(x0, x1) <= x <= max(x0, x1):
            return y0 if x1 == x0 else y0 + (y1 - y0) * (x - x0) / (x1 - x0)
    raise AssertionError(f"the line does not reach x={x}")


def vertices(group: ET.Element) -> int:
    """Points of the line drawn in a gid group (its path: M x y L x y ...)."""
    path = next(group.iter(f"{SVG}path"))
    return len(re.findall(r"[ML]", path.get("d", "")))


SWEEP_ROWS = [[s, n, t] for s, times in ((10**7, (0.9, 0.8, 1.2)), (5 * 10**7, (4.0, 2.2, 1.6)), (10**8, (8.0, 4.1, 2.5)))
              for n, t in zip((1, 2, 4), times)]


def test_sweep_csv_gives_the_thesis_figure_and_speedup(tmp_path):
    source = write_csv(tmp_path / "sweep.csv", ["samples", "nodes", "seconds", "samples_per_s"],
                       [r + [r[0] / r[2]] for r in SWEEP_ROWS])
    out = tmp_path / "figures"
    result = picluster("plot", source, "--out", out)
    assert result.returncode == 0, result.stderr
    names = sorted(p.name for p in out.iterdir())
    assert names == ["sweep-speedup.png", "sweep-speedup.svg", "sweep-time.png", "sweep-time.svg"]
    assert all(str(out / n) in result.stdout for n in names)
    width, height = png_size(out / "sweep-time.png")
    assert width > 600 and height > 400
    ids, text = svg(out / "sweep-time.svg")
    for n in (1, 2, 4):
        assert vertices(ids[f"ours-{n}"]) == 3  # three sample counts each
        assert f"thesis-{n}" in ids  # the thesis's Table 5 beside ours
    assert vertices(ids["thesis-1"]) == 6  # one Pi: 1e7..6e7, out of memory above
    assert vertices(ids["thesis-2"]) == 10
    assert "thesis, 4 nodes" in text and "samples" in text
    ids, text = svg(out / "sweep-speedup.svg")
    assert {"ours-1e+07", "ours-1e+08", "thesis-1e+07", "linear"} <= set(ids)
    assert "thesis-1e+08" not in ids  # the thesis has no one-node time for 1e8
    assert vertices(ids["ours-1e+08"]) == 3 and "speedup" in text


def test_run_directory_gives_curves_epoch_times_and_the_nodes_timeline(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    write_csv(run / "metrics.csv", ["epoch", "train_loss", "train_acc", "val_loss", "val_acc", "input_s", "compute_s", "exchange_s"],
              [[e, 1.5 / e, 0.5 + e / 10, 1.2 / e, 0.45 + e / 10, 0.01, 3.0, 1.0] for e in range(1, 5)])
    write_csv(run / "nodes.csv", list(COLUMNS),
              [[1000 + t, node, 50 + t, 0.5, 600e6 + t * 1e6, 2**30] for t in range(5) for node in ("node01", "node02")])
    result = picluster("plot", run)
    assert result.returncode == 0, result.stderr
    out = run / "plots"
    assert sorted(p.name for p in out.iterdir()) == sorted(
        f"{n}.{f}" for n in ("har-curves", "har-epoch-time", "nodes") for f in ("png", "svg"))
    for png in out.glob("*.png"):
        png_size(png)
    ids, text = svg(out / "har-curves.svg")
    assert all(vertices(ids[k]) == 4 for k in ("train_acc", "val_acc", "train_loss", "val_loss"))
    assert "validation" in text and "test" not in text.lower()
    ids, _ = svg(out / "har-epoch-time.svg")
    assert {f"{part}_s-{e}" for part in ("input", "compute", "exchange") for e in range(1, 5)} <= set(ids)
    ids, text = svg(out / "nodes.svg")
    assert vertices(ids["cpu-node01"]) == 5 and vertices(ids["memory-node02"]) == 5
    assert "memory-limit" in ids and "1024 MiB" in text


def test_scaling_csv_gives_speedup_and_efficiency(tmp_path):
    source = write_csv(tmp_path / "har_scaling.csv", ["mode", "workers", "s_per_epoch", "time_to_90_s"],
                       [["sync", 1, 40, 600], ["sync", 2, 22, 330], ["sync", 4, 13, ""], ["async", 1, 40, 600], ["async", 2, 21, ""]])
    result = picluster("plot", source, "--format", "svg")
    assert result.returncode == 0, result.stderr
    assert not (tmp_path / "har_scaling.png").exists()
    ids, text = svg(tmp_path / "har_scaling.svg")
    assert vertices(ids["speedup-sync"]) == 3 and vertices(ids["efficiency-async"]) == 2
    assert "efficiency" in text


def test_scaling_figure_draws_linear_where_it_is_and_keeps_efficiency_above_100_percent(tmp_path):
    # async 2 workers exactly linear (2.0x), async 4 above it (4.9x: 122 %); sync 8 is the other mode.
    source = write_csv(tmp_path / "har_scaling.csv", ["mode", "workers", "s_per_epoch", "time_to_90_s"],
                       [["async", 1, 44, ""], ["async", 2, 22, ""], ["async", 4, 9, ""], ["sync", 1, 44, ""], ["sync", 8, 11, ""]])
    assert picluster("plot", source, "--format", "svg").returncode == 0
    ids, _ = svg(tmp_path / "har_scaling.svg")
    _, (x2, y2), _ = points(ids["speedup-async"])
    assert height_at(points(ids["linear"]), x2) == pytest.approx(y2, abs=0.5)  # 2 workers, 2x: on the line
    _, _, (_, best) = points(ids["efficiency-async"])
    axes_top = min(y for _, y in points(ids["axes_2"]))  # the efficiency panel's frame (SVG y grows downwards)
    assert best > axes_top  # 122 % is drawn inside the panel, not cut off above it


@pytest.mark.parametrize(("make", "args", "words"), [
    (lambda d: write_csv(d / "x.csv", ["a", "b"], [[1, 2]]), [], "not a sweep CSV"),
    (lambda d: write_csv(d / "x.csv", ["samples", "nodes", "seconds"], [[1e7, 1, "fast"]]), [], "line 2: seconds 'fast' is not a number"),
    (lambda d: write_csv(d / "x.csv", ["samples", "nodes", "seconds"], [[1e7, 1, "inf"]]), [], "not a finite number"),
    (lambda d: write_csv(d / "x.csv", ["samples", "nodes", "seconds"], []), [], "no rows to plot"),
    (lambda d: d / "missing.csv", [], "no such file or directory"),
    (lambda d: d, [], "no metrics.csv or nodes.csv"),
    (lambda d: write_csv(d / "x.csv", ["samples", "nodes", "seconds"], [[1e7, 1, 1.0]]), ["--format", "gif"], "--format 'gif'"),
    # A time of 0 divided the speedup by zero after the time figure was written; negative ones were drawn.
    (lambda d: write_csv(d / "x.csv", ["samples", "nodes", "seconds"], [[1e7, 1, 2.0], [1e7, 2, 0]]), [],
     "x.csv, line 3: seconds '0' is out of range"),
    (lambda d: write_csv(d / "x.csv", ["samples", "nodes", "seconds"], [[1e7, 1, -2.0]]), [], "line 2: seconds '-2.0' is out of range"),
    (lambda d: write_csv(d / "x.csv", ["samples", "nodes", "seconds"], [[1e7, 1.5, 2.0]]), [], "nodes '1.5' is not a whole number"),
    (lambda d: write_csv(d / "s.csv", ["mode", "workers", "s_per_epoch"], [["async", 1, 4], ["async", 1.5, 2]]), [],
     "s.csv, line 3: workers '1.5' is not a whole number"),
    (lambda d: write_csv(d / "s.csv", ["mode", "workers", "s_per_epoch"], [["async", 0, 4]]), [], "workers '0' is out of range"),
    (lambda d: write_csv(d / "s.csv", ["mode", "workers", "s_per_epoch"], [["", 1, 4]]), [], "mode is blank"),
    (lambda d: write_csv(d / "x.csv", ["samples", "nodes", "seconds"], [[1e7, 1, 1.0]]), ["--title", "cost $$"],
     "--title 'cost $$': not valid math text"),
    (lambda d: write_csv(d / "x.csv", ["samples", "nodes", "seconds"], [[1e7, 1, 1.0]]), ["--title", r"$\frac$"], "not valid math text"),
    (lambda d: _run_with_a_bad_timeline(d), [], "nodes.csv, line 3: cpu_percent '-5' is out of range"),
])
def test_bad_sources_are_one_line_exit_2_and_nothing_is_written(tmp_path, make, args, words):
    source = make(tmp_path)
    out = tmp_path / "out"
    result = picluster("plot", source, "--out", out, *args)
    assert result.returncode == 2, result.stderr
    assert len(result.stderr.strip().splitlines()) == 1 and words in result.stderr, result.stderr
    assert not out.exists()


def _run_with_a_bad_timeline(d: Path) -> Path:
    """A run whose metrics.csv is good and whose nodes.csv is not: its curves were written before."""
    run = d / "run"
    run.mkdir()
    write_csv(run / "metrics.csv", ["epoch", "train_acc", "val_acc", "train_loss", "val_loss"], [[1, 0.5, 0.5, 1.0, 1.0]])
    write_csv(run / "nodes.csv", ["time", "node", "cpu_percent", "memory_used", "memory_total"],
              [[1.0, "n1", 5, 10, 100], [2.0, "n1", -5, 10, 100]])
    return run


@pytest.mark.parametrize("out, code, words", [
    (lambda d: Path("/dev/full"), 2, "/dev/full is not a directory"),
    (lambda d: write_csv(d / "afile", ["a"], []) / "figs", 2, "afile is not a directory"),
    (lambda d: Path("/sys/picluster-figures"), 1, "cannot write /sys/picluster-figures: "),  # even root (EPERM; others EACCES)
])
def test_an_out_that_cannot_be_a_folder_is_one_line(tmp_path, out, code, words):
    source = write_csv(tmp_path / "x.csv", ["samples", "nodes", "seconds"], [[1e7, 1, 1.0]])
    result = picluster("plot", source, "--out", out(tmp_path))
    one_line(result, code, words)


@pytest.mark.lab  # small_disk: a tmpfs mount, root
def test_a_disk_full_after_the_first_figure_leaves_none(tmp_path, small_disk):
    source = write_csv(tmp_path / "x.csv", ["samples", "nodes", "seconds"], [[1e7, 1, 2.0], [1e7, 2, 1.0]])
    probe = tmp_path / "probe"
    assert picluster("plot", source, "--out", probe, "--format", "png").returncode == 0
    first, second = (probe / "x-time.png").stat().st_size, (probe / "x-speedup.png").stat().st_size
    assert second > 3 * 4096, "the test needs figures larger than a few pages"
    out = small_disk.path / "figs"
    out.mkdir()
    small_disk.fill()
    os.truncate(small_disk.path / ".filler", (small_disk.path / ".filler").stat().st_size - first - 2 * 4096)
    result = picluster("plot", source, "--out", out, "--format", "png")
    one_line(result, 1, "No space left on device")
    assert list(out.iterdir()) == []  # neither the first figure nor a part of the second


@given(cells=st.lists(st.tuples(st.text(max_size=12), st.text(max_size=12), st.text(max_size=12)), min_size=1, max_size=6))
def test_any_cell_is_drawn_only_if_it_is_a_sane_value(cells):
    """Property: whatever a sweep CSV's cells hold, checking gives numbers in range or a UsageError naming the line."""
    from picluster.plots import sources
    from picluster.util.errors import UsageError

    rows = [dict(zip(("samples", "nodes", "seconds"), c)) for c in cells]
    try:
        checked = sources._check(Path("x.csv"), rows, {"samples", "nodes", "seconds"})
    except UsageError as exc:
        assert str(exc).startswith("x.csv, line ") and "\n" not in str(exc)
        return
    for row in checked:
        assert isinstance(row["samples"], int) and row["samples"] >= 1 and isinstance(row["nodes"], int) and row["nodes"] >= 1
        assert row["seconds"] is None or (math.isfinite(row["seconds"]) and row["seconds"] > 0)


@pytest.mark.e2e
def test_recorder_writes_each_nodes_cpu_and_memory_from_a_real_agent(tmp_path):
    import socket
    import subprocess

    from picluster.monitor.agent import read_meminfo

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    ready = tmp_path / "agent.ready"
    agent = subprocess.Popen([sys.executable, "-m", "picluster.monitor.agent", "--addr", "127.0.0.1", "--port", str(port),
                              "--node", "node01", "--ready-file", str(ready)])
    try:
        deadline = time.monotonic() + 30
        while not ready.exists():
            assert time.monotonic() < deadline and agent.poll() is None, "the agent did not start"
            time.sleep(0.1)
        path = tmp_path / "run" / "nodes.csv"
        with Recorder(Monitor([Agent("node01", ("worker",), "127.0.0.1", port)], "test"), path, period=0.3):
            time.sleep(2.0)
    finally:
        agent.kill()
        agent.wait()
    with open(path, newline="") as f:
        rows = list(csv.DictReader(f))
    assert len(rows) >= 3 and {r["node"] for r in rows} == {"node01"}
    assert all(0 <= float(r["cpu_percent"]) <= 100 for r in rows)
    assert {int(r["memory_total"]) for r in rows} == {read_meminfo()["MemTotal"]}
    times = [float(r["time"]) for r in rows]
    assert times == sorted(times)
