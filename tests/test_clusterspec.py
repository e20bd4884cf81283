import json

import pytest

from picluster.model.clusterspec import Layout, from_inventory, local_layout, resolve_tasks
from picluster.model.inventory import parse_inventory
from picluster.util.errors import UsageError


def inventory(ps="node01", worker="node[02-04]"):
    return parse_inventory({
        "cluster": {"name": "c", "user": "pi", "nodes": "node[01-04]", "addresses": "10.1.0.[11-14]", "tf_port": 2222},
        "roles": {"ps": ps, "worker": worker},
    })


def test_cluster_spec_from_inventory():
    layout = from_inventory(inventory())
    assert layout.cluster_dict() == {
        "ps": ["10.1.0.11:2222"],
        "worker": ["10.1.0.12:2222", "10.1.0.13:2222", "10.1.0.14:2222"],
    }
    assert [t.node for t in layout.workers] == ["node02", "node03", "node04"]


def test_node_with_ps_and_worker_gets_two_ports():
    layout = from_inventory(inventory(ps="node01", worker="node[01-04]"))
    assert layout.task("ps", 0).address == "10.1.0.11:2222"
    assert layout.task("worker", 0).address == "10.1.0.11:2223"


def test_one_server_per_node_adds_the_ps_of_a_node_without_a_worker():
    """What Monte-Carlo's --nodes counts: eight Pis with the default roles are eight nodes, not 7."""
    default = from_inventory(inventory())
    assert [t.label for t in default.one_per_node()] == ["worker:0", "worker:1", "worker:2", "ps:0"]
    assert [t.node for t in default.one_per_node()] == ["node02", "node03", "node04", "node01"]
    both = from_inventory(inventory(ps="node01", worker="node[01-04]"))  # node01's worker stands for it
    assert [t.label for t in both.one_per_node()] == ["worker:0", "worker:1", "worker:2", "worker:3"]
    two_ps = from_inventory(inventory(ps="node[01-02]", worker="node[03-04]"))
    assert [t.node for t in two_ps.one_per_node()] == ["node03", "node04", "node01", "node02"]
    local = local_layout([2222], [2223, 2224])  # one machine: its worker tasks stand in for nodes
    assert [t.label for t in local.one_per_node()] == ["worker:0", "worker:1"]


def test_tf_config():
    layout = from_inventory(inventory())
    config = json.loads(layout.tf_config("worker", 2))
    assert config["task"] == {"type": "worker", "index": 2}
    assert config["cluster"]["worker"][2] == "10.1.0.14:2222"
    with pytest.raises(UsageError, match="no task worker:3"):
        layout.tf_config("worker", 3)


def test_role_from_address_or_flags():
    layout = from_inventory(inventory())
    assert [t.label for t in resolve_tasks(layout, None, None, ["127.0.0.1", "10.1.0.13"])] == ["worker:1"]
    assert [t.label for t in resolve_tasks(layout, "ps", 0, [])] == ["ps:0"]
    with pytest.raises(UsageError, match="none of this machine's addresses"):
        resolve_tasks(layout, None, None, ["127.0.0.1"])
    with pytest.raises(UsageError, match="together"):
        resolve_tasks(layout, "ps", None, [])


def test_local_layout_and_json_round_trip():
    layout = local_layout([5000], [5001, 5002])
    assert layout.cluster_dict() == {"ps": ["127.0.0.1:5000"], "worker": ["127.0.0.1:5001", "127.0.0.1:5002"]}
    assert Layout.from_json(json.loads(json.dumps(layout.to_json()))) == layout
    assert "ps" not in local_layout([], [5001]).cluster_dict()
