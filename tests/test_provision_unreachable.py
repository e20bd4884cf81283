"""A node that cannot be reached is one folded line that says what was seen, never a library traceback:
what each failure reads as, and `picluster provision` against real loopback listeners that accept and
close, accept and never speak, or are not there."""

import errno
import socket
import threading

import paramiko
import pytest

from picluster.cluster.ssh import BANNER_CLOSED, banner_failure, connect_failure, ssh_failure
from picluster.provision.report import show
from picluster.provision.result import Item, NodeReport, Status, StepResult, folded_summary

from conftest import picluster
from render import console, text


def _refused() -> OSError:
    return ConnectionRefusedError(errno.ECONNREFUSED, "Connection refused")


def test_connect_failures_name_what_was_seen_and_no_address():
    assert connect_failure(_refused(), 22, 10) == "nothing listens on port 22"
    wrapped = paramiko.ssh_exception.NoValidConnectionsError({("127.0.9.1", 22): _refused()})
    assert connect_failure(wrapped, 22, 10) == "nothing listens on port 22"
    assert connect_failure(TimeoutError(), 22, 10) == "no answer on port 22 within 10 s"
    assert connect_failure(TimeoutError(), 2222, 2.5) == "no answer on port 2222 within 2.5 s"
    assert connect_failure(OSError(errno.EHOSTUNREACH, "No route to host"), 22, 10) == "no route to the host (No route to host)"
    for exc in (_refused(), wrapped, TimeoutError()):
        assert "127.0" not in connect_failure(exc, 22, 10)


def test_banner_failures():
    assert banner_failure(None, 10) == BANNER_CLOSED == "connected, but the host closed the connection before the SSH banner"
    assert banner_failure(ConnectionResetError(), 10) == BANNER_CLOSED
    assert banner_failure(TimeoutError(), 10) == "connected, but no SSH banner within 10 s"
    closed, stalled = paramiko.SSHException("Error reading SSH protocol banner"), paramiko.SSHException("Error reading SSH protocol banner")
    closed.__context__, stalled.__context__ = EOFError(), TimeoutError()
    assert ssh_failure(closed, 10) == BANNER_CLOSED
    assert ssh_failure(stalled, 10) == "connected, but no SSH banner within 10 s"
    assert ssh_failure(paramiko.SSHException("No existing session"), 4) == "connected, but the SSH handshake did not finish within 4 s"
    assert ssh_failure(paramiko.SSHException("Incompatible version (1.5 instead of 2.0)"), 4) == "SSH failed: Incompatible version (1.5 instead of 2.0)"


def _unreachable(name: str, why: str) -> NodeReport:
    failure = f"unreachable: {why}"
    return NodeReport(name, [StepResult("facts", [Item("error", Status.FAILED, failure)])], unreachable=True, failure=failure)


def test_a_dry_run_plans_nothing_for_unreachable_nodes():
    from picluster.provision.report import show_plan

    reached = NodeReport("node01", [StepResult("ssh", [Item("authorized_key", Status.CHANGED, "would add the coordinator's key")])])
    out = console(width=120)
    show_plan(out, [reached] + [_unreachable(f"node0{i}", "nothing listens on port 22") for i in (2, 3)])
    assert text(out).splitlines() == ["node01: 1 change(s) planned", "  ssh authorized_key: would add the coordinator's key"]


def test_unreachable_nodes_fold_into_one_row_and_one_line():
    reports = [_unreachable(f"node0{i}", "nothing listens on port 22") for i in (1, 2, 3)]
    reports.append(_unreachable("node04", BANNER_CLOSED))
    assert folded_summary(reports) == [
        "node[01-03]: unreachable: nothing listens on port 22",
        f"node04: unreachable: {BANNER_CLOSED}",
    ]
    out = console(width=120)
    show(out, reports, ["facts"])
    shown = text(out)
    assert shown.count("node[01-03]") == 2  # its table row and its line
    assert shown.count("nothing listens on port 22") == 2  # said once in the row, once in the line
    narrow = console(width=60)
    show(narrow, reports, ["facts"])
    assert f"\nnode04: unreachable: {BANNER_CLOSED}\n" in text(narrow)  # one line, never wrapped


# Addresses no other test uses; port 22 because the inventory names no port (binding it needs root,
# as the test hosts do).
CLOSE, STALL, NOBODY = ("127.0.24.1", "127.0.24.2"), "127.0.24.3", ("127.0.24.4", "127.0.24.5")


class _Listener:
    """Accepts on address:22 and either closes each connection at once or holds it, silent."""

    def __init__(self, address: str, close: bool):
        self.sock = socket.socket()
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind((address, 22))
        self.sock.listen(8)
        self.close, self.held = close, []
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self):
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return  # stopped
            if self.close:
                conn.close()
            else:
                self.held.append(conn)

    def stop(self):
        self.sock.close()
        for conn in self.held:
            conn.close()


@pytest.fixture
def listeners():
    made = []
    try:
        made += [_Listener(a, close=True) for a in CLOSE]
        made.append(_Listener(STALL, close=False))
        yield
    finally:
        for listener in made:
            listener.stop()


@pytest.mark.lab  # binds port 22 on loopback addresses: root
def test_provision_against_hosts_that_close_stall_or_are_not_there(listeners, tmp_path):
    inv = tmp_path / "picluster.toml"
    inv.write_text('[cluster]\nname = "loop"\nuser = "pi"\nnodes = "node[01-05]"\naddresses = "127.0.24.[1-5]"\n')
    # --timeout 2 bounds the banner wait at 2 s (the default is 10 s), so the stalled node costs 2 s.
    result = picluster("provision", "--inventory", inv, "--timeout", "2", timeout=60)
    assert result.returncode == 1, result.stdout + result.stderr
    assert result.stderr == f"picluster: error: provisioning failed on node[01-05] (node01: unreachable: {BANNER_CLOSED})\n"
    assert "Traceback" not in result.stdout + result.stderr and "Exception" not in result.stdout + result.stderr
    lines = result.stdout.splitlines()
    assert lines[-3:] == [
        f"node[01-02]: unreachable: {BANNER_CLOSED}",
        "node03: unreachable: connected, but no SSH banner within 2 s",
        "node[04-05]: unreachable: nothing listens on port 22",
    ]
    assert not any("127.0.24" in line for line in lines)
