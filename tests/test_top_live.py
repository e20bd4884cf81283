"""`picluster top` live in a real terminal (tmux): it draws the node panel and quits on `q`."""

import re
import shlex
import shutil
import subprocess
import sys
import time

import pytest

from conftest import picluster

pytestmark = pytest.mark.e2e


def tmux(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["tmux", *args], capture_output=True, text=True)


def ends_on_key(session: str, key: str, timeout: float) -> bool:
    """Send ``key``; whether the session's command then ended (tmux closes the session)."""
    tmux("send-keys", "-t", session, key)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and tmux("has-session", "-t", session).returncode == 0:
        time.sleep(0.2)
    return tmux("has-session", "-t", session).returncode != 0


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
        assert ends_on_key(session, "q", 10), "top did not quit on q"
    finally:
        tmux("kill-session", "-t", session)
        picluster("cluster", "down")


def test_train_shows_progress_and_nodes_live_and_stops_on_ctrl_c(state, tmp_path):
    from train_fixtures import TINY_MODEL, write_tiny_har

    data = write_tiny_har(tmp_path / "har")
    run = tmp_path / "run"
    session = f"pctrain{int(time.time() * 1000) % 100000}"
    command = (f"PICLUSTER_STATE_DIR={shlex.quote(str(state))} {shlex.quote(sys.executable)} -m picluster train har "
               f"--data-dir {shlex.quote(str(data))} --run-dir {shlex.quote(str(run))} --epochs 5000 "
               + " ".join(TINY_MODEL))
    try:
        assert tmux("new-session", "-d", "-s", session, "-x", "100", "-y", "30", command).returncode == 0
        screen = ""
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            screen = tmux("capture-pane", "-p", "-t", session).stdout
            # An epoch was evaluated, and the panel shows progress and the node row.
            if "train har" in screen and "val acc" in screen and "localhost" in screen and "ETA" in screen:
                break
            time.sleep(0.5)
        assert "val acc" in screen and "localhost" in screen and "ETA" in screen, screen
        # The epochs' log lines stay above the panel (by the time the panel is read, the first
        # epochs of this tiny model may have scrolled out of the 30-line pane: any epoch will do).
        assert re.search(r"^epoch +\d+  train", screen, re.MULTILINE), screen
        assert ends_on_key(session, "C-c", 20), "train did not stop on Ctrl-C"
    finally:
        tmux("kill-session", "-t", session)
