"""-v/--debug and -q on every command, typed where users type them: before the command
(`picluster -v jobs`) or after it (`picluster jobs -v`).  -v shows the commands picluster runs,
--debug more, -q only errors and the result.  The SSH side against real hosts: test_exec_lab.py."""

import os
import socket

import click
import pytest

from picluster.cli import _register, app

from conftest import picluster

INVENTORY = '[cluster]\nname = "c"\nuser = "pi"\nnodes = "node[01-02]"\naddresses = "127.0.0.[1-2]"\n'
NOTE = "picluster: using the inventory ./picluster.toml in this folder"


def commands():
    """Every command and group under picluster, with its path."""
    _register()
    found = []

    def walk(cmd, path):
        found.append((path, cmd))
        for name in getattr(cmd, "commands", {}):
            walk(cmd.commands[name], f"{path} {name}")

    walk(app, "picluster")
    return found


@pytest.mark.parametrize("path, cmd", commands(), ids=lambda x: x if isinstance(x, str) else "")
def test_every_command_and_group_takes_v_debug_and_q(path, cmd):
    opts = {opt for param in cmd.params if isinstance(param, click.Option) for opt in param.opts}
    assert {"-v", "--verbose", "--debug", "-q", "--quiet"} <= opts, path


def a_closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]  # closed again on return: nothing listens there


@pytest.mark.parametrize("where", ["before", "after"])
def test_v_shows_each_ssh_connection_and_the_nodes_failure_stays_one_line(state, tmp_path, where):
    # The nodes' SSH port, as ~/.ssh/config gives it (Fabric reads it): one where nothing listens.
    home = tmp_path / "home"
    (home / ".ssh").mkdir(parents=True)
    port = a_closed_port()
    (home / ".ssh" / "config").write_text(f"Host 127.0.0.*\n  Port {port}\n")
    env = dict(os.environ, HOME=str(home))
    inv = tmp_path / "picluster.toml"
    inv.write_text(INVENTORY)
    args = ["exec", "-i", inv, "all", "--", "hostname"]
    done = picluster("-v", *args, env=env) if where == "before" else picluster(*args[:-2], "-v", *args[-2:], env=env)
    assert done.returncode == 1, done.stderr
    lines = done.stderr.splitlines()
    assert sorted(ln for ln in lines if "connect:" in ln) == [f"[node01] connect: pi@127.0.0.1:{port}", f"[node02] connect: pi@127.0.0.2:{port}"]
    failures = [ln for ln in lines if ln.startswith("picluster: ")]
    assert failures == [f"picluster: node[01-02]: nothing listens on port {port}"], done.stderr
    # Without -v, the same command says only the failure.
    assert picluster(*args, env=env).stderr.splitlines() == failures


def test_v_shows_a_local_command_and_debug_its_exit_status(state, tmp_path):
    # The wheelhouse's pip, told to find nothing: the command it ran is shown before its failure.
    env = dict(os.environ, PIP_NO_INDEX="1", PIP_FIND_LINKS=str(tmp_path), PICLUSTER_CACHE_DIR=str(tmp_path / "cache"))
    args = ["wheelhouse", "--out", tmp_path / "wheels", "no-such-package-for-picluster==1.0"]
    verbose = picluster(*args, "-v", env=env)
    assert verbose.returncode == 1, verbose.stderr
    (ran,) = [ln for ln in verbose.stderr.splitlines() if ln.startswith("[local] run: ")]
    assert " -m pip download " in ran and " --platform manylinux_2_36_aarch64 " in ran  # the default nodes' platform
    assert verbose.stderr.splitlines()[-1].startswith("picluster: error: pip download for cp311-aarch64")
    assert "exit 1 in" not in verbose.stderr and "Traceback" not in verbose.stderr

    debug = picluster("--debug", *args, env=env)
    lines = debug.stderr.splitlines()
    ran_at = next(i for i, ln in enumerate(lines) if "picluster.provision.wheelhouse: [local] run: " in ln)
    assert lines[ran_at].endswith(" no-such-package-for-picluster==1.0")  # whole: --debug clips nothing
    assert any("picluster.provision.wheelhouse: [local] exit 1 in " in ln for ln in lines[ran_at:])
    # --debug keeps the traceback of the error, above its one line.
    assert "Traceback (most recent call last):" in debug.stderr and lines[-1] == verbose.stderr.splitlines()[-1]

    assert picluster("-vv", *args, env=env).stderr.count("Traceback") == 1  # -vv is --debug


def test_q_drops_the_notes_and_keeps_the_result(state, tmp_path):
    (tmp_path / "picluster.toml").write_text(INVENTORY)
    plain = picluster("jobs", cwd=tmp_path)
    assert plain.returncode == 0, plain.stderr
    assert plain.stderr.startswith(NOTE)
    for args in (["-q", "jobs"], ["jobs", "-q"], ["jobs", "--quiet"]):
        quiet = picluster(*args, cwd=tmp_path)
        assert quiet.returncode == 0 and quiet.stderr == "", (args, quiet.stderr)
        assert quiet.stdout == plain.stdout, args


def test_q_keeps_the_error(state, tmp_path):
    done = picluster("-q", "jobs", "-i", tmp_path / "missing.toml")
    assert done.returncode == 2
    assert done.stderr.startswith("picluster: error: ") and "no such file" in done.stderr


@pytest.mark.parametrize("args", [["-q", "jobs", "-v"], ["jobs", "-q", "--debug"], ["-v", "jobs", "--quiet"]])
def test_q_with_v_or_debug_is_refused_in_one_line(state, args):
    done = picluster(*args)
    assert done.returncode == 2 and "Traceback" not in done.stderr
    (line,) = done.stderr.splitlines()
    assert "contradict each other: give -q" in line, line


def test_v_on_the_group_and_debug_on_the_command_agree(state, tmp_path):
    done = picluster("-v", "jobs", "--debug", "-i", tmp_path / "missing.toml")
    assert done.returncode == 2 and "Traceback (most recent call last):" in done.stderr  # --debug won
