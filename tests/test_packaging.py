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
