"""Per-host CPU and memory limits (picluster.lab.limits): checked input, and real cgroups holding every process of a host."""

import os
import sys
import time
import urllib.request
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from picluster.lab import Lab, cgroups, procs
from picluster.lab.cgroups import Cgroup
from picluster.lab.lab import HostStatus
from picluster.lab.limits import MIN_QUOTA_US, Limits, parse_memory, resolve
from picluster.lab.registry import known_ids
from picluster.model.inventory import AGENT_PORT
from picluster.util.errors import UsageError

from conftest import picluster
from render import render

MACHINE = (2.0, 24 * 2**30)  # a 2-core, 24 GiB machine, as ours


# -- input -------------------------------------------------------------------------------------


def test_sizes_parse_in_binary_units_and_bad_ones_say_how_to_write_them():
    assert parse_memory("1G") == parse_memory("1GiB") == parse_memory("1024m") == 2**30
    assert parse_memory("1.5G") == 3 * 2**29
    assert parse_memory("1073741824") == 2**30
    for bad in ("abc", "-1G", "0", "G", "nanG", "infG"):
        with pytest.raises(UsageError, match="--memory"):
            parse_memory(bad)


def test_the_pi3b_profile_is_1_gib_with_a_calibrated_cpu_share_and_flags_override_it():
    pi = resolve(16, profile="pi3b", capacity=MACHINE)
    assert pi.memory == 2**30 and pi.profile == "pi3b"
    assert 0 < pi.cpu * 16 <= 2  # 16 Pi hosts compute side by side on two cores
    assert "pi3b" in pi.describe() and "1 GiB" in pi.describe()
    roomy = resolve(1, cpu=1.0, profile="pi3b", capacity=MACHINE)
    assert (roomy.cpu, roomy.memory) == (1.0, 2**30)
    assert resolve(2, memory="512M", capacity=MACHINE) == Limits(cpu=None, memory=2**29)


@pytest.mark.parametrize(("kwargs", "words"), [
    ({"nodes": 1, "profile": "pi5"}, "unknown profile 'pi5': known profiles are pi3b"),
    ({"nodes": 1, "cpu": 3.0}, "--cpu 3 is more than this machine's 2 cores"),
    ({"nodes": 4, "cpu": 1.0}, "4 hosts x 1 CPU = 4 cores, more than this machine's 2"),
    ({"nodes": 17, "cpu": 0.118}, "use --cpu 0.117 or fewer nodes"),  # the advice itself must fit
    ({"nodes": 1, "cpu": 0.001}, "below 0.01 of a core"),
    ({"nodes": 1, "cpu": float("nan")}, "--cpu nan is not a number of cores"),
    ({"nodes": 1, "cpu": float("inf")}, "--cpu inf is not a number of cores"),
    ({"nodes": 1, "memory": "8M"}, "below the 16 MiB a host's sshd and one login need"),
    ({"nodes": 1, "memory": "32G"}, "more than this machine's 24.0 GiB"),
    ({"nodes": 30, "profile": "pi3b"}, "30 hosts x"),
])
def test_limits_beyond_the_machine_or_below_sshd_are_refused(kwargs, words):
    with pytest.raises(UsageError) as caught:
        resolve(capacity=MACHINE, **kwargs)
    assert words in str(caught.value) and "\n" not in str(caught.value)


def test_short_quotas_get_a_longer_period_so_the_kernel_takes_them():
    assert Limits(cpu=1.0).quota() == (10_000, 10_000)
    assert Limits(cpu=1.5).quota() == (15_000, 10_000)
    quota, period = Limits(cpu=0.05).quota()
    assert quota >= MIN_QUOTA_US and quota / period == pytest.approx(0.05)


@pytest.mark.parametrize("args", [
    ["--profile", "nope"],
    ["--memory", "1M"],
    ["--cpu", "64"],
    ["--nodes", "8", "--cpu", "1"],
    ["--memory", "lots"],
    ["--link", "fast"],
    ["--link", "1kbit"],
    ["--vm", "--link", "300mbit"],
])
def test_cli_bad_limits_are_one_line_exit_2_and_nothing_is_made(args, tmp_path):
    env = dict(os.environ, PICLUSTER_STATE_DIR=str(tmp_path / "state"))
    before_ids, before_groups = known_ids(tmp_path / "state" / "lab"), cgroups.lab_groups()
    result = picluster("lab", "up", *args, env=env)
    assert result.returncode == 2, result.stderr
    assert len(result.stderr.strip().splitlines()) == 1 and "Traceback" not in result.stderr
    assert not (tmp_path / "state" / "lab").exists()
    assert known_ids(tmp_path / "state" / "lab") == before_ids and cgroups.lab_groups() == before_groups


def test_the_pi3b_profile_names_its_link_rate():
    from picluster.lab.limits import profile_link

    assert profile_link("pi3b") == "300mbit" and profile_link(None) is None
    with pytest.raises(UsageError, match="unknown profile 'nope'"):
        profile_link("nope")


def test_lab_refuses_limits_it_cannot_give_before_touching_anything():
    with pytest.raises(UsageError, match="below the 16 MiB"):
        Lab(nodes=1, limits=Limits(memory=2**20))


def test_status_table_shows_the_limits_and_the_cgroups_use():
    from picluster.views.labs import status_table

    hosts = [
        HostStatus("node01", "10.0.0.11", "n", "running", "up", "", "pi3b: 0.05 CPU, 1 GiB",
                   {"memory": 600 * 2**20, "memory_peak": 700 * 2**20, "cpu_seconds": 12.34, "oom_kills": 0}),
        HostStatus("node02", "10.0.0.12", "n", "running", "up", "", "pi3b: 0.05 CPU, 1 GiB",
                   {"memory": 2**20, "memory_peak": 2**21, "cpu_seconds": 0.5, "oom_kills": 2}),
    ]
    text = render(status_table("lab x", hosts), width=160)
    row1 = next(line for line in text.splitlines() if "node01" in line)
    row2 = next(line for line in text.splitlines() if "node02" in line)
    assert "pi3b: 0.05 CPU, 1 GiB" in row1 and "600.0 (700.0)" in row1 and "12.3" in row1
    assert row2.rstrip(" │").endswith("2")
    plain = render(status_table("lab y", [HostStatus("node01", "a", "n", "running", "up", "")]), width=160)
    assert "limits" not in plain and "oom" not in plain


def test_cgroup_v2_gets_cpu_max_memory_max_and_no_swap(tmp_path):
    """MOCK cgroup2 tree: this machine's cpu and memory controllers are bound to v1 hierarchies,
    so a unified hierarchy with them cannot exist here.  The mock pre-creates the interface files
    the kernel would make on mkdir; the test checks what picluster writes into them."""
    root = tmp_path / "cgroup"
    root.mkdir()
    (root / "cgroup.controllers").write_text("cpuset cpu io memory pids\n")
    (root / "cgroup.subtree_control").write_text("memory\n")
    for level in ("picluster-lab", "picluster-lab/ab12", "picluster-lab/ab12/node01"):
        (root / level).mkdir()
        for name in ("cgroup.subtree_control", "cpu.max", "memory.max", "memory.swap.max", "cgroup.procs"):
            (root / level / name).write_text("")
    group = Cgroup(cgroups.cgroup_name("ab12", "node01"), root=root)
    assert group.version == 2
    group.create(Limits(cpu=0.5, memory=2**30))
    leaf = root / "picluster-lab/ab12/node01"
    assert (leaf / "cpu.max").read_text() == "5000 10000"
    assert (leaf / "memory.max").read_text() == str(2**30)
    assert (leaf / "memory.swap.max").read_text() == "0"
    assert (root / "cgroup.subtree_control").read_text() == "+cpu"  # memory was on already
    assert (root / "picluster-lab/ab12/cgroup.subtree_control").read_text() == "+cpu +memory"
    assert cgroups.lab_groups(root) == {"ab12": ["node01"]}


# -- real hosts ----------------------------------------------------------------------------------


def _in_group(pid: int, group: Cgroup) -> bool:
    try:
        lines = Path(f"/proc/{pid}/cgroup").read_text().splitlines()
    except FileNotFoundError:
        return True  # gone since it was listed (a login's short-lived helper): nothing to check
    paths = {line.split(":")[1]: line.split(":")[2] for line in lines}
    return all(paths.get(controller) == "/" + group.name for controller in ("cpu", "memory"))


def _scrape(url: str, timeout: float = 30.0) -> dict[str, float]:
    deadline = time.monotonic() + timeout
    while True:
        try:
            text = urllib.request.urlopen(url, timeout=2).read().decode()
            break
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.3)
    return {s.name: s.value for f in text_string_to_metric_families(text) for s in f.samples if not s.labels}


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode().strip()
    except FileNotFoundError:
        return ""


@pytest.mark.lab
def test_every_process_of_a_limited_host_is_in_its_cgroup_and_the_limits_hold(lab_factory):
    lab = lab_factory(2, limits=Limits(cpu=0.5, memory=256 * 2**20))
    host = lab.hosts[0]
    group = Cgroup(host.cgroup)
    cpu_dir, memory_dir = group.dirs()["cpu"], group.dirs()["memory"]
    quota, period = (int((cpu_dir / f"cpu.cfs_{f}_us").read_text()) for f in ("quota", "period"))
    assert quota / period == pytest.approx(0.5)
    assert int((memory_dir / "memory.limit_in_bytes").read_text()) == 256 * 2**20

    with lab.connect(host) as conn:
        # A daemon started by a login, detached from it as `cluster up` detaches servers.
        conn.run("setsid nohup sleep 300 >/dev/null 2>&1 </dev/null &", hide=True)
        # The quota holds: a busy loop gets at most its share.  A loaded machine (other tests,
        # other labs) can give a loop under half a core anyway, so the loop runs at a share far
        # below what any load leaves it, and the kernel must have throttled the group.
        lab.set_limits(host, Limits(cpu=0.03, memory=256 * 2**20))
        busy = time.monotonic()
        before = group.usage()
        conn.run("timeout 3 sh -c 'while :; do :; done'", hide=True, warn=True)
        after = group.usage()
        share = (after["cpu_seconds"] - before["cpu_seconds"]) / (time.monotonic() - busy)
        lab.set_limits(host, Limits(cpu=0.5, memory=256 * 2**20))
        assert share < 0.05, f"a 0.03-CPU host used {share:.3f} cores"
        assert after["throttled"] > before["throttled"], (before, after)
        found = procs.in_namespaces([host.net_inode], [host.mnt_inode])
        sleeper = [pid for pid in found if _cmdline(pid) == "sleep 300"]
        assert len(found) >= 3 and sleeper  # sshd, this login's sshd, the sleep
        assert all(_in_group(pid, group) for pid in found), found
        assert sleeper[0] in group.pids()
        # Run as root from outside too: it counts against the host.
        assert _in_group(int(host.run(["sh", "-c", "echo $$"]).stdout), group)

        hog = conn.run("python3 -c \"b = b'x' * (400 << 20)\"", hide=True, warn=True)
        assert hog.exited != 0  # killed by the cgroup's OOM killer, not the machine's
        assert group.usage()["oom_kills"] >= 1
        assert conn.run("echo still here", hide=True).stdout.strip() == "still here"  # sshd survived

        # The host's agent sees its own cgroup (hostinit mounts the hierarchies again, read-only).
        conn.run(f"setsid nohup {sys.executable} -m picluster.monitor.agent --addr {host.address} --node {host.name} "
                 ">/dev/null 2>&1 </dev/null &", hide=True)
        metrics = _scrape(f"http://{host.address}:{AGENT_PORT}/metrics")
        assert metrics["picluster_cgroup_memory_limit_bytes"] == 256 * 2**20
        assert metrics["picluster_cgroup_cpu_limit_cores"] == pytest.approx(0.5)
        assert metrics["picluster_cgroup_oom_kills_total"] >= 1

    # The other host's processes are in their own group, and status names the limits.
    other = Cgroup(lab.hosts[1].cgroup)
    assert lab.hosts[1].pid in other.pids() and lab.hosts[1].pid not in group.pids()
    rows = lab.status()
    assert rows[0].limits == "0.5 CPU, 256 MiB" and rows[0].usage["oom_kills"] >= 1

    lab_id, names = lab.id, [h.cgroup for h in lab.hosts]
    lab.down()
    assert lab_id not in cgroups.lab_groups()
    assert not any(Cgroup(name).exists() for name in names)
