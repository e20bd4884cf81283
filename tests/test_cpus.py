"""cpus.usable: a process's affinity, capped by its cgroup's CPU quota (v1 and v2, ancestors too)."""

import os

import pytest

from picluster.util import cpus


def _tree(tmp_path, files):
    for rel, text in files.items():
        path = tmp_path / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)


SEEN = len(os.sched_getaffinity(0))


@pytest.mark.parametrize("files, proc, want", [
    ({"fs/lab/node01/cpu.max": "11700 100000\n"}, "0::/lab/node01\n", 0.117),  # v2
    ({"fs/lab/cpu.max": "50000 100000\n", "fs/lab/node01/cpu.max": "max 100000\n"}, "0::/lab/node01\n", 0.5),  # an ancestor's
    ({"fs/cpu,cpuacct/lab/node01/cpu.cfs_quota_us": "11700\n", "fs/cpu,cpuacct/lab/node01/cpu.cfs_period_us": "100000\n"},
     "4:cpu,cpuacct:/lab/node01\n9:name=systemd:/\n", 0.117),  # v1
    ({"fs/cpu,cpuacct/lab/cpu.cfs_quota_us": "-1\n", "fs/cpu,cpuacct/lab/cpu.cfs_period_us": "100000\n"},
     "4:cpu,cpuacct:/lab\n", None),  # v1 without a quota
    ({}, "0::/\n", None),
])
def test_the_tightest_quota_along_the_cgroup(tmp_path, files, proc, want):
    _tree(tmp_path, files | {"self": proc})
    got = cpus.quota_cpus(tmp_path / "self", tmp_path / "fs")
    assert got == (pytest.approx(want) if want is not None else None)
    assert cpus.usable(tmp_path / "self", tmp_path / "fs") == (1 if want is not None and want <= 1 else SEEN)


def test_a_quota_of_several_cpus_rounds_up_and_never_passes_the_affinity(tmp_path):
    _tree(tmp_path, {"self": "0::/a\n", "fs/a/cpu.max": "150000 100000\n"})
    assert cpus.usable(tmp_path / "self", tmp_path / "fs") == min(2, SEEN)
    _tree(tmp_path, {"fs/a/cpu.max": "6400000 100000\n"})
    assert cpus.usable(tmp_path / "self", tmp_path / "fs") == SEEN
