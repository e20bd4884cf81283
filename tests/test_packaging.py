"""The install must pick the right TensorFlow wheel on the coordinator and on a 64-bit Pi."""

import tomllib

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
    assert project["scripts"]["picluster"] == "picluster.cli:main"


def test_wheel_ships_the_templates_and_the_bind_shim(tmp_path):
    """A non-editable install of the coordinator needs them: provisioning renders the templates."""
    import shutil
    import subprocess
    import sys
    import zipfile

    src = tmp_path / "src"
    src.mkdir()
    for item in ("pyproject.toml", "README.md", "picluster"):
        copy = shutil.copytree if (ROOT / item).is_dir() else shutil.copy
        copy(ROOT / item, src / item)
    built = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q",
                            "-w", str(tmp_path / "dist"), str(src)], capture_output=True, text=True)
    assert built.returncode == 0, built.stderr
    (wheel,) = (tmp_path / "dist").glob("picluster-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    for template in ("exports.j2", "fstab.j2", "nfs-kernel-server.j2", "sunrpc.conf.j2", "picluster.nft.j2"):
        assert f"picluster/provision/files/{template}" in names
    assert "picluster/cluster/native/bindaddr.c" in names
