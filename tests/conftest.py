import os
import subprocess
import sys
from pathlib import Path

import psutil
import pytest

ROOT = Path(__file__).resolve().parent.parent


def server_processes(state: Path, module: str = "picluster.cluster.server") -> list[psutil.Process]:
    """``module`` processes (servers, or agents) whose run directory lies under ``state``."""
    found = []
    for proc in psutil.process_iter(["cmdline"]):
        cmd = proc.info["cmdline"] or []
        if module in cmd and any(str(state) in part for part in cmd):
            found.append(proc)
    return found


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


def picluster(*args, env=None, timeout=300, input=None):
    """Run the real CLI in a subprocess: real exit codes, real stderr."""
    return subprocess.run(
        [sys.executable, "-m", "picluster", *map(str, args)],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env or os.environ.copy(),
        input=input,
        cwd=ROOT,
    )


from lab_fixtures import lab4, lab_factory, lab_support, vm3, vm_image, vm_support  # noqa: E402,F401  (test hosts, picluster.lab)
