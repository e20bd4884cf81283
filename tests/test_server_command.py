"""The server's command line, built in one place (server.command) for the four ways a cluster
starts it, and read back by the server's own parser: a flag renamed on one side fails here."""

import shlex

import pytest

from picluster.cluster import server
from picluster.cluster.nodecluster import start_script
from picluster.model.clusterspec import from_inventory
from picluster.model.inventory import load_inventory

pytestmark = pytest.mark.unit


def parsed(argv: list[str]):
    assert argv[1:3] == ["-m", server.MODULE]
    return server.arguments().parse_args(argv[3:])


def test_each_kind_s_form_is_what_the_server_parses():
    one = parsed(server.command("py", cluster_file="/r/cluster.json", job="worker", task=2, threads=3,
                                ready_file="/r/worker-2.ready", parent=41))  # local.py
    assert (str(one.cluster_file), one.job, one.task, one.threads, str(one.ready_file), one.parent, one.all) == \
        ("/r/cluster.json", "worker", 2, 3, "/r/worker-2.ready", 41, False)
    every = parsed(server.command("py", cluster_file="/r/cluster.json", every=True, threads=2, ready_dir="/r", parent=41))  # inprocess.py
    assert (every.all, every.job, every.task, str(every.ready_dir), every.threads) == (True, None, None, "/r", 2)
    slurm = parsed(server.command("py", layout='{"tasks": []}', slurm_node=True))  # allocation.py
    assert (slurm.slurm_node, slurm.layout, slurm.cluster_file, slurm.threads) == (True, '{"tasks": []}', None, 0)
    door = parsed(server.command("py", cluster_file="c", job="worker", task=0, ready_file="r", door="/d/worker-0.door",
                                 share="/mnt/picluster"))
    assert (str(door.door), door.parent, door.share) == ("/d/worker-0.door", None, "/mnt/picluster")


def test_a_node_s_start_script_runs_that_command_line(tmp_path):
    """nodecluster.py writes it as shell words: what the node's shell splits is what the server parses."""
    inv_path = tmp_path / "picluster.toml"
    inv_path.write_text('[cluster]\nname = "t"\nuser = "pi"\nnodes = "node[01-02]"\naddresses = "127.0.1.[1-2]"\n\n'
                        '[roles]\nps = "node01"\nworker = "node[01-02]"\nnfs_master = "node01"\n')
    inv = load_inventory(inv_path)
    node = inv.node("node02")
    script = start_script(inv, node, [t for t in from_inventory(inv).tasks if t.node == "node02"])
    line = next(ln for ln in script.splitlines() if f"-m {server.MODULE}" in ln)
    started = shlex.split(line.split("sh -c ", 1)[1])[0]  # the watcher's script, as sh gets it
    words = shlex.split(started.split(" & ", 1)[0])
    args = parsed(words)
    assert (args.job, args.task, str(args.cluster_file).endswith("/cluster.json")) == ("worker", 1, True)
    assert str(args.door).endswith("worker-1.door") and str(args.ready_file).endswith("worker-1.ready")
    assert args.share == "/mnt/picluster"  # read ahead once it serves: the share as the inventory mounts it
    ps_line = next(ln for ln in start_script(inv, inv.node("node01"), [from_inventory(inv).task("ps", 0)]).splitlines()
                   if f"-m {server.MODULE}" in ln)
    assert "--share" not in ps_line and "--door" not in ps_line  # a ps runs no jobs: nothing to read
