"""What cannot be undone asks first: on a terminal (a real pseudo-terminal here) a prompt answered
yes goes on and no stops with nothing done; --yes does not ask; with no terminal to ask on it is
refused in one line, exit 2.  The inventory's nodes are loopback addresses where nothing listens,
so a command that goes on fails at its first node (or at the Slurm controller) instead of
touching anything."""

import os
import pty
import select
import subprocess
import sys
import time

import pytest
from test_cli_input import assert_one_line_usage_error

from conftest import ROOT, command_line, picluster

INVENTORY = """\
[cluster]
name = "t"
user = "pi"
nodes = "node[01-05]"
addresses = "127.0.1.[1-5]"

[roles]
ps = "node01"
worker = "node[02-05]"

[slurm]
controller = "node02"
"""
PROMPT = "go ahead? [y/N]"
CONTROLLER_SILENT = "the Slurm controller on node02 does not answer"


def on_terminal(args: list[str], answer: str | None, timeout: float = 120) -> tuple[int, str]:
    """The command run with a pseudo-terminal as its stdin, stdout and stderr, as typed at a
    terminal; ``answer`` typed once the prompt shows.  Its exit code and all it wrote."""
    main, child = pty.openpty()
    proc = subprocess.Popen(args, stdin=child, stdout=child, stderr=child, cwd=ROOT, start_new_session=True)
    os.close(child)
    seen, answered = b"", False
    deadline = time.monotonic() + timeout  # a guard against a hang, not a measurement
    try:
        while True:
            ready, _, _ = select.select([main], [], [], max(0.0, deadline - time.monotonic()))
            if not ready:
                raise AssertionError(f"no end after {timeout:.0f} s; so far: {seen.decode(errors='replace')}")
            try:
                chunk = os.read(main, 4096)
            except OSError:  # EIO: the command ended and closed the terminal
                break
            if not chunk:
                break
            seen += chunk
            if answer is not None and not answered and PROMPT.encode() in seen:
                os.write(main, answer.encode() + b"\n")
                answered = True
        return proc.wait(timeout=timeout), seen.decode(errors="replace").replace("\r\n", "\n")
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        os.close(main)


@pytest.fixture
def inv_path(tmp_path):
    path = tmp_path / "picluster.toml"
    path.write_text(INVENTORY)
    return path


def test_shutdown_asks_and_stops_at_no(inv_path):
    code, said = on_terminal(command_line("nodes", "shutdown", "node[04-05]", "-i", inv_path), "n")
    assert "shut down node[04-05]: go ahead? [y/N]: n\n" in said, said
    assert code == 2 and said.endswith("picluster: error: shut down node[04-05]: not confirmed, nothing was done\n"), said
    assert "Shut down:" not in said  # nothing started


def test_shutdown_asks_and_goes_on_at_yes(inv_path):
    code, said = on_terminal(command_line("nodes", "shutdown", "node[04-05]", "-i", inv_path), "y")
    assert "shut down node[04-05]: go ahead? [y/N]: y\n" in said, said
    # It went on: the order, then the first thing it does, asking the Slurm controller (silent here).
    assert "Shut down: node[04-05] in this order" in said and CONTROLLER_SILENT in said, said
    assert code == 1, said


def test_a_reboot_of_every_node_asks_and_of_some_does_not(inv_path):
    code, said = on_terminal(command_line("nodes", "reboot", "all", "-i", inv_path), "n")
    assert "reboot node[01-05], every node of t: go ahead? [y/N]" in said and code == 2, said
    code, said = on_terminal(command_line("nodes", "reboot", "@workers", "-i", inv_path), None)  # routine: no prompt
    assert PROMPT not in said and "Reboot: node[02-05] in this order" in said and CONTROLLER_SILENT in said, said
    assert code == 1


def test_without_a_terminal_it_is_refused_unless_yes(inv_path):
    refused = picluster("nodes", "shutdown", "node05", "-i", inv_path, timeout=60)
    assert_one_line_usage_error(refused)
    assert refused.stderr == ("picluster: error: shut down node05 cannot be undone: not on a terminal to ask, so nothing was done; "
                              "add --yes to go ahead\n") and refused.stdout == ""
    refused = picluster("nodes", "reboot", "@all", "-i", inv_path, timeout=60)
    assert_one_line_usage_error(refused)
    assert "reboot node[01-05], every node of t cannot be undone" in refused.stderr
    for args in (("nodes", "shutdown", "node05", "--yes"), ("nodes", "reboot", "all", "-y"), ("nodes", "reboot", "@workers")):
        went = picluster(*args, "-i", inv_path, timeout=60)
        assert went.returncode == 1 and CONTROLLER_SILENT in went.stderr, went.stderr
    dry = picluster("nodes", "shutdown", "all", "-i", inv_path, "--dry-run", timeout=60)  # a dry run asks nothing
    assert dry.returncode == 0 and dry.stdout.startswith("would shut down node[01-05]"), dry.stderr


def test_a_new_munge_key_asks(inv_path):
    args = ("provision", "-i", inv_path, "--rotate-munge-key", "--only", "slurm", "--timeout", "5")
    refused = picluster(*args, timeout=120)
    assert_one_line_usage_error(refused)
    assert refused.stderr.startswith("picluster: error: replace the munge key of t on node[01-05] and restart munge and the Slurm "
                                     "daemons cannot be undone: not on a terminal"), refused.stderr
    code, said = on_terminal(command_line(*args), "n")
    assert PROMPT in said and code == 2 and said.endswith("not confirmed, nothing was done\n"), said
    code, said = on_terminal(command_line(*args), "y")
    assert code == 1 and "provisioning failed on node[01-05]" in said, said  # it went on, to nodes where nothing listens
    dry = picluster(*args, "--dry-run", timeout=120)  # asks nothing, and fails at the nodes the same way
    assert dry.returncode == 1 and "provisioning failed on node[01-05]" in dry.stderr, dry.stderr


# `lab down --all` would take down every lab on this machine, other people's too: the command runs
# here with the labs it finds and the teardown replaced (and as root, which it checks first).
LAB_DOWN = """\
import os, sys
from picluster.lab import labs, registry
registry.known_ids = lambda root=None: ["aa1", "bb2"]
labs.down_all = lambda root=None: print("TORN DOWN") or ["aa1", "bb2"]
os.geteuid = lambda: 0
from picluster.cli import main
sys.argv = ["picluster", "lab", "down", "--all", *sys.argv[1:]]
main()
"""


def test_lab_down_all_asks():
    code, said = on_terminal([sys.executable, "-c", LAB_DOWN], "n")
    assert "tear down every lab on this machine (aa1, bb2): go ahead? [y/N]: n\n" in said, said
    assert code == 2 and "TORN DOWN" not in said
    code, said = on_terminal([sys.executable, "-c", LAB_DOWN], "y")
    assert code == 0 and said.endswith("TORN DOWN\ndown: aa1, bb2\n"), said
    refused = subprocess.run([sys.executable, "-c", LAB_DOWN], capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert_one_line_usage_error(refused)
    assert "tear down every lab on this machine (aa1, bb2) cannot be undone" in refused.stderr and "TORN DOWN" not in refused.stdout
    went = subprocess.run([sys.executable, "-c", LAB_DOWN, "--yes"], capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert went.returncode == 0 and went.stdout == "TORN DOWN\ndown: aa1, bb2\n", went.stderr
