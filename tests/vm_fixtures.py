"""Pytest fixtures for tests against VM test hosts (picluster.lab.vm: qemu, own kernel).

    from vm_fixtures import vm_image, vm_pair, vm_support  # noqa: F401

- vm_support: fails (never skips) when VMs cannot run here, like lab_support.
- vm_image: the cached Debian 12 image; the first session on a machine builds it (minutes).
- vm_pair: a Fleet of 2 VMs (node01, node02) up on a scratch bridge, one per test module.
- nothing_left(fleet, net): asserts no qemu, tap, disk or seed of theirs remains.

The image lives in the state dir's vm/ (not the tests' tmp dirs), so it is built once per machine.
"""

import os

import pytest

from picluster.lab import naming, netns
from picluster.lab.vm import Fleet
from picluster.lab.vm import image as image_mod
from picluster.lab.vm.scratch import ScratchNet
from picluster.lab.vm.support import missing_support

BOOT_TIMEOUT = 600.0  # TCG on a shared 2-core machine: ~30 s alone, minutes when it is busy


@pytest.fixture(scope="session")
def vm_support():
    reason = missing_support()
    if reason:
        pytest.fail(reason, pytrace=False)
    yield


@pytest.fixture(scope="session")
def vm_image(vm_support):
    return image_mod.ensure(say=print)


@pytest.fixture(scope="module")
def vm_pair(vm_image, tmp_path_factory):
    net = ScratchNet(tmp_path_factory.mktemp("vm-pair") / "run").up()
    fleet = Fleet(net.vms(2), net.user, net.key_path, net.known_hosts_path)
    try:
        fleet.up(timeout=BOOT_TIMEOUT)
        yield fleet, net
    finally:
        try:
            fleet.down()
        finally:
            net.down()


def qemu_pids_under(path) -> list[int]:
    """qemu processes whose command line names a file under `path`."""
    found = []
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/cmdline", "rb") as f:
                args = f.read().decode(errors="replace").split("\0")
        except OSError:
            continue
        if args and args[0].endswith("qemu-system-x86_64") and any(str(path) in a for a in args):
            found.append(int(entry.name))
    return found


def nothing_left(fleet: Fleet, net: ScratchNet, bridge_too: bool = False) -> None:
    assert qemu_pids_under(net.run_dir) == []
    links = [n for n in netns.link_names() if naming.lab_of_link(n) == net.id]
    assert [n for n in links if n != net.bridge] == []  # no taps
    if bridge_too:
        assert links == []
        assert not net.run_dir.exists()
    for vm in fleet.vms:
        assert not vm.disk.exists() and not vm.seed_disk.exists() and not vm.dir.exists()
        assert not vm.alive()
