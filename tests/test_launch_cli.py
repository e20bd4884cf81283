"""picluster launch / jobs / logs / cancel through the real CLI: bad input, before any cluster is needed."""

import psutil
import pytest

from conftest import picluster


def _one_error_line(result, code):
    assert result.returncode == code, (result.returncode, result.stdout, result.stderr)
    lines = [ln for ln in result.stderr.strip().splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("picluster: error: "), result.stderr
    assert "Traceback" not in result.stderr
    return lines[0]


def _tethers(state) -> list[psutil.Process]:
    found = []
    for proc in psutil.process_iter(["cmdline", "environ"]):
        cmd, env = proc.info["cmdline"] or [], proc.info["environ"] or {}
        # Only this test's: other runs on the machine (another checkout's suite) have their own state dir.
        if "picluster.cluster.tether" in cmd and env.get("PICLUSTER_STATE_DIR") == str(state):
            found.append(proc)
    return found


@pytest.fixture
def script(tmp_path):
    path = tmp_path / "train.py"
    path.write_text("print('hi')\n")
    return path


@pytest.mark.parametrize("args, code, says", [
    (["launch", "missing.py"], 2, "SCRIPT missing.py: no such file"),
    (["launch", "--mode", "every-node", "{script}"], 2, "'every-node' is not one of 'coordinator', 'each-worker'"),
    (["launch", "--dir", "{dir}", "{script}"], 2, "--dir goes with --mode each-worker"),
    (["launch", "--restart-limit", "-1", "{script}"], 2, "--restart-limit"),
    (["launch"], 2, "Missing argument 'SCRIPT'"),
    (["logs", "99"], 2, "no job 99"),
    (["cancel", "99"], 2, "no job 99"),
    (["jobs", "0"], 2, "0 is below the minimum 1"),
])
def test_bad_input_is_one_line(state, script, args, code, says):
    args = [a.format(script=script, dir=script.parent) for a in args]
    line = _one_error_line(picluster(*args, timeout=60), code)
    assert says in line


def test_a_syntax_error_is_named_with_its_line_before_anything_starts(state, tmp_path):
    bad = tmp_path / "bad.py"
    bad.write_text("import tensorflow as tf\n\nfor i in range(3)\n    print(i)\n")
    line = _one_error_line(picluster("launch", bad, timeout=60), 2)
    assert f"{bad}:3: SyntaxError: expected ':'" in line
    assert "no jobs yet" in picluster("jobs").stdout  # rejected before a job existed


def test_no_running_cluster_is_one_line_and_leaves_nothing(state, script):
    line = _one_error_line(picluster("launch", script, timeout=60), 1)
    assert "no local cluster is running" in line and "picluster cluster up" in line
    assert _tethers(state) == []
    assert "no jobs yet" in picluster("jobs").stdout  # no cluster, no job
