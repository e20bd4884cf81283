"""Which SSH host keys picluster trusts: one policy for every connection it makes.

The default behaves as OpenSSH's ``StrictHostKeyChecking=accept-new``:

- keys are read from ``~/.ssh/known_hosts`` and from picluster's own file, ``known_hosts`` in the
  state directory (``paths.state_dir()``);
- a node whose address neither file names is accepted on first contact: its key is pinned in
  picluster's file and its fingerprint printed once, on stderr;
- a node that presents any other key than the one known for its address is refused before
  anything is sent to it (no login, no command, no file), in one line with both fingerprints.

``strict(FILE)`` (``provision --known-hosts FILE``) trusts the keys in FILE only, and refuses an
unknown node too.  The files are read by knownhosts.py, which refuses a malformed one whole.

    policy = current()                      # the process's policy; use(strict(path)) replaces it
    client.set_missing_host_key_policy(policy)   # paramiko calls it for every key (none is loaded)
    kwargs["disabled_algorithms"] = {"keys": policy.unwanted("10.0.0.11")}  # present a known type

A node written afresh has a new key: ``replace`` pins it in place of the old entries
(``provision --replaced``).
"""

import os
from collections.abc import Callable, Iterable
from pathlib import Path

import paramiko

from picluster.cluster import knownhosts
from picluster.cluster.knownhosts import Entry, fingerprint
from picluster.util import paths, verbosity
from picluster.util.errors import ClusterError

FILE_NAME = "known_hosts"  # picluster's own, in the state directory

# Host-key algorithms a key type is presented with (paramiko's names): a node known by an RSA key
# must be asked for an RSA signature, else it presents its Ed25519 key and looks changed.
_ALGORITHMS = {
    "ssh-ed25519": ("ssh-ed25519",),
    "ecdsa-sha2-nistp256": ("ecdsa-sha2-nistp256",),
    "ecdsa-sha2-nistp384": ("ecdsa-sha2-nistp384",),
    "ecdsa-sha2-nistp521": ("ecdsa-sha2-nistp521",),
    "ssh-rsa": ("rsa-sha2-512", "rsa-sha2-256", "ssh-rsa"),
}
_ALL_ALGORITHMS = tuple(a for algs in _ALGORITHMS.values() for a in algs)


class HostKeyRefused(ClusterError):
    """A node's key is not one this policy trusts: nothing was sent to it."""

    def __init__(self, host: str, why: str, fix: str) -> None:
        super().__init__(f"host key of {host} {why}: {fix}")
        self.host, self.why, self.fix = host, why, fix

    def named(self, node: str) -> "HostKeyRefused":
        """The same refusal with the node's name in the fix, where the caller knows it."""
        return HostKeyRefused(self.host, self.why, self.fix.replace("NODE", node))


def own_file() -> Path:
    """picluster's own known_hosts, in the state directory."""
    return paths.state_dir() / FILE_NAME


def user_file() -> Path:
    """OpenSSH's: what `ssh` itself trusts."""
    return Path(os.path.expanduser("~/.ssh/known_hosts"))


def announce_stderr(line: str) -> None:
    verbosity.say(f"picluster: {line}")  # as ssh says "Permanently added": not under -q


class Policy(paramiko.MissingHostKeyPolicy):
    """What every connection is checked against.  No key is loaded into paramiko's client, so
    paramiko hands every key it is offered to ``missing_host_key``, which decides alone.

    ``files``: read, in order; ``pin_to``: where a new node's key is pinned (None: strict, an
    unknown node is refused)."""

    def __init__(self, files: Iterable[Path], pin_to: Path | None, announce: Callable[[str], None] = announce_stderr):
        self.files = tuple(files)
        self.pin_to = pin_to
        self.announce = announce

    @property
    def strict(self) -> bool:
        return self.pin_to is None

    def check_files(self) -> None:
        """Read every file now: a malformed or unreadable one is refused before any connection."""
        self.entries()

    def entries(self) -> list[Entry]:
        return [e for path in self.files for e in knownhosts.read(path, missing_ok=not self.strict)]

    def known(self, host: str) -> list[Entry]:
        """The entries that name ``host`` (certificate authorities aside: picluster checks plain keys)."""
        return [e for e in self.entries() if e.names(host) and e.marker != "@cert-authority"]

    def unwanted(self, host: str) -> list[str]:
        """Host-key algorithms to turn off for ``host``, so that a known node presents a key of a
        type it is known by (none for an unknown node: it presents its preferred one)."""
        types = {e.keytype for e in self.known(host) if not e.marker}
        wanted = {a for t in types for a in _ALGORITHMS.get(t, ())}
        return [a for a in _ALL_ALGORITHMS if a not in wanted] if wanted else []

    def verdict(self, host: str, key: paramiko.PKey) -> str | None:
        """None when ``key`` is trusted for ``host``; else why not ("unknown", or a refusal)."""
        blob = key.asbytes()
        entries = self.known(host)
        if any(e.marker == "@revoked" and e.blob == blob for e in entries):
            return "revoked"
        plain = [e for e in entries if not e.marker]
        if any(e.blob == blob for e in plain):
            return None
        return "changed" if plain else "unknown"

    def missing_host_key(self, client, hostname: str, key: paramiko.PKey) -> None:
        verdict = self.verdict(hostname, key)
        if verdict is None:
            return
        offered = f"{key.get_name()} {fingerprint(key)}"
        if verdict == "revoked":
            raise HostKeyRefused(hostname, f"is revoked (it offers {offered}, marked @revoked)",
                                 f"find out who answers at {hostname}")
        if verdict == "changed":
            raise self._changed(hostname, offered)
        if self.strict:
            raise HostKeyRefused(hostname, f"is not in {self.files[0]} (it offers {offered})",
                                 "add it there after checking its fingerprint, or leave out --known-hosts")
        assert self.pin_to is not None
        with knownhosts.locked(self.pin_to):
            verdict = self.verdict(hostname, key)  # another thread or process may have pinned it meanwhile
            if verdict == "changed":
                raise self._changed(hostname, offered)
            if verdict is None:
                return
            knownhosts.append(self.pin_to, f"{hostname} {key.get_name()} {key.get_base64()}")
        self.announce(f"first contact with {hostname}: its host key {offered} is now pinned in {self.pin_to}")

    def no_known_type(self, host: str) -> HostKeyRefused:
        """Asked for the key types it is known by only, the node offered none of them."""
        return self._changed(host, "no key of those types")

    def _changed(self, host: str, offered: str) -> HostKeyRefused:
        known = "; ".join(e.describe() for e in self.known(host) if not e.marker)
        return HostKeyRefused(host, f"changed: it offers {offered}, known {known}",
                              "if its card was written afresh, 'picluster provision --replaced NODE' pins the new key; "
                              f"otherwise find out who answers at {host}")


def accept_new(announce: Callable[[str], None] = announce_stderr) -> Policy:
    """The default: ~/.ssh/known_hosts and picluster's file; a new node is pinned in picluster's."""
    return Policy((user_file(), own_file()), own_file(), announce)


def strict(path: Path) -> Policy:
    """Only the keys in ``path`` (which must exist and be well formed: checked here)."""
    policy = Policy((Path(path),), None)
    policy.check_files()
    return policy


_CURRENT: list[Policy] = []


def current() -> Policy:
    """The process's policy: the one ``use`` set, else the default (made afresh: the state
    directory may differ from one call to the next, as in tests)."""
    return _CURRENT[-1] if _CURRENT else accept_new()


def use(policy: Policy | None) -> None:
    """Make ``policy`` the process's (None: back to the default)."""
    _CURRENT[:] = [policy] if policy is not None else []


def replace(host: str, key: paramiko.PKey, policy: Policy, dry_run: bool = False) -> tuple[list[Path], list[str]]:
    """A node written afresh: ``key`` pinned for ``host`` in place of the old entries, in the
    policy's file (the --known-hosts file, or picluster's) and in picluster's own; the old
    entries for ``host`` are removed from ~/.ssh/known_hosts too, so no file still trusts the old
    card.  Returns (the files pinned in, the fingerprints replaced)."""
    targets = [policy.files[0]] if policy.strict else []
    targets.append(own_file())
    targets = list(dict.fromkeys(targets))
    replaced: list[str] = []
    for path in dict.fromkeys([*targets, *policy.files, user_file()]):
        old = knownhosts.own_entries(path, host)
        replaced += [fp for fp in (fingerprint(e.blob) for e in old) if fp not in replaced]
        if not dry_run and (path in targets or old):
            knownhosts.replace(path, host, f"{key.get_name()} {key.get_base64()}" if path in targets else None)
    return targets, replaced
