"""Pytest fixtures for tests against the test lab (real SSH hosts on this machine, picluster.lab).

conftest.py makes them available to every test module with:

    from lab_fixtures import lab4, lab_factory, lab_support, vm3, vm_image, vm_support  # noqa: F401

- lab4: a 4-host lab (node01..node04) of namespace hosts, one per test module, torn down after it.
  Tests that cut, shape or write into a host restore what they changed, or use lab_factory.
- vm3: the same with 3 VM hosts (their own kernel: NFS, systemd, reboots), one per test module.
- lab_factory: make(nodes=2, **Lab kwargs) -> an up Lab, torn down after the test;
  make(3, vm=True) gives VM hosts.
- vm_image: the cached Debian 12 VM image (the first session on a machine builds it, minutes).

The lab needs root and the Debian packages of scripts/lab-deps.sh (VMs: qemu too).  Without them
the tests fail with that reason: a skipped lab test would hide a missing install step in CI.
"""

import pytest

from picluster.lab import Lab, reap_orphans
from picluster.lab.commands import missing_support
from picluster.lab.vm import image as vm_image_mod
from picluster.lab.vm import support as vm_support_mod
from picluster.util.errors import ClusterError


@pytest.fixture(scope="session")
def lab_support():
    """Fails (never skips) when the lab cannot run; clears labs of crashed earlier runs."""
    reason = missing_support()
    if reason:
        pytest.fail(reason, pytrace=False)
    # Only labs whose owning process is gone: other sessions' labs on this machine live on.
    reap_orphans()
    yield


@pytest.fixture(scope="session")
def vm_support(lab_support):
    reason = vm_support_mod.missing_support()
    if reason:
        pytest.fail(reason, pytrace=False)
    yield


@pytest.fixture(scope="session")
def vm_image(vm_support):
    """Built once per machine (paths.cache_dir(), not the tests' private state dirs)."""
    return vm_image_mod.ensure(say=print)


@pytest.fixture(scope="module")
def lab4(lab_support):
    lab = Lab(nodes=4)
    lab.up()
    try:
        yield lab
    finally:
        lab.down()


@pytest.fixture(scope="module")
def vm3(vm_image):
    lab = Lab(nodes=3, vm=True, say=print)
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
