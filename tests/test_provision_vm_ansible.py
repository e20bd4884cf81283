"""Ansible on VM test hosts: three fresh VMs converge with `site.yml` twice (changed=0 the second
time) to the state the Fabric path reaches (tests/test_provision_vm.py's checks).

The long part (`./dev test --long tests/test_provision_vm_ansible.py`, about 17 minutes on a
quiet machine): CI leaves it out to stay under an hour; the Ansible roles are converged twice on
namespace hosts in every run (tests/test_provision_lab.py), and this run's result is kept in
docs/test-hosts.md.

Its own module so that test_provision_vm.py's three VMs are down before these three boot: at most
three VMs run at once on a 2-core machine.
"""

import json

import pytest

from picluster.model.inventory import load_inventory

from conftest import ansible_playbook, assert_converged, picluster
from vm_checks import REMOVED, RUNTIME, apt_repository, as_a_fresh_card, check_nfs_and_firewall, check_runtime, inventory, served, sh

pytestmark = [pytest.mark.long, pytest.mark.timeout(3600)]


def test_ansible_converges_fresh_vms_to_the_same_state(lab_factory, vm_image, tmp_path):
    lab = lab_factory(3, vm=True, say=print)
    inv_path = inventory(lab, tmp_path / "picluster.toml")
    inv = load_inventory(inv_path)
    master = lab.host("node01")
    sh(master, "systemctl disable --now nfs-server")  # the role must enable and start it
    ansible_inv = tmp_path / "inventory.yml"
    made = picluster("inventory", "--ansible", "-i", inv_path, "--known-hosts", lab.known_hosts_path, "--out", ansible_inv)
    assert made.returncode == 0, made.stderr
    wheels = tmp_path / "wheels"
    made = picluster("wheelhouse", "--out", wheels, "--arch", "x86_64", "--python", "3.11.2", "--glibc", "2.36", *RUNTIME.requirements)
    assert made.returncode == 0 and "wheels for cp311-x86_64-glibc2.36" in made.stdout, made.stderr
    extra = {"wheelhouse": str(wheels), "runtime_install": list(RUNTIME.requirements), "runtime_imports": list(RUNTIME.imports)}
    with served(apt_repository(tmp_path / "repo", [REMOVED]), lab.gateway) as url:
        as_a_fresh_card(lab.host("node03"), url)
        first = ansible_playbook(ansible_inv, "-e", json.dumps(extra), timeout=3600)
        assert first.returncode == 0, first.stdout[-4000:] + first.stderr[-2000:]
        second = ansible_playbook(ansible_inv, "-e", json.dumps(extra), timeout=3600)
    assert_converged(second, lab.hosts)
    assert "skipped (" not in first.stdout  # none of the debug lines for what a host cannot take (no NFS, no systemd, no key login)
    assert sh(lab.host("node03"), f"dpkg-query -W -f='${{db:Status-Status}}' {REMOVED}") == "installed"
    for host in lab.hosts:
        assert sh(host, "systemctl is-enabled systemd-networkd-wait-online.service") == "enabled"
        assert "PasswordAuthentication no" in host.read_file("/etc/ssh/sshd_config.d/00-picluster.conf")
    check_runtime(lab)
    check_nfs_and_firewall(lab, inv, 8)  # the inventory's max(8, 3 nodes)
