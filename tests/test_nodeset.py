import pytest

from picluster.model.nodeset import MAX_NODES, expand, fold
from picluster.util.errors import UsageError


def test_expand_padded_range():
    names = expand("node[01-16]")
    assert names[0] == "node01" and names[-1] == "node16" and len(names) == 16


def test_expand_addresses_and_lists():
    assert expand("192.168.1.[16-18]") == ["192.168.1.16", "192.168.1.17", "192.168.1.18"]
    assert expand("n[1,3,5-6]") == ["n1", "n3", "n5", "n6"]
    assert expand("a[1-2]b[1-2],c") == ["a1b1", "a1b2", "a2b1", "a2b2", "c"]


@pytest.mark.parametrize("names,folded", [
    (["node03", "node07"], "node[03,07]"),
    ([f"node{i:02d}" for i in range(1, 17)], "node[01-16]"),
    (["node09", "node10", "node11"], "node[09-11]"),
    (["n1", "n2", "n3", "n10"], "n[1-3,10]"),
    (["pi"], "pi"),
    (["node01"], "node01"),
])
def test_fold(names, folded):
    assert fold(names) == folded


@pytest.mark.parametrize("pattern", ["node[01-16]", "rpi[1-4,9]", "192.168.1.[16-31]", "a[1-3]b7"])
def test_fold_inverts_expand(pattern):
    assert expand(fold(expand(pattern))) == expand(pattern)


@pytest.mark.parametrize("bad", ["", "node[", "node]", "node[5-1]", "node[a-b]", "node[1-2", "n[[1]]", "a,,b", f"n[0-{MAX_NODES}]"])
def test_bad_patterns_raise(bad):
    with pytest.raises(UsageError):
        expand(bad)
