"""The cluster's munge key: one per cluster, kept by the Slurm controller.

munged signs every Slurm message with a key that must be the same on every node: a node with
another one goes DOWN ("Invalid credential").  Debian's package makes a key of its own on each
node, and a card image may carry one that every copy of the image shares, so a key counts as the
cluster's only where picluster installed it: beside it, picluster records its SHA-256 (MARKER).

Before the slurm step, ``prepare`` reads each node's key hash, record and mode (never the key
itself) and decides which key is the cluster's:

1. ``--rotate-munge-key``: a new one;
2. else the one picluster installed, as the controller holds it; if the controller holds none
   (its card was written afresh), as most of the other nodes hold it;
3. else (no node holds one: a new cluster) this machine's copy, if it has one;
4. else a new one.

The key travels only where this machine's copy is missing or differs: read once from its keeper
(``sudo base64`` over SSH), so a second coordinator takes the controller's key instead of
making another.  Each node's slurm step then installs it where the hash differs (through
``Remote.put_secret``: never a file another account can read) and says which nodes it repaired.
This machine keeps its copy 0400 in a 0700 directory (``key_path``): ansible/'s slurm role
installs from it.
"""

import base64
import binascii
import hashlib
import os
import secrets
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from picluster.model.fanout import fan_out
from picluster.provision.result import Item, Status
from picluster.provision.steps import Context, action_item
from picluster.util import atomic, paths

MUNGE_KEY = "/etc/munge/munge.key"
MARKER = "/etc/munge/munge.key.sha256"  # the hash of the key picluster installed there
KEY_BYTES = 96  # 128 characters once in base64, the size of the key Debian's munge makes
OWNED = "munge:munge 400"

_READ = (f"k={MUNGE_KEY}; if [ -e $k ]; then sha256sum < $k | cut -d' ' -f1; stat -c '%U:%G %a' $k; "
         f"else echo -; echo -; fi; cat {MARKER} 2>/dev/null || echo -")


def key_path(inv) -> Path:
    """This machine's copy of the cluster's key."""
    return paths.state_dir() / "slurm" / inv.name / "munge.key"


@dataclass(frozen=True)
class NodeKey:
    """What a node holds: its key's hash, the hash picluster recorded there, the key's owner and mode."""

    sha: str | None
    marker: str | None
    mode: str

    @property
    def installed(self) -> bool:
        """The key is one picluster installed (the record matches it)."""
        return self.sha is not None and self.marker == self.sha


@dataclass
class ClusterKey:
    """The decision ``prepare`` made for this run."""

    sha: str | None = None  # None: a new key, not made in a dry run
    data: bytes | None = None  # None in a dry run (nothing is read or made)
    origin: str = ""  # where the key comes from, for the report: "kept by the controller, node01"
    copy: str | None = None  # what became of this machine's copy, when anything did (said once, on the controller)
    error: str | None = None  # why no key can be installed (every node's step fails with it)
    rotated: bool = False
    nodes: dict[str, NodeKey | str] = field(default_factory=dict)  # node -> what it holds, or why unknown

    def short(self) -> str:
        return f"sha256 {self.sha[:12]}" if self.sha else "a new key"


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def prepare(contexts: list[Context]) -> ClusterKey:
    """Decide the cluster's key (see the module's text), reading what every live node holds."""
    ctx0 = contexts[0]
    inv, options = ctx0.inv, ctx0.options
    assert inv.slurm is not None  # run_order runs the slurm step only with [slurm]
    by_name = {c.node.name: c for c in contexts}
    held = fan_out(lambda c: _held(c), contexts, name=lambda c: c.node.name)
    decision = ClusterKey(nodes={n: (v if isinstance(v, NodeKey) else f"cannot read its munge key: {v}") for n, v in held.items()})
    copy = _read_copy(inv)
    if options.rotate_munge_key:
        decision.rotated = True
        return _new(decision, inv, options.dry_run, "rotated (--rotate-munge-key)")
    installed = {n: k.sha for n, k in decision.nodes.items() if isinstance(k, NodeKey) and k.installed and k.sha}
    controller = inv.slurm.controller
    if controller in installed:
        keeper = controller
        decision.origin = f"kept by the controller, {controller}"
    elif installed:
        sha, _ = Counter(installed.values()).most_common(1)[0]
        keeper = next(n for n, s in installed.items() if s == sha)
        why = "holds none" if isinstance(decision.nodes.get(controller), NodeKey) else "was not read"
        decision.origin = f"kept by {keeper} (the controller, {controller}, {why})"
    elif copy is not None:
        decision.sha, decision.data, decision.origin = sha256(copy), copy, "this machine's copy: no node held one"
        return decision
    elif not isinstance(decision.nodes.get(controller), NodeKey):
        # The keeper may hold a key nobody else does: making a new one would rotate the cluster's.
        decision.error = (f"the controller, {controller}, was not reached, and no other node holds the cluster's munge key: "
                          "provision again once it answers")
        return decision
    else:
        return _new(decision, inv, options.dry_run, "a new key: no node held one, nor did this machine")
    decision.sha = sha = installed[keeper]
    if copy is not None and sha256(copy) == sha:
        decision.data = copy
    elif not options.dry_run:
        decision.data = _take(by_name[keeper], sha)
        if decision.data is None:
            decision.error = f"the cluster's munge key could not be read from {keeper}"
            return decision
        _save_copy(inv, decision.data)
        decision.copy = (f"this machine's copy ({key_path(inv)}) differed from the key {keeper} keeps: replaced by it" if copy is not None
                         else f"the key {keeper} keeps, copied to this machine: {key_path(inv)}")
    return decision


def _new(decision: ClusterKey, inv, dry_run: bool, origin: str) -> ClusterKey:
    decision.origin = origin
    if not dry_run:
        data = (secrets.token_urlsafe(KEY_BYTES) + "\n").encode()
        _save_copy(inv, data)
        decision.sha, decision.data = sha256(data), data
        decision.copy = f"made on this machine, kept in {key_path(inv)}"
    return decision


def _held(ctx: Context) -> NodeKey:
    # A write cut off by a dropped connection leaves its 0600 root file beside the key: removed here.
    tidy = "" if ctx.dry_run else f"rm -f {MUNGE_KEY}.picluster-new; "
    sha, mode, marker = (ctx.remote.out(tidy + _READ, sudo=True).splitlines() + ["-"] * 3)[:3]
    return NodeKey(None if sha == "-" else sha, None if marker == "-" else marker.split()[0] if marker.split() else None,
                   "" if mode == "-" else mode)


def _take(ctx: Context, sha: str) -> bytes | None:
    """The key itself from its keeper: on the SSH channel only, and checked against its hash."""
    try:
        data = base64.b64decode(ctx.remote.out(f"base64 -w0 {MUNGE_KEY}", sudo=True), validate=True)
    except (binascii.Error, ValueError):
        return None
    return data if sha256(data) == sha else None


def _read_copy(inv) -> bytes | None:
    try:
        return key_path(inv).read_bytes()
    except FileNotFoundError:
        return None


def _save_copy(inv, data: bytes) -> None:
    path = key_path(inv)
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    os.chmod(path.parent, 0o700)
    atomic.write_bytes(path, data, mode=0o400)


def install(ctx: Context) -> tuple[list[Item], bool]:
    """This node's key made the cluster's: (its items, whether the key itself changed, so that
    munged and the Slurm daemons restart)."""
    key: ClusterKey | None = ctx.shared.munge
    if key is None:
        return [Item("munge_key", Status.FAILED, "no decision on the cluster's key")], False
    if key.error:
        return [Item("munge_key", Status.FAILED, key.error)], False
    mine = key.nodes.get(ctx.node.name)
    if not isinstance(mine, NodeKey):
        return [Item("munge_key", Status.FAILED, mine if isinstance(mine, str) else "its munge key was not read")], False
    items, changed = _install(ctx, key, mine)
    if key.copy and ctx.inv.slurm is not None and ctx.node.name == ctx.inv.slurm.controller:
        items.append(Item("munge_copy", Status.CHANGED, key.copy))
    return items, changed


def _install(ctx: Context, key: ClusterKey, mine: NodeKey) -> tuple[list[Item], bool]:
    if key.sha is not None and mine.sha == key.sha:
        items = []
        if mine.marker != key.sha:  # the key was right already (an earlier picluster): record it
            ctx.remote.write(MARKER, key.sha + "\n", current=None)
            items.append(Item("munge_key", Status.CHANGED, f"the cluster's key ({key.short()}) recorded as picluster's"))
        if mine.mode != OWNED:
            items.append(action_item(ctx, "munge_key_mode", f"chown munge:munge {MUNGE_KEY} && chmod 0400 {MUNGE_KEY}",
                                     f"make {MUNGE_KEY} munge:munge 0400 (was {mine.mode})"))
        return items or [Item("munge_key", Status.OK, f"the cluster's key ({key.short()}), munge:munge 0400")], False
    if key.data is not None:
        ctx.remote.put_secret(MUNGE_KEY, key.data, mode="0400", owner="munge", group="munge")
        ctx.remote.write(MARKER, (key.sha or "") + "\n")
    elif not ctx.dry_run:
        return [Item("munge_key", Status.FAILED, "the cluster's key is unknown")], False
    verb = "would install" if ctx.dry_run else "installed"
    if key.rotated:
        what = f"{verb} a new key ({key.short()}): rotated"
    elif mine.sha is None:
        what = f"{verb} the cluster's key ({key.short()}, {key.origin})"
    elif mine.marker is None:  # the key Debian's package (or the card's image) made: never the cluster's
        what = f"{verb} the cluster's key ({key.short()}, {key.origin}) in place of the one its package made"
    else:  # picluster had installed a key here, and the node now holds another
        what = f"{'would repair' if ctx.dry_run else 'repaired'}: it held another key; {verb} the cluster's ({key.short()}, {key.origin})"
    return [Item("munge_key", Status.CHANGED, what)], True
