"""Pytest fixtures for tests against the test lab (real SSH hosts on this machine, picluster.lab).

conftest.py makes them available to every test module with:

    from lab_fixtures import lab4, lab_factory, lab_support  # noqa: F401

- lab4: a 4-host lab (node01..node04), one per test module, torn down after the module.
  Tests that cut, shape or write into a host restore what they changed, or use lab_factory.
- lab_factory: make(nodes=2, **Lab kwargs) -> an up Lab, torn down after the test.

The lab needs root and the Debian packages of scripts/lab-deps.sh.  Without them the tests
fail with that reason: a skipped lab test would hide a missing install step in CI.
"""

import pytest

from picluster.errors import ClusterError
from picluster.lab import Lab, reap_orphans
from picluster.lab.commands import missing_support


@pytest.fixture(scope="session")
def lab_support():
    """Fails (never skips) when the lab cannot run; clears labs of crashed earlier runs."""
    reason = missing_support()
    if reason:
        pytest.fail(reason, pytrace=False)
    # Only labs whose owning process is gone: other sessions' labs on this machine live on.
    reap_orphans()
    yield


@pytest.fixture(scope="module")
def lab4(lab_support):
    lab = Lab(nodes=4)
    lab.up()
    try:
        yield lab
    finally:
        lab.down()


@pytest.fixture
def lab_factory(lab_support):
    made: list[Lab] = []

    def make(nodes: int = 2, **kwargs) -> Lab:
        lab = Lab(nodes, **kwargs)
        made.append(lab)
        return lab.up()

    yield make
    problems = []
    for lab in made:
        try:
            lab.down()
        except ClusterError as exc:
            problems.append(str(exc))
    if problems:
        pytest.fail("; ".join(problems), pytrace=False)
