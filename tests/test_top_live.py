"""`picluster top` live in a real terminal (tmux): it draws the node panel and quits on `q`."""

import shlex
import shutil
import subprocess
import sys
import time

import pytest

from conftest import picluster

pytestmark = pytest.mark.slow


def tmux(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["tmux", *args], capture_output=True, text=True)


def test_top_in_a_terminal_refreshes_and_quits_on_q(state):
    assert shutil.which("tmux"), "tmux is missing: ./dev test installs it"
    assert picluster("cluster", "up", "--ps", "1", "--workers", "1").returncode == 0
    session = f"pctop{int(time.time() * 1000) % 100000}"
    command = f"PICLUSTER_STATE_DIR={shlex.quote(str(state))} {shlex.quote(sys.executable)} -m picluster top --interval 0.5"
    try:
        assert tmux("new-session", "-d", "-s", session, "-x", "80", "-y", "24", command).returncode == 0
        screens = []
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            screen = tmux("capture-pane", "-p", "-t", session).stdout
            if "localhost" in screen and "2/2 up" in screen:
                screens.append(screen)
                if len(screens) >= 2:
                    break
            time.sleep(0.5)
        assert len(screens) >= 2, tmux("capture-pane", "-p", "-t", session).stdout
        assert "cpu" in screens[-1] and "mem GiB" in screens[-1] and "…" not in screens[-1]
        tmux("send-keys", "-t", session, "q")
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and tmux("has-session", "-t", session).returncode == 0:
            time.sleep(0.2)
        assert tmux("has-session", "-t", session).returncode != 0, "top did not quit on q"
    finally:
        tmux("kill-session", "-t", session)
        picluster("cluster", "down")
