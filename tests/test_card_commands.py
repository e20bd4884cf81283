"""The commands the project is defined by, run exactly as written, and what they show.

    picluster provision                                  (tests/test_provision_lab.py, on test hosts)
    picluster run montecarlo --samples 1e8 --nodes 8
    picluster train har --layers 3

Each runs on the embedded local cluster with the card's own words intact; the training run is
shortened by options added after them.  None of them may show TensorFlow's start-up lines.
"""

import json
import re

import pytest

from picluster.util import tflog

from conftest import picluster
from train_fixtures import write_tiny_har

# What TensorFlow prints on every import and start when nothing keeps it off the terminal.
STARTUP = re.compile(r"absl::InitializeLog|oneDNN custom operations|^I\d{4} |cpu_feature_guard|To enable the following instructions", re.M)


def assert_quiet(result) -> None:
    shown = result.stdout + result.stderr
    assert not STARTUP.search(shown), shown[-3000:]
    assert "Traceback" not in shown, shown[-3000:]


@pytest.mark.e2e
def test_run_montecarlo_as_written(state):
    result = picluster("run", "montecarlo", "--samples", "1e8", "--nodes", "8")
    assert result.returncode == 0, result.stderr[-3000:]
    assert "Monte-Carlo pi on 8 node(s)" in result.stdout and "100,000,000 samples" in result.stdout
    estimate = float(re.search(r"estimate +([0-9.]+)", result.stdout).group(1))
    assert abs(estimate - 3.14159265) < 0.01  # 1e8 samples: one standard error is 1.6e-4
    assert_quiet(result)


@pytest.mark.e2e
def test_train_har_layers_3_as_written_trains_the_recipe(state, tmp_path):
    data = write_tiny_har(tmp_path / "har")
    run = tmp_path / "run"
    result = picluster("train", "har", "--layers", "3", "--epochs", "1", "--data-dir", data, "--run-dir", run)
    assert result.returncode == 0, result.stderr[-3000:]
    config = json.loads((run / "config.json").read_text())
    assert (config["model"], config["layers"], config["epochs"]) == ("convlstm", 3, 1)
    assert "convlstm: 3 convolutions x 64" in result.stdout + result.stderr
    # The report is the command's output (stdout: `train har > result.txt`); progress is on stderr.
    assert "selected on validation: epoch 1" in result.stdout and "selected on validation" not in result.stderr, result.stdout
    assert_quiet(result)


def test_import_tensorflow_drops_only_the_start_up_lines():
    shown = tflog.without_startup_lines(
        "WARNING: All log messages before absl::InitializeLog() is called are written to STDERR\n"
        "I0000 00:00:1795557850.485569    2094 port.cc:153] oneDNN custom operations are on. You may see ...\n"
        "I0000 00:00:1795558342.566397   13470 grpc_server_lib.cc:467] Started server with target: grpc://127.0.0.1:1\n"
        "I0000 00:00:1795558342.1 1 cpu_feature_guard.cc:210] This TensorFlow binary is optimized to use ...\n"
        "To enable the following instructions: AVX2 FMA, in other operations, rebuild TensorFlow ...\n"
        "W0000 00:00:1795558342.566397   13470 op_level_cost_estimator.cc:699] Error in PredictCost()\n"
        "E1124 22:03:01.000001   13470 grpc_server_lib.cc:1] could not bind\n"
        "/x/y.py:3: DeprecationWarning: a Python warning\n"
    )
    assert shown.splitlines() == [
        "W0000 00:00:1795558342.566397   13470 op_level_cost_estimator.cc:699] Error in PredictCost()",
        "E1124 22:03:01.000001   13470 grpc_server_lib.cc:1] could not bind",
        "/x/y.py:3: DeprecationWarning: a Python warning",
    ]


@pytest.mark.e2e
def test_a_tensorflow_import_on_a_terminal_process_shows_nothing_of_its_start(tmp_path):
    import subprocess
    import sys

    code = "from picluster.util.tflog import import_tensorflow; import sys; tf = import_tensorflow(); print('warn', file=sys.stderr); print(tf.__version__)"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    assert result.stderr == "warn\n"  # what the process itself writes after the import still reaches stderr
    assert result.stdout.startswith("2.")


def _inventory(path, name: str, third_octet: int):
    path.write_text(f'[cluster]\nname = "{name}"\nuser = "pi"\nnodes = "{name}[1-2]"\naddresses = "127.0.{third_octet}.[1-2]"\n')
    return path


def test_the_inventory_is_the_option_else_the_environment_else_picluster_toml_in_this_folder(tmp_path):
    """As Fabric finds fabfile.py in the folder it runs in; `inventory --ansible` connects to nothing."""
    import os

    here = _inventory(tmp_path / "picluster.toml", "here", 61)
    env_file = _inventory(tmp_path / "env.toml", "fromenv", 62)
    flag_file = _inventory(tmp_path / "flag.toml", "fromflag", 63)
    plain = {k: v for k, v in os.environ.items() if k != "PICLUSTER_INVENTORY"}

    found = picluster("inventory", "--ansible", env=plain, cwd=tmp_path)
    assert found.returncode == 0, found.stderr
    assert "here1" in found.stdout and "fromenv1" not in found.stdout
    assert found.stderr == "picluster: using the inventory ./picluster.toml in this folder (--inventory or PICLUSTER_INVENTORY chooses another)\n"

    by_env = picluster("inventory", "--ansible", env=plain | {"PICLUSTER_INVENTORY": str(env_file)}, cwd=tmp_path)
    assert "fromenv1" in by_env.stdout and "here1" not in by_env.stdout and by_env.stderr == ""
    by_flag = picluster("inventory", "--ansible", "-i", flag_file, env=plain | {"PICLUSTER_INVENTORY": str(env_file)}, cwd=tmp_path)
    assert "fromflag1" in by_flag.stdout and by_flag.stderr == ""

    here.unlink()
    missing = picluster("provision", env=plain, cwd=tmp_path)
    assert missing.returncode == 2
    assert missing.stderr == ("picluster: error: this command needs an inventory: pass --inventory FILE, set PICLUSTER_INVENTORY, "
                              "or run it in the folder that holds picluster.toml\n")
