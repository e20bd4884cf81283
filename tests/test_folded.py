"""`picluster exec`'s two views of the nodes' outputs: each line after its node's name (clush's
default) and folded by node set (clush -b); the command on real hosts: tests/test_exec_lab.py."""

from picluster.views.folded import exit_lines, folded, prefixed


def test_each_line_after_its_nodes_name_and_no_output_shows_nothing():
    assert prefixed("node03", "up 2 days\nload 0.1\n") == ["node03: up 2 days", "node03: load 0.1"]
    assert prefixed("node03", "") == [] and prefixed("node03", "\n") == []
    assert prefixed("node03", "\nafter a blank line") == ["node03: ", "node03: after a blank line"]


def test_the_same_output_folds_under_one_node_set_with_its_count():
    lines = list(folded({"node01": "a\n", "node02": "b\n", "node03": "a\n", "node04": ""}))
    assert lines == ["---------------", "node[01,03] (2)", "---------------", "a", "----------", "node02 (1)", "----------", "b"]
    assert exit_lines({"node01": 0, "node02": 3, "node04": 3}) == ["node[02,04]: exited with exit code 3"]
