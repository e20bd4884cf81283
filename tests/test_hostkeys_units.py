"""The host-key policy of every SSH connection (picluster/cluster/hostkeys.py), without a network:
known_hosts as OpenSSH writes it, what is trusted, pinned or refused, and that no code path
opens an SSH connection anywhere but through ``cluster.ssh.connect``.  The same policy against
real sshd hosts, an impostor among them: tests/test_trust_lab.py."""

import ast
import base64
import hashlib
import hmac
import threading
from pathlib import Path

import paramiko
import pytest

from picluster.cluster import hostkeys, knownhosts
from picluster.cluster.hostkeys import HostKeyRefused
from picluster.cluster.knownhosts import fingerprint
from picluster.lab import keys
from picluster.util.errors import UsageError

from conftest import ROOT


@pytest.fixture
def home(tmp_path, monkeypatch):
    """A private HOME (~/.ssh/known_hosts) and state directory (picluster's own file)."""
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("PICLUSTER_STATE_DIR", str(tmp_path / "state"))
    (tmp_path / "home" / ".ssh").mkdir(parents=True)
    return tmp_path / "home"


def ed25519(tmp_path: Path, name: str) -> paramiko.PKey:
    pair = keys.make_keypair(tmp_path / "keys" / name, name)
    return paramiko.Ed25519Key.from_private_key_file(str(pair.private_path))


def line(host: str, key: paramiko.PKey) -> str:
    return f"{host} {key.get_name()} {key.get_base64()}"


def hashed(host: str, salt: bytes = b"0123456789abcdef0123") -> str:
    digest = hmac.new(salt, host.encode(), hashlib.sha1).digest()
    return f"|1|{base64.b64encode(salt).decode()}|{base64.b64encode(digest).decode()}"


def collect() -> tuple[list[str], hostkeys.Policy]:
    said: list[str] = []
    return said, hostkeys.accept_new(announce=said.append)


# -- reading known_hosts ---------------------------------------------------------------------------

@pytest.mark.parametrize(("field", "host", "named"), [
    ("10.0.0.3", "10.0.0.3", True),
    ("10.0.0.30", "10.0.0.3", False),
    ("node03,10.0.0.3", "10.0.0.3", True),
    ("[10.0.0.3]:22", "10.0.0.3", True),
    ("[10.0.0.3]:2222", "10.0.0.3", False),
    ("10.0.0.3", "[10.0.0.3]:2222", False),
    ("[10.0.0.3]:2222", "[10.0.0.3]:2222", True),
    ("10.0.0.*", "10.0.0.3", True),
    ("10.0.0.*,!10.0.0.3", "10.0.0.3", False),
    ("10.0.0.?", "10.0.0.31", False),
    (hashed("10.0.0.3"), "10.0.0.3", True),
    (hashed("10.0.0.3"), "10.0.0.4", False),
    ("|1|notbase64|x", "10.0.0.3", False),
])
def test_host_fields_are_read_as_openssh_reads_them(field, host, named):
    assert knownhosts.names(field, host) is named


@pytest.mark.parametrize(("text", "why"), [
    ("10.0.0.3 ssh-ed25519\n", "want: hosts keytype base64-key"),
    ("10.0.0.3 ssh-ed25519 not*base64\n", "the key is not base64"),
    ("@trusted 10.0.0.3 ssh-ed25519 AAAA\n", "unknown marker @trusted"),
])
def test_a_malformed_line_is_refused_with_its_file_and_number(tmp_path, text, why):
    path = tmp_path / "kh"
    path.write_text("# a comment\n\n" + text)
    with pytest.raises(UsageError, match=rf"{path}, line 3: not a known_hosts entry \({why}\); fix or remove that line"):
        hostkeys.strict(path)


def test_a_key_that_does_not_name_its_own_type_is_malformed(tmp_path):
    key = ed25519(tmp_path, "k")
    path = tmp_path / "kh"
    path.write_text(f"10.0.0.3 ssh-rsa {key.get_base64()}\n")
    with pytest.raises(UsageError, match=r"line 1: .*the key is not a ssh-rsa key"):
        hostkeys.strict(path)


def test_a_missing_or_unreadable_strict_file_is_refused_but_a_missing_default_one_is_empty(tmp_path, home):
    with pytest.raises(UsageError, match=r"known_hosts file .*nope: no such file"):
        hostkeys.strict(tmp_path / "nope")
    (tmp_path / "dir").mkdir()
    with pytest.raises(UsageError, match=r"known_hosts file .*dir: cannot read: Is a directory"):
        hostkeys.strict(tmp_path / "dir")
    (tmp_path / "bin").write_bytes(b"\xff\xfe\x00")
    with pytest.raises(UsageError, match="not a text file"):
        hostkeys.strict(tmp_path / "bin")
    hostkeys.accept_new().check_files()  # neither ~/.ssh/known_hosts nor picluster's exists yet: fine


# -- the policy ------------------------------------------------------------------------------------

def test_a_known_key_passes_whichever_file_holds_it(tmp_path, home):
    mine, other = ed25519(tmp_path, "mine"), ed25519(tmp_path, "other")
    (home / ".ssh" / "known_hosts").write_text(line(hashed("10.0.0.3"), mine) + "\n")
    said, policy = collect()
    policy.missing_host_key(None, "10.0.0.3", mine)  # returns: trusted
    hostkeys.own_file().parent.mkdir(parents=True)
    hostkeys.own_file().write_text(line("10.0.0.4", other) + "\n")
    policy.missing_host_key(None, "10.0.0.4", other)
    assert said == [] and hostkeys.own_file().read_text() == line("10.0.0.4", other) + "\n"  # nothing pinned again


def test_a_changed_key_is_refused_with_both_fingerprints_and_the_fix(tmp_path, home):
    old, impostor = ed25519(tmp_path, "old"), ed25519(tmp_path, "impostor")
    known = home / ".ssh" / "known_hosts"
    known.write_text(line("10.0.0.3", old) + "\n")
    said, policy = collect()
    with pytest.raises(HostKeyRefused) as refused:
        policy.missing_host_key(None, "10.0.0.3", impostor)
    text = str(refused.value.named("node03"))
    assert text == (f"host key of 10.0.0.3 changed: it offers ssh-ed25519 {fingerprint(impostor)}, known ssh-ed25519 "
                    f"{fingerprint(old)} ({known}:1): if its card was written afresh, 'picluster provision --replaced node03' "
                    "pins the new key; otherwise find out who answers at 10.0.0.3")
    assert said == [] and not hostkeys.own_file().exists()  # the impostor's key is pinned nowhere


def test_a_key_of_another_type_than_the_known_one_is_a_changed_key_not_a_new_one(tmp_path, home):
    known, rsa = ed25519(tmp_path, "known"), paramiko.RSAKey.generate(1024)
    (home / ".ssh" / "known_hosts").write_text(line("10.0.0.3", known) + "\n")
    said, policy = collect()
    with pytest.raises(HostKeyRefused, match="changed: it offers ssh-rsa"):
        policy.missing_host_key(None, "10.0.0.3", rsa)
    assert said == []


def test_a_new_node_is_accepted_once_pinned_and_announced_once(tmp_path, home):
    key = ed25519(tmp_path, "new")
    said, policy = collect()
    policy.missing_host_key(None, "10.0.0.5", key)
    policy.missing_host_key(None, "10.0.0.5", key)
    own = hostkeys.own_file()
    assert own.read_text() == line("10.0.0.5", key) + "\n" and oct(own.stat().st_mode & 0o777) == "0o600"
    assert said == [f"first contact with 10.0.0.5: its host key ssh-ed25519 {fingerprint(key)} is now pinned in {own}"]
    with pytest.raises(HostKeyRefused, match="changed"):  # from now on, that key only
        policy.missing_host_key(None, "10.0.0.5", ed25519(tmp_path, "later"))


def test_threads_meeting_a_new_node_at_once_pin_it_once(tmp_path, home):
    key = ed25519(tmp_path, "new")
    said, policy = collect()
    threads = [threading.Thread(target=policy.missing_host_key, args=(None, "10.0.0.6", key)) for _ in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert hostkeys.own_file().read_text() == line("10.0.0.6", key) + "\n" and len(said) == 1


def test_strict_trusts_its_file_only_and_refuses_an_unknown_node(tmp_path, home):
    mine, elsewhere = ed25519(tmp_path, "mine"), ed25519(tmp_path, "elsewhere")
    path = tmp_path / "kh"
    path.write_text(line("10.0.0.3", mine) + "\n")
    (home / ".ssh" / "known_hosts").write_text(line("10.0.0.4", elsewhere) + "\n")
    policy = hostkeys.strict(path)
    policy.missing_host_key(None, "10.0.0.3", mine)
    with pytest.raises(HostKeyRefused, match=f"host key of 10.0.0.4 is not in {path}"):
        policy.missing_host_key(None, "10.0.0.4", elsewhere)
    assert not hostkeys.own_file().exists()


def test_a_revoked_key_is_refused_even_beside_a_matching_entry(tmp_path, home):
    key = ed25519(tmp_path, "stolen")
    (home / ".ssh" / "known_hosts").write_text(f"{line('10.0.0.3', key)}\n@revoked * {key.get_name()} {key.get_base64()}\n")
    with pytest.raises(HostKeyRefused, match="is revoked"):
        collect()[1].missing_host_key(None, "10.0.0.3", key)


def test_a_known_node_is_asked_for_a_key_of_the_type_it_is_known_by(tmp_path, home):
    rsa = paramiko.RSAKey.generate(1024)
    (home / ".ssh" / "known_hosts").write_text(line("10.0.0.3", rsa) + "\n")
    policy = hostkeys.accept_new()
    off = policy.unwanted("10.0.0.3")
    assert "ssh-ed25519" in off and "ecdsa-sha2-nistp256" in off and not {"rsa-sha2-512", "rsa-sha2-256"} & set(off)
    assert policy.unwanted("10.0.0.9") == []  # unknown: it presents its preferred key


def test_connect_hands_every_key_to_the_policy_and_loads_none(tmp_path, home):
    from picluster.cluster.ssh import connect

    key = ed25519(tmp_path, "k")
    (home / ".ssh" / "known_hosts").write_text(line("10.0.0.3", key) + "\n")
    policy = hostkeys.accept_new()
    conn = connect("10.0.0.3", "pi", None, 5.0, policy)
    assert conn.client._policy is policy
    assert not conn.client._system_host_keys.keys() and not conn.client.get_host_keys().keys()
    assert "ssh-ed25519" not in conn.connect_kwargs["disabled_algorithms"]["keys"]
    default = connect("10.0.0.4", "pi", None, 5.0)  # no policy given: the process's (accept-new here)
    assert isinstance(default.client._policy, hostkeys.Policy) and not default.client._policy.strict
    hostkeys.use(hostkeys.strict(home / ".ssh" / "known_hosts"))
    try:
        assert connect("10.0.0.3", "pi", None, 5.0).client._policy.strict
    finally:
        hostkeys.use(None)


# -- a card written afresh -------------------------------------------------------------------------

def test_replacing_a_key_pins_it_everywhere_the_old_one_was_trusted(tmp_path, home):
    old, new, other = ed25519(tmp_path, "old"), ed25519(tmp_path, "new"), ed25519(tmp_path, "other")
    user = home / ".ssh" / "known_hosts"
    user.write_text(f"# mine\n{line('10.0.0.2', other)}\n{line(hashed('10.0.0.3'), old)}\n{line('[10.0.0.3]:22', old)}\n"
                    f"{line('10.0.0.30', other)}\n{line('10.0.0.*', other)}\n")
    own = hostkeys.own_file()
    own.parent.mkdir(parents=True)
    own.write_text(line("10.0.0.3", old) + "\n")
    before = user.read_text()
    policy = hostkeys.accept_new()
    assert hostkeys.replace("10.0.0.3", new, policy, dry_run=True) == ([own], [fingerprint(old)])
    assert user.read_text() == before and own.read_text() == line("10.0.0.3", old) + "\n"  # a dry run writes nothing
    assert hostkeys.replace("10.0.0.3", new, policy) == ([own], [fingerprint(old)])
    assert own.read_text() == line("10.0.0.3", new) + "\n"
    assert user.read_text().splitlines() == ["# mine", line("10.0.0.2", other), line("10.0.0.30", other), line("10.0.0.*", other)]
    strict_file = tmp_path / "kh"
    strict_file.write_text(line("10.0.0.3", old) + "\n")
    pinned, _ = hostkeys.replace("10.0.0.3", new, hostkeys.strict(strict_file))
    assert pinned == [strict_file, own] and strict_file.read_text() == line("10.0.0.3", new) + "\n"


# -- every connection through connect() ------------------------------------------------------------

# Only these make SSH connections: connect() (Fabric, with the policy) and presented() (the key
# exchange alone, for --replaced).  Any other client would check no host key.
_SSH_CLIENTS = {"Connection", "SSHClient", "Transport", "AutoAddPolicy", "WarningPolicy"}
_KEY_METHODS = {"set_missing_host_key_policy", "load_system_host_keys", "load_host_keys"}  # whatever the object
_ALLOWED = {"picluster/cluster/ssh.py": {"Connection", "Transport", "set_missing_host_key_policy"}}


def _python_files():
    for folder in ("picluster", "benchmarks"):
        # Not benchmarks/results/: the benchmarks' output (git ignores it), such as har_startup's exported revisions.
        yield from sorted(p for p in (ROOT / folder).rglob("*.py") if (ROOT / "benchmarks" / "results") not in p.parents)


def ssh_clients(tree: ast.AST) -> list[tuple[int, str]]:
    """(line, name) of each SSH client class or host-key method a module uses: fabric.X and
    paramiko.X attributes, names imported from fabric or paramiko, and the host-key methods."""
    libraries = {"fabric", "paramiko"}
    imported = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] in libraries:
            imported |= {a.asname or a.name for a in node.names}
        elif isinstance(node, ast.Import):
            libraries |= {a.asname for a in node.names if a.asname and a.name.split(".")[0] in ("fabric", "paramiko")}
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute):
            base = node.value
            while isinstance(base, ast.Attribute):
                base = base.value
            if node.attr in _KEY_METHODS or (node.attr in _SSH_CLIENTS and isinstance(base, ast.Name) and base.id in libraries):
                found.append((node.lineno, node.attr))
        elif isinstance(node, ast.Name) and node.id in _SSH_CLIENTS and node.id in imported:
            found.append((node.lineno, node.id))
    return found


def test_the_scan_finds_every_way_of_making_a_client():
    code = ("import fabric\nimport paramiko\nimport paramiko as pk\nfrom paramiko.client import SSHClient\n"
            "fabric.Connection('h'); paramiko.client.SSHClient(); pk.Transport(s); SSHClient()\n"
            "c.set_missing_host_key_policy(p); sqlite3.Connection\n")
    assert sorted(name for _, name in ssh_clients(ast.parse(code))) == ["Connection", "SSHClient", "SSHClient", "Transport",
                                                                       "set_missing_host_key_policy"]


def test_no_code_path_opens_an_ssh_connection_but_through_connect():
    found = []
    for path in _python_files():
        rel = str(path.relative_to(ROOT))
        for lineno, name in ssh_clients(ast.parse(path.read_text(), rel)):
            if name not in _ALLOWED.get(rel, set()):
                found.append(f"{rel}:{lineno} {name}")
    assert found == []


def test_ssh_run_as_a_program_always_names_a_config_that_checks_host_keys():
    """``ssh`` and ``scp`` run as programs (the lab's ``ssh -F``) read the lab's config, which says
    StrictHostKeyChecking yes and the lab's known_hosts."""
    found = []
    for path in _python_files():
        rel = str(path.relative_to(ROOT))
        for node in ast.walk(ast.parse(path.read_text(), rel)):
            if isinstance(node, ast.List) and node.elts and isinstance(node.elts[0], ast.Constant) and node.elts[0].value in ("ssh", "scp", "sftp"):
                args = [e.value if isinstance(e, ast.Constant) else None for e in node.elts[1:]]
                if "-F" not in args:
                    found.append(f"{rel}:{node.lineno}")
    assert found == []
    from picluster.lab.ssh import config_entry

    entry = config_entry(type("H", (), {"name": "node01", "address": "10.0.0.11"})(), "pi", Path("/k"), Path("/kh"))
    assert "StrictHostKeyChecking yes" in entry and "UserKnownHostsFile /kh" in entry
