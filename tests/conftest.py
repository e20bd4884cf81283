import os
import subprocess
import sys
from pathlib import Path

import psutil
import pytest
from hypothesis import settings

# Property tests stay inside CI's budget: a few hundred examples per property, no deadline (the
# machine is shared and slow).  HYPOTHESIS_PROFILE=thorough runs many more while working on one.
settings.register_profile("ci", max_examples=150, deadline=None, print_blob=True)
settings.register_profile("thorough", max_examples=5000, deadline=None)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))

ROOT = Path(__file__).resolve().parent.parent
PARTS = ("unit", "e2e", "lab", "vm", "long")  # by cost, cheapest first (pyproject.toml's markers)
# `./dev test` runs two pytest-xdist workers (`-n 2 --dist loadgroup`), and each group below runs
# on one of them, a test after the other, as a single process would run them: the e2e part (servers
# on this machine's loopback) on one worker, then the unit part; the lab and vm parts (test hosts in
# namespaces, VMs) on the other.  Two tests of one group at once would share ports, a lab's daemons
# or a host's share of the cores; the two groups meet neither (the hosts have loopbacks of their own).
GROUP = {"e2e": "on-loopback", "lab": "on-test-hosts", "vm": "on-test-hosts"}
_spent: dict[str, list[float]] = {}


def pytest_addoption(parser):
    parser.addoption("--long", action="store_true",
                     help="also run the long part (hour-scale VM runs CI leaves out; their results are in docs/)")


@pytest.hookimpl(tryfirst=True)  # before -m selects by part, and before xdist reads the group
def pytest_collection_modifyitems(config, items):
    """Each test's part: its costliest marker, else unit.  ``slow`` is derived, never written.

    The long part is deselected (pytest reports it so) unless ``--long`` is given: CI stays under
    an hour, and a long run is started on purpose, on a quiet machine."""
    if not config.getoption("--long"):
        left_out = [item for item in items if item.get_closest_marker("long")]
        if left_out:
            config.hook.pytest_deselected(items=left_out)
            items[:] = [item for item in items if not item.get_closest_marker("long")]
    for item in items:
        if item.get_closest_marker("slow"):
            raise pytest.UsageError(f"{item.nodeid}: mark it e2e, lab or vm (its cost), not slow")
        part = next((p for p in reversed(PARTS[1:]) if item.get_closest_marker(p)), "unit")
        item.add_marker(part)
        if part != "unit":
            item.add_marker("slow")
            item.add_marker(pytest.mark.xdist_group(GROUP[part]))
        item.user_properties.append(("part", part))  # on its reports, which xdist's workers send on


@pytest.hookimpl(trylast=True)
def pytest_collection_finish(session):
    """On a worker of `--dist loadgroup`: every grouped test carries its group, or the run stops
    (else the groups' tests would run side by side, silently)."""
    if getattr(session.config.option, "loadgroup", False):
        loose = [item.nodeid for item in session.items
                 if (group := item.get_closest_marker("xdist_group")) and not item.nodeid.endswith("@" + group.args[0])]
        if loose:
            raise pytest.UsageError(f"pytest-xdist did not group {len(loose)} tests (e.g. {loose[0]}): "
                                    "install pyproject.toml's test extras (./dev test does)")


def pytest_runtest_logreport(report):
    # Setup and teardown count too: a module's lab or VMs are made in its first test's setup.
    part = dict(report.user_properties).get("part")
    if part is not None:
        spent = _spent.setdefault(part, [0.0, 0])
        spent[0] += report.duration
        if report.when == "call":
            spent[1] += 1


def pytest_terminal_summary(terminalreporter):
    if not _spent:
        return
    parts = [f"{p} {int(_spent[p][1])} tests {_spent[p][0] / 60:.1f} min" for p in PARTS if p in _spent]
    total = sum(s for s, _ in _spent.values())  # with two workers, more than the run's own time
    terminalreporter.write_line(f"time by part: {'; '.join(parts)}; all {total / 60:.1f} min")


def server_processes(state: Path, module: str = "picluster.cluster.server") -> list[psutil.Process]:
    """``module`` processes (servers, or agents) whose run directory lies under ``state``."""
    found = []
    for proc in psutil.process_iter(["cmdline"]):
        cmd = proc.info["cmdline"] or []
        if module in cmd and any(str(state) in part for part in cmd):
            found.append(proc)
    return found


@pytest.fixture(autouse=True)
def _tensorflows_log_level_as_a_user_has_it(monkeypatch):
    """The replica's modules set TF_CPP_MIN_LOG_LEVEL when imported (before their TensorFlow
    import); a test that imports one would pass it on to every process a later test on the same
    worker starts, which then logs less than it does from a user's shell."""
    monkeypatch.delenv("TF_CPP_MIN_LOG_LEVEL", raising=False)


@pytest.fixture
def state(tmp_path, monkeypatch):
    """A private state directory; the test fails if it leaves a server running."""
    path = tmp_path / "state"
    monkeypatch.setenv("PICLUSTER_STATE_DIR", str(path))
    monkeypatch.delenv("PICLUSTER_INVENTORY", raising=False)
    yield path
    left = server_processes(path) + server_processes(path, "picluster.monitor.agent")
    for proc in left:
        proc.kill()
    assert not left, f"servers or agents left running: {[p.pid for p in left]}"


def command_line(*args) -> list[str]:
    """The command line that runs picluster's CLI from this checkout with this interpreter."""
    return [sys.executable, "-m", "picluster", *map(str, args)]


def picluster(*args, env=None, timeout=300, input=None, cwd=ROOT, how=()) -> subprocess.CompletedProcess:
    """Run the real CLI in a subprocess, to its end: real exit codes, real stderr.  ``how``: a
    prefix that runs it otherwise (e.g. as another user)."""
    return subprocess.run(
        [*how, *command_line(*args)], capture_output=True, text=True, timeout=timeout,
        env=env or os.environ.copy(), input=input, cwd=cwd,
    )  # fmt: skip


def picluster_popen(*args, env=None, cwd=ROOT, **popen) -> subprocess.Popen:
    """Start the real CLI in a subprocess and return at once (text pipes for stdout and stderr)."""
    return subprocess.Popen(command_line(*args), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=env or os.environ.copy(), cwd=cwd, **popen)


def ansible_playbook(inventory: Path, *extra: str, timeout: float = 300) -> subprocess.CompletedProcess:
    """`ansible-playbook -i INVENTORY site.yml EXTRA...` with this venv's Ansible, in ansible/, no colour."""
    return subprocess.run(
        [str(Path(sys.executable).with_name("ansible-playbook")), "-i", str(inventory), "site.yml", *extra],
        cwd=ROOT / "ansible", capture_output=True, text=True, timeout=timeout,
        env=dict(os.environ, ANSIBLE_NOCOLOR="1", ANSIBLE_FORCE_COLOR="0"),
    )  # fmt: skip


def assert_converged(result: subprocess.CompletedProcess, hosts) -> None:
    """A play that ran and changed nothing: `changed=0 failed=0` in every host's PLAY RECAP line."""
    assert result.returncode == 0, result.stdout[-4000:]
    recap = result.stdout.split("PLAY RECAP")[-1]
    for host in hosts:
        line = next(line for line in recap.splitlines() if line.startswith(host.name))
        assert "changed=0" in line and "failed=0" in line, line


def one_line(result, code: int, *needles: str) -> str:
    """The single "picluster: error:" line of a failed command (progress lines may precede it),
    after checking the exit code, that no traceback was printed and that it says each needle."""
    assert result.returncode == code, (result.returncode, result.stdout[-2000:], result.stderr[-2000:])
    errors = [ln for ln in result.stderr.strip().splitlines() if ln.startswith("picluster: error: ")]
    assert len(errors) == 1 and "Traceback" not in result.stderr, result.stderr
    for needle in needles:
        assert needle in errors[0], errors[0]
    return errors[0]


from har_synthetic import uci_zip  # noqa: E402,F401  (a small source zip in the UCI layout)
from lab_fixtures import lab4, lab_factory, lab_support, vm3, vm_image, vm_support  # noqa: E402,F401  (test hosts, picluster.lab)
from launch_fixtures import launch  # noqa: E402,F401  (picluster launch in the background, stopped after the test)
from storage_fixtures import small_disk  # noqa: E402,F401  (a tmpfs to fill or make read-only)
from train_fixtures import tiny  # noqa: E402,F401  (a tiny HAR data set)
from wheel_fixtures import built_wheel  # noqa: E402,F401  (picluster's wheel, built once)
