"""Bad input: one line on stderr, exit code 2, no traceback, no servers left."""

import json

import pytest

from conftest import picluster, server_processes

BAD_RUN_ARGS = [
    ["--samples", "abc"],
    ["--samples", "0"],
    ["--samples", "-5"],
    ["--samples", "1.5"],
    ["--samples", "1e30"],
    ["--samples", "nan"],
    ["--nodes", "0"],
    ["--nodes", "-1"],
    ["--nodes", "65"],
    ["--seed", "x"],
    ["--sweep", "1e7,,2e7"],
    ["--nodes-list", "1,2"],
    ["--sweep", "1e7", "--csv", "/nonexistent-dir/out.csv"],
    ["--bogus"],
]


def assert_one_line_usage_error(result):
    assert result.returncode == 2, (result.returncode, result.stderr)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("picluster: error: ")
    assert "Traceback" not in result.stderr


@pytest.mark.parametrize("args", BAD_RUN_ARGS, ids=" ".join)
def test_bad_run_arguments(state, args):
    result = picluster("run", "montecarlo", *args, timeout=60)
    assert_one_line_usage_error(result)
    assert not state.exists() or not server_processes(state)


def test_messages_name_the_problem(state):
    assert "not a whole number" in picluster("run", "montecarlo", "--samples", "1.5").stderr
    assert "above the maximum" in picluster("run", "montecarlo", "--samples", "1e30").stderr
    assert "'--nodes'" in picluster("run", "montecarlo", "--nodes", "0").stderr


@pytest.mark.parametrize("content,fragment", [
    (None, "no such file"),
    ("[cluster\n", "invalid TOML"),
    ('[cluster]\nname="c"\nuser="pi"\nnodes="n[1-2]"\naddresses="10.9.0.[1-2]"\nfoo=1\n', "unknown key 'foo'"),
    ('[cluster]\nname="c"\nuser="pi"\nnodes="n[1-2]"\naddresses="10.9.0.[1-2]"\n', "--nodes 3 is more than the 2 nodes with a TensorFlow server"),
])
def test_bad_or_too_small_inventory(state, tmp_path, content, fragment):
    path = tmp_path / "picluster.toml"
    if content is not None:
        path.write_text(content)
    result = picluster("run", "montecarlo", "--inventory", path, "--nodes", "3", timeout=60)
    assert_one_line_usage_error(result)
    assert fragment in result.stderr


def test_inventory_directory_and_env_variable(state, tmp_path, monkeypatch):
    result = picluster("run", "montecarlo", "--inventory", tmp_path)
    assert_one_line_usage_error(result)
    monkeypatch.setenv("PICLUSTER_INVENTORY", str(tmp_path / "nope.toml"))
    result = picluster("cluster", "status")
    assert_one_line_usage_error(result)
    assert result.stderr == f"picluster: error: PICLUSTER_INVENTORY names {tmp_path / 'nope.toml'}: no such file (point it at your picluster.toml, or unset it)\n"


def test_help_is_not_an_error():
    result = picluster("run", "montecarlo", "--help")
    assert result.returncode == 0 and "--samples" in result.stdout


@pytest.mark.parametrize("group", [(), ("cluster",), ("run",), ("train",), ("data",), ("nodes",), ("lab",)])
def test_picluster_or_a_group_typed_alone_shows_its_help_with_whole_summaries(group):
    """What a newcomer types first: the help, on stdout, exit 0; each command's summary whole."""
    result = picluster(*group)
    assert result.returncode == 0 and result.stderr == "", result.stderr
    assert result.stdout.startswith(" ".join(["Usage: picluster", *group, "[OPTIONS] COMMAND [ARGS]..."]) + "\n"), result.stdout
    listed = result.stdout.split("\nCommands:\n")[1]
    assert "..." not in listed, listed
    if not group:  # a summary click would cut at the terminal's width, whole
        assert ("cancel Stop jobs: SIGTERM to picluster's own (SIGKILL after their grace period; nothing is left running), "
                "scancel for Slurm's (slurm:ID), pending or running.") in " ".join(listed.split())


_TASK = {"job": "worker", "index": 0, "node": "localhost", "host": "127.0.0.1", "port": 2222}


def _state(task=None, **top) -> str:
    return json.dumps({"layout": [{**_TASK, **(task or {})}], "pids": {}, "temporary": False, "agent_port": None, **top})


@pytest.mark.parametrize("text", [
    pytest.param("[" * 100_000 + "]" * 100_000, id="nested-100000-deep"),  # its own id would be too long for an env var
    '{"layout": {"ps": []}, "pids": 7}', "[]",
    # the right shape, values of the wrong type: each named, not a traceback deep in cluster status
    _state({"index": "a"}), _state({"node": 5}), _state({"host": None}), _state({"port": 70000}), _state({"job": "chief"}),
    _state(pids={"worker:0": "123"}), _state(pids={"worker:0": True}), _state(agent_port="x"), _state(temporary="no"),
    _state({"extra": 1}),
])
def test_a_damaged_local_cluster_state_is_one_line(state, text):
    """The state directory is ours, but whatever is in it must not become a traceback (a deep
    nesting was a RecursionError from json)."""
    (state / "local").mkdir(parents=True)
    (state / "local" / "cluster.json").write_text(text)
    result = picluster("cluster", "status", timeout=60)
    assert result.returncode == 1 and "Traceback" not in result.stderr, result.stderr[-2000:]
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "cluster.json is damaged" in lines[0] and f"remove {state / 'local'}" in lines[0], lines


@pytest.mark.parametrize("command, meaning", [(("data", "har"), "holds the data set"), (("jobs",), "queue's jobs"),
                                              (("logs",), "queue's jobs"), (("cancel",), "queue's jobs"),
                                              (("run", "montecarlo"), "embedded local cluster")])
def test_the_inventory_option_says_what_it_means_for_each_command(command, meaning):
    shown = " ".join(picluster(*command, "--help").stdout.split())
    assert meaning in shown, shown
    assert ("embedded local cluster" in shown) == (command[0] == "run"), shown
