"""The install must pick the right TensorFlow wheel on the coordinator and on a 64-bit Pi."""

import base64
import csv
import hashlib
import os
import shutil
import subprocess
import sys
import tomllib
import zipfile
from pathlib import Path

from packaging.requirements import Requirement

from conftest import ROOT


def resolved(machine: str) -> set[str]:
    deps = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    env = {"platform_machine": machine, "python_version": "3.11", "sys_platform": "linux"}
    return {r.name for r in map(Requirement, deps) if r.marker is None or r.marker.evaluate(env)}


def test_x86_64_gets_tensorflow_cpu():
    names = resolved("x86_64")
    assert "tensorflow-cpu" in names and "tensorflow" not in names


def test_raspberry_pi_aarch64_gets_tensorflow():
    names = resolved("aarch64")
    assert "tensorflow" in names and "tensorflow-cpu" not in names


def test_requires_python_311():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert project["requires-python"] == ">=3.11"
    from picluster.provision.facts import NODE_PYTHON  # picluster runs on every node: provisioning checks their python3 against it

    assert project["requires-python"] == ">=" + ".".join(map(str, NODE_PYTHON))
    assert project["scripts"]["picluster"] == "picluster.cli:main"


def test_wheel_ships_the_templates_the_bind_shim_and_the_ansible_twin(built_wheel):
    """A non-editable install of the coordinator needs them: provisioning renders the templates,
    and `picluster playbooks` copies the twin, whose roles' templates are the same files."""
    names = set(zipfile.ZipFile(built_wheel).namelist())
    for template in ("exports.j2", "fstab.j2", "nfs-kernel-server.j2", "sunrpc.conf.j2", "picluster.nft.j2"):
        assert f"picluster/provision/files/{template}" in names
    assert "picluster/cluster/native/bindaddr.c" in names
    twin = {n.removeprefix("picluster/ansible/") for n in names if n.startswith("picluster/ansible/")}
    assert twin == {p.relative_to(ROOT / "ansible").as_posix() for p in (ROOT / "ansible").rglob("*") if p.is_file()}
    with zipfile.ZipFile(built_wheel) as whl:  # the roles' links, packed as the shared files
        assert whl.read("picluster/ansible/roles/nfs_server/templates/exports.j2") == whl.read("picluster/provision/files/exports.j2")
    # The man pages, installed in <prefix>/share/man/man1 (pipx links them for `man`).
    pages = {n.rsplit("/", 1)[1] for n in names if n.startswith("picluster-") and "/share/man/man1/" in n}
    assert pages == {p.name for p in (ROOT / "docs" / "man").glob("*.1")} and "picluster.1" in pages


def test_an_installed_picluster_packs_its_own_wheel_again_for_the_nodes(built_wheel, tmp_path):
    """Provisioning installs picluster's wheel on the nodes.  In a checkout it is built from the
    source; an installed picluster (pip, pipx) has none, so it packs the installed files again:
    the same files as the wheel it came from, each with its hash in a new RECORD."""
    site = tmp_path / "site"
    installed = subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "--no-compile", "-q", "--target", str(site), str(built_wheel)],
                               capture_output=True, text=True, timeout=300)
    assert installed.returncode == 0, installed.stderr
    packed = subprocess.run([sys.executable, "-c", "from picluster.provision import wheelhouse as w; "
                             "assert w.checkout() is None, w.checkout(); print(w.own_wheel())"],
                            env=dict(os.environ, PYTHONPATH=str(site)), cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert packed.returncode == 0, packed.stderr
    again = Path(packed.stdout.strip())
    try:
        assert again.name == built_wheel.name
        with zipfile.ZipFile(built_wheel) as first, zipfile.ZipFile(again) as second:
            # The man pages are data files installed outside site-packages: the nodes need none.
            kept = {n for n in first.namelist() if ".data/" not in n and not n.endswith("/RECORD")}
            assert set(second.namelist()) - {n for n in second.namelist() if n.endswith("/RECORD")} == kept
            for name in kept:
                assert first.read(name) == second.read(name), name
            record = second.read(next(n for n in second.namelist() if n.endswith(".dist-info/RECORD"))).decode()
            for row in csv.reader(record.splitlines()):
                if not row[0].endswith("/RECORD"):
                    digest = base64.urlsafe_b64encode(hashlib.sha256(second.read(row[0])).digest()).rstrip(b"=").decode()
                    assert row[1:] == [f"sha256={digest}", str(len(second.read(row[0])))], row
        # It installs as a wheel does, and the picluster it installs runs.
        site2 = tmp_path / "site2"
        reinstalled = subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "--no-compile", "-q", "--target", str(site2), str(again)],
                                     capture_output=True, text=True, timeout=300)
        assert reinstalled.returncode == 0, reinstalled.stderr
        version = subprocess.run([sys.executable, "-m", "picluster", "--version"], env=dict(os.environ, PYTHONPATH=str(site2)),
                                 cwd=tmp_path, capture_output=True, text=True, timeout=120)
        assert version.returncode == 0 and version.stdout.startswith("picluster, version "), version.stderr
    finally:
        shutil.rmtree(again.parent, ignore_errors=True)


def test_playbooks_copies_the_ansible_twin_with_its_templates_as_files(tmp_path, state):
    """`picluster playbooks --out DIR`: the twin an installed picluster carries, where ansible-playbook
    runs it; the roles' templates as the shared files (links followed); the folder's own files stay;
    a twin's file edited there is replaced only with --force."""
    from picluster.provision import templates

    from conftest import picluster

    out = tmp_path / "ansible"
    out.mkdir()
    (out / "inventory.yml").write_text("mine\n")
    done = picluster("playbooks", "--out", out)
    assert done.returncode == 0, done.stderr
    assert done.stdout == f"the Ansible twin (site.yml, reboot.yml, upgrade.yml, shutdown.yml) in {out}: 41 files written\n"
    copied = {p.relative_to(out).as_posix() for p in out.rglob("*") if p.is_file()}
    shipped = {p.relative_to(ROOT / "ansible").as_posix() for p in (ROOT / "ansible").rglob("*") if p.is_file()}
    assert copied == shipped | {"inventory.yml"} and (out / "inventory.yml").read_text() == "mine\n"
    for name in ("roles/nfs_server/templates/exports.j2", "roles/slurm/templates/slurm.conf.j2"):
        assert not (out / name).is_symlink()
        assert (out / name).read_bytes() == templates.template_path(name.rsplit("/", 1)[1]).read_bytes()
    check = subprocess.run([str(Path(sys.executable).with_name("ansible-playbook")), "-i", "localhost,", "site.yml", "--syntax-check"],
                           cwd=out, capture_output=True, text=True, timeout=120)
    assert check.returncode == 0 and "playbook: site.yml" in check.stdout, check.stdout + check.stderr

    assert picluster("playbooks", "--out", out).stdout.endswith(": already there, the same\n")
    (out / "site.yml").write_text("# mine now\n")
    refused = picluster("playbooks", "--out", out)
    assert refused.returncode == 2 and refused.stdout == ""
    assert refused.stderr == (f"picluster: error: --out {out}: site.yml differ from this picluster's (edited, or another version's): "
                              "--force replaces the twin's files (the folder's other files stay), or give a new folder\n")
    assert (out / "site.yml").read_text() == "# mine now\n"
    forced = picluster("playbooks", "--out", out, "--force")
    assert forced.returncode == 0 and forced.stdout.endswith(": 1 file written\n")
    assert (out / "site.yml").read_bytes() == (ROOT / "ansible" / "site.yml").read_bytes()
