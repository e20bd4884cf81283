"""Node sets as ClusterShell reads them (its library does the work): the operators, groups, folding,
and picluster's limits kept: a cap on the size, one line for anything malformed."""

import pytest
from hypothesis import given
from hypothesis import strategies as st

from picluster.model.nodeset import MAX_NODES, MAX_WORK, expand, fold, fold_by, in_order
from picluster.util.errors import UsageError

GROUPS = {"all": ["node01", "node02", "node03", "node04"], "ps": ["node01"], "workers": ["node02", "node03", "node04"],
          "nfs": ["node01"]}


def test_expand_padded_range():
    names = expand("node[01-16]")
    assert names[0] == "node01" and names[-1] == "node16" and len(names) == 16


def test_expand_addresses_and_lists():
    assert expand("192.168.1.[16-18]") == ["192.168.1.16", "192.168.1.17", "192.168.1.18"]
    assert expand("n[1,3,5-6]") == ["n1", "n3", "n5", "n6"]
    assert expand("a[1-2]b[1-2],c") == ["a1b1", "a1b2", "a2b1", "a2b2", "c"]
    assert expand("node[1-9/4]") == ["node1", "node5", "node9"]  # ClusterShell's steps


@pytest.mark.parametrize("pattern,names", [
    ("node[01-04]!node03", ["node01", "node02", "node04"]),  # difference
    ("node[01-04]&node[03-06]", ["node03", "node04"]),  # intersection
    ("node[01-04]^node[03-06]", ["node01", "node02", "node05", "node06"]),  # in one, not both
    ("node[1-2],node[2-3]", ["node1", "node2", "node3"]),  # a union holds each node once
    ("node[01-06]!node[02-03]&node[01-05]", ["node01", "node04", "node05"]),  # left to right, as clush
    (" node1 , node2 ", ["node1", "node2"]),
])
def test_the_operators_of_clustershell(pattern, names):
    assert expand(pattern) == names


def test_groups_are_the_ones_given_and_no_other():
    assert expand("@workers!node03", GROUPS) == ["node02", "node04"]
    assert expand("@ps,@nfs", GROUPS) == ["node01"]
    assert expand("node[01-03]&@workers", GROUPS) == ["node02", "node03"]
    assert expand("@*", GROUPS) == GROUPS["all"]  # ClusterShell's every node of the source
    assert expand("@picluster:ps", GROUPS) == ["node01"]  # the source named
    assert expand("node0[1-2]*", GROUPS) == ["node01", "node02"]  # wildcards match the nodes of @all
    with pytest.raises(UsageError, match=r"^node set '@wokers': no group @wokers \(the groups: @all, @nfs, @ps, @workers\)$"):
        expand("@wokers", GROUPS)
    with pytest.raises(UsageError, match=r"node set '@site:ps': no group source 'site'"):
        expand("@site:ps", GROUPS)
    with pytest.raises(UsageError, match=r"^node set '@ps': no groups here: name the nodes"):
        expand("@ps")  # an inventory's own roles, a lab's hosts: no groups there


@pytest.mark.parametrize("names,folded", [
    (["node03", "node07"], "node[03,07]"),
    ([f"node{i:02d}" for i in range(1, 17)], "node[01-16]"),
    (["node09", "node10", "node11"], "node[09-11]"),
    (["n1", "n2", "n3", "n10"], "n[1-3,10]"),
    (["a1b1", "a1b2", "a2b1", "a2b2"], "a[1-2]b[1-2]"),  # both dimensions folded, as ClusterShell
    (["node2", "node1", "node2"], "node[1-2]"),
    (["ps:0", "worker:0", "worker:1"], "ps:0,worker:[0-1]"),
    (["worker:0 client", "worker:1 client"], "worker:[0-1] client"),  # a process named in words folds too
    (["pi"], "pi"),
    (["node01"], "node01"),
    (["a,b", "x[1]", "node1"], "node1,a,b,x[1]"),  # names ClusterShell would read as sets stay as they are
    (["n" + "9" * 200], "n" + "9" * 200),  # more digits than ClusterShell takes: listed, not an error
])
def test_fold(names, folded):
    assert fold(names) == folded


def test_fold_by_groups_names_by_value_in_first_seen_order():
    assert fold_by({"node02": "down", "node03": "idle", "node07": "down"}) == {"down": "node[02,07]", "idle": "node03"}


@pytest.mark.parametrize("pattern", ["node[01-16]", "rpi[1-4,9]", "192.168.1.[16-31]", "a[1-3]b7", "node[7,08-09]"])
def test_fold_inverts_expand(pattern):
    assert expand(fold(expand(pattern))) == expand(pattern)


@pytest.mark.parametrize("bad,says", [
    ("", "empty node set"),
    ("node[", "missing bracket"),
    ("node]", "illegal closing bracket"),
    ("node[5-1]", r"\[5-1\] runs backwards: write \[1-5\]"),
    ("node[a-b]", "bad range .a-b. in \\[a-b\\] \\(write numbers"),
    ("n[[1]]", "node set"),
    ("a,,b", "missing nodeset operand"),
    ("node[1-3]!", "missing nodeset operand with '!' operator"),
    ("!node1", "missing nodeset operand"),
    ("node[01-2]", r"\[01-2\] pads one end and not the other: pad both alike"),  # ClusterShell refuses it
    ("node[1-02]", "pads one end and not the other"),
    ("node[1-3]!node[1-3]", "names no node"),
    ("node[1_000-1_002]", "bad range '1_000-1_002'"),
    ("node[1-3/0]", "invalid values in range"),
    ("x" + "9" * 5000, r"^node set 'x9{59}'\.\.\. \(5001 characters\): a number of 5000 digits"),  # quoted by its start
    (f"n[0-{MAX_NODES}]", f"more than {MAX_NODES} nodes"),
    ("node[1-100000000]", f"more than {MAX_NODES} nodes"),  # refused before ClusterShell builds 10^8 names
    ("a[1-100]b[1-100]", f"more than {MAX_NODES} nodes"),
    ("node[1-99999999999999999999999999]", f"more than {MAX_NODES} nodes"),
    (",".join(f"n[{i * 4000}-{i * 4000 + 3999}]" for i in range(5)), f"terms add up to more than {MAX_WORK}"),
])
def test_bad_patterns_are_one_line(bad, says):
    with pytest.raises(UsageError, match=says) as err:
        expand(bad, GROUPS)
    assert "\n" not in str(err.value)


def test_the_size_is_the_results_not_each_operands():
    assert expand("node[1-4000]!node[2-4000]") == ["node1"]
    assert len(expand("node[1-4000],node[3000-4096]")) == MAX_NODES


def test_a_list_paired_by_position_keeps_its_order_and_its_repeats():
    assert in_order("b,a,node[09-11]") == ["b", "a", "node09", "node10", "node11"]
    assert in_order("192.168.1.[16-18]") == ["192.168.1.16", "192.168.1.17", "192.168.1.18"]
    assert in_order("n1,n1") == ["n1", "n1"]  # for the inventory to name as a duplicate
    for bad, says in [("node[16,01]", r"write \[16,01\] upwards"), ("node[01,2]", "upwards"),
                      ("node[1-3]!node2", "takes no '!'"), ("node[16-01]", "runs backwards")]:
        with pytest.raises(UsageError, match=says):
            in_order(bad)


SET_TEXT = st.text(alphabet="nod0129[]-,!&^@*?/ xw:", max_size=40)


@given(SET_TEXT)
def test_any_string_is_a_node_set_or_one_usage_line(pattern):
    try:
        names = expand(pattern, GROUPS)
    except UsageError as exc:
        assert "\n" not in str(exc)
    else:
        assert 0 < len(names) <= MAX_NODES and len(set(names)) == len(names)
        assert expand(fold(names)) == names


@given(st.lists(st.from_regex(r"[a-z]{1,3}[0-9]{1,3}(-[0-9]{1,2})?", fullmatch=True), min_size=1, max_size=30))
def test_fold_then_expand_gives_the_names_back(names):
    assert sorted(expand(fold(names))) == sorted(set(names))
