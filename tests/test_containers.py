"""The reset of a launch's resource containers, as the coordinator sends it without TensorFlow
(picluster/cluster/containers.py).  Against real servers: tests/test_train_cli.py (a run's
variables are gone from the ps after it) and tests/test_train_lab.py (over an inventory's nodes)."""

import pytest

from picluster.cluster.containers import Unreachable, container, reset, reset_request


def test_the_request_is_tensorflows_reset_request_encoding():
    # container = 1, device_filters = 2: each a length-delimited field (wire type 2)
    assert reset_request(["picluster-ab12"], ["/job:ps"]) == b"\x0a\x0epicluster-ab12" + b"\x12\x07/job:ps"
    long_name = "c" * 200  # a length over 127 takes two bytes
    assert reset_request([long_name], []) == b"\x0a\xc8\x01" + long_name.encode()


@pytest.mark.parametrize("containers", [[], [""]])
def test_never_a_reset_of_every_container(containers):
    """An empty list would drop every container on the ps: other jobs' variables too."""
    with pytest.raises(ValueError, match="needs the containers to drop"):
        reset_request(containers, ["/job:ps"])


def test_a_master_that_does_not_answer_is_unreachable():
    """A ps that stopped took its variables with it: the coordinator says nothing of it."""
    with pytest.raises(Unreachable, match=r"127\.0\.0\.1:9: UNAVAILABLE"):
        reset("127.0.0.1:9", [container("ab12")], timeout=5)
