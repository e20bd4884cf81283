"""Wheels for the nodes' platform, downloaded by the coordinator (picluster.provision.wheelhouse)."""

import os
import tomllib
import zipfile
from pathlib import Path

import pytest

from picluster.provision import wheelhouse
from picluster.provision.wheelhouse import Platform
from picluster.util.errors import ClusterError, UsageError

from conftest import one_line, picluster

ROOT = Path(__file__).resolve().parents[1]
PI = Platform.of("aarch64", "3.11.2", "2.36")  # Raspberry Pi OS bookworm 64-bit
VM = Platform.of("x86_64", "3.11.2", "2.36")  # the VM image, Debian 12


def wheel_with_picluster_requirements(tmp_path: Path) -> Path:
    """A wheel whose METADATA carries picluster's own dependency lines, markers and all."""
    deps = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    metadata = "Metadata-Version: 2.1\nName: picluster\nVersion: 0\n" + "".join(f"Requires-Dist: {d}\n" for d in deps)
    path = tmp_path / "picluster-0-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("picluster-0.dist-info/METADATA", metadata)
    return path


def test_platform_tags_cover_every_manylinux_the_c_library_runs():
    assert PI.key == "cp311-aarch64-glibc2.36"
    tags = PI.tags()
    assert tags[0] == "manylinux_2_36_aarch64" and "manylinux_2_17_aarch64" in tags and tags[-1] == "manylinux2014_aarch64"
    assert len(tags) == 36 - 17 + 2 and all(t.endswith("_aarch64") for t in tags)
    args = PI.pip_args()
    assert "--only-binary=:all:" in args and args[args.index("--python-version") + 1] == "3.11"
    assert args[args.index("--abi") + 1] == "cp311" and args.count("--platform") == len(tags)
    with pytest.raises(ClusterError, match="Python"):
        Platform.of("aarch64", "", "2.36")


def test_picluster_requirements_are_evaluated_for_the_node_not_the_coordinator(tmp_path):
    # pip would evaluate platform_machine on the coordinator (x86_64) and pick tensorflow-cpu for a Pi.
    wheel = wheel_with_picluster_requirements(tmp_path)
    on_pi = wheelhouse.requirements_of(wheel, PI)
    on_vm = wheelhouse.requirements_of(wheel, VM)
    assert [r for r in on_pi if r.startswith("tensorflow")] == ["tensorflow<2.22,>=2.21"]
    assert [r for r in on_vm if r.startswith("tensorflow")] == ["tensorflow-cpu<2.22,>=2.21"]
    assert all(";" not in r for r in on_pi + on_vm)
    assert any(r.startswith("fabric") for r in on_pi)
    assert wheelhouse.key_of(PI, on_pi) != wheelhouse.key_of(VM, on_vm)


def test_a_bad_requirement_is_one_line():
    assert wheelhouse.check_requirements(["psutil>=5.9"]) == ["psutil>=5.9"]
    for bad in ("psutil>>5", "x @ https://example.com/x.whl"):
        with pytest.raises(UsageError) as caught:
            wheelhouse.check_requirements([bad])
        assert "\n" not in str(caught.value) and bad in str(caught.value)


@pytest.mark.parametrize("args, words", [
    (["--glibc", "2.99999"], "--glibc '2.99999'"),  # one --platform per minor: pip's "Argument list too long"
    (["--glibc", "2." + "9" * 100_000], "--glibc '2.999"),
    (["--glibc", "2.36.1"], "not a glibc version from 2.17 to 2.99, such as 2.36"),
    (["--glibc", "2.16"], "--glibc '2.16'"),
    (["--glibc", "three"], "--glibc 'three'"),
    (["--python", "2.7"], "--python '2.7': not a Python 3 version"),
    (["--arch", "../x"], "--arch '../x'"),
    (["--arch", "sparc"], "--arch 'sparc': PyPI has Linux wheels for aarch64, armv7l, i686, ppc64le, s390x, x86_64 only"),
    (["psutil>>5"], "requirement 'psutil>>5'"),
    ([], "afile is not a directory"),  # --out under a file: found first, not after every wheel (TensorFlow) is fetched
])
def test_wheelhouse_usage_errors_exit_2_before_any_download(tmp_path, args, words):
    (tmp_path / "afile").write_text("")
    out = tmp_path / "afile" / "wheels" if not args else tmp_path / "wheels"
    env = dict(os.environ, PICLUSTER_CACHE_DIR=str(tmp_path / "cache"))
    result = picluster("wheelhouse", "--out", out, *args, env=env, timeout=120)
    one_line(result, 2, words[:60])
    assert len(result.stderr) < 500  # an absurd value is cut short in the message
    assert not (tmp_path / "cache").exists() and not (tmp_path / "wheels").exists()


def test_platform_from_options_is_a_usage_error_and_from_facts_a_cluster_error():
    assert Platform.asked("aarch64", "3.11.2", "2.36") == PI
    with pytest.raises(UsageError, match="--glibc"):
        Platform.asked("aarch64", "3.11.2", "2.360")
    with pytest.raises(ClusterError, match="the node's C library"):
        Platform.of("aarch64", "3.11.2", "2.360")


@pytest.mark.e2e
def test_download_fetches_wheels_for_the_nodes_platform_once(tmp_path):
    # psutil has compiled wheels: the aarch64 one must come although this machine is x86_64.
    house = wheelhouse.download(PI, ["psutil>=5.9,<8"], cache=tmp_path)
    names = list(house.files)
    assert len(names) == 1 and "aarch64" in names[0] and "manylinux" in names[0], names
    assert (house.dir / names[0]).stat().st_size > 100_000
    assert house.dir.name == wheelhouse.key_of(PI, ["psutil>=5.9,<8"])
    again = wheelhouse.download(PI, ["psutil>=5.9,<8"], cache=tmp_path)  # from the cache: no pip
    assert again == house and not list(tmp_path.glob(".*partial*"))
    with pytest.raises(ClusterError) as caught:
        wheelhouse.download(PI, ["picluster-no-such-package-x"], cache=tmp_path)
    assert "pip download for cp311-aarch64-glibc2.36 failed" in str(caught.value) and "\n" not in str(caught.value)
    assert not list(tmp_path.glob(".*partial*"))
