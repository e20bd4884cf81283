"""Step 8, Python runtime: a virtualenv on each node holding picluster and TensorFlow, installed
from wheels the coordinator downloaded once, so the nodes need no internet.

An existing venv in which the wanted modules import (checked with importlib.util.find_spec, so
without the seconds TensorFlow takes to import) is left alone.  Otherwise, once per kind of node
(machine, Python, C library, as facts read them), the coordinator builds picluster's wheel and
downloads every wheel it needs for that kind (wheelhouse.py: ``pip download --platform ...
--only-binary=:all:``, cached on the coordinator).  Then:

- where the node mounts the NFS share, the wheels are staged once on the share
  (``<data_dir>/.picluster/wheels/``, uploaded through the first node that gets there) and every
  node reads them from its mount;
- where there is no share (the mount is not there, e.g. a kernel without NFS), they are pushed to
  the node over SFTP (``~/.cache/picluster/wheels/``) and removed after the install;

and each node runs ``pip install --no-index --find-links <wheels>``.  A directory of wheels is
written beside its final name and renamed into place with its MANIFEST.json, so a half-staged one
is never used.
"""

import secrets
from dataclasses import dataclass
from pathlib import Path

from picluster.cluster.nodecluster import RUN_DIR, START_SCRIPT
from picluster.provision import templates, wheelhouse
from picluster.provision.result import Item, Status
from picluster.provision.steps import NO_SYSTEMD, Context, Runtime, action_item, file_item, q
from picluster.util.errors import ClusterError

TF_ARCHES = ("aarch64", "x86_64")
PIP_TIMEOUT = 3600.0
PUSHED = ".cache/picluster/wheels"  # under the user's home, where there is no share
STAGED = ".picluster/wheels"  # under the share's mount point
UNIT = "picluster-node.service"  # starts the node's tasks at boot (files/picluster-node.service.j2)


@dataclass(frozen=True)
class Bundle:
    """The wheels for one kind of node, and what to install from them."""

    house: wheelhouse.Wheelhouse
    own_wheel: Path | None  # picluster's, installed by path; None for a custom requirement set
    install: tuple[str, ...]  # what pip installs: picluster's wheel name, or the requirements


def probe_script(imports: tuple[str, ...]) -> str:
    return (
        "import importlib.util as u, importlib.metadata as m, sys\n"
        f"names = {list(imports)!r}\n"
        "missing = [n for n in names if u.find_spec(n) is None]\n"
        "def v(n):\n"
        "    for d in (n.replace('_', '-'), n, n + '-cpu'):\n"
        "        try:\n"
        "            return m.version(d)\n"
        "        except m.PackageNotFoundError:\n"
        "            pass\n"
        "    return '?'\n"
        "if missing:\n"
        "    print('missing: ' + ' '.join(missing))\n"
        "    sys.exit(1)\n"
        "print(', '.join(n + ' ' + v(n) for n in names))\n"
    )


def venv_path(ctx: Context) -> str:
    path = ctx.options.venv  # as cluster.venv: absolute, or under the home ("~/x" or "x")
    return path if path.startswith("/") else f"{ctx.facts.home}/{path.removeprefix('~/')}"


def run(ctx: Context):
    failed = False
    for item in _venv(ctx):
        failed = failed or item.status is Status.FAILED
        yield item
    if not failed:
        yield from at_boot(ctx)


def at_boot(ctx: Context):
    """The unit that runs the start script `cluster up` left (if any) at every boot, so a rebooted
    node's tasks come back without a `cluster up`."""
    if not ctx.facts.systemd:
        yield Item("at_boot", Status.SKIPPED, f"{NO_SYSTEMD}: the tasks start with 'picluster cluster up' only")
        return
    path = f"/etc/systemd/system/{UNIT}"
    script = f"{ctx.facts.home}/{RUN_DIR}/{START_SCRIPT}"
    unit = file_item(ctx, "unit", path, templates.render(f"{UNIT}.j2", user=ctx.inv.user, start_script=script))
    yield unit
    if unit.status is Status.CHANGED and not ctx.dry_run:
        ctx.remote.run("systemctl daemon-reload", sudo=True)
    if ctx.remote.ok(f"systemctl is-enabled --quiet {UNIT}"):
        yield Item("at_boot", Status.OK, f"{UNIT} enabled")
    else:
        yield action_item(ctx, "at_boot", f"systemctl enable --quiet {UNIT}", f"enable {UNIT}")


def _venv(ctx: Context):
    runtime: Runtime = ctx.options.runtime
    venv = venv_path(ctx)
    python = f"{venv}/bin/python"
    probe = ctx.remote.run(f"test -x {q(python)} && {q(python)} -c {q(probe_script(runtime.imports))}", check=False)
    if probe.exited == 0:
        yield Item("venv", Status.OK, f"{venv}: {probe.stdout.strip()}")
        return
    if ctx.facts.arch not in TF_ARCHES:
        yield Item("venv", Status.FAILED, f"TensorFlow has no {ctx.facts.arch} wheels: use a 64-bit OS")
        return
    target = wheelhouse.Platform.of(ctx.facts.arch, ctx.facts.python, ctx.facts.glibc)
    share = _share(ctx)
    where = f"the share ({share})" if share else "the node (no share mounted)"
    if ctx.dry_run:
        yield Item("venv", Status.CHANGED, f"would install {runtime.describe()} for {target.key} into {venv}, wheels via {where}")
        return
    bundle = _bundle(ctx, target)
    if share:
        base = f"{share}/{STAGED}"
        with ctx.shared.lock:  # one node uploads; the others wait, then read the share
            staged = [_stage(ctx, base, bundle.house.name, bundle.house.dir, bundle.house.files)]
            if bundle.own_wheel:
                staged.append(_stage(ctx, base, f"picluster-{_digest(bundle.own_wheel)}", bundle.own_wheel.parent, {bundle.own_wheel.name: ""}))
    else:
        base = f"{ctx.facts.home}/{PUSHED}"
        staged = [_stage(ctx, base, bundle.house.name, bundle.house.dir, bundle.house.files)]
        if bundle.own_wheel:
            staged.append(_stage(ctx, base, f"picluster-{_digest(bundle.own_wheel)}", bundle.own_wheel.parent, {bundle.own_wheel.name: ""}))
    try:
        if not ctx.remote.ok(f"test -x {q(python)}"):
            if venv.startswith("/"):
                # Outside the home (/opt/picluster-venv with [users]): made by root, owned by the
                # inventory's user, who installs into it; 0755, so every account runs it.
                user = q(ctx.inv.user)
                ctx.remote.run(f"test -d {q(venv)} || install -d -o {user} -g $(id -g {user}) -m 0755 {q(venv)}", sudo=True)
            ctx.remote.run(f"python3 -m venv {q(venv)}", timeout=600)
        links = " ".join(f"--find-links {q(d)}" for d in staged)
        wanted = " ".join(q(f"{staged[-1]}/{name}") if name.endswith(".whl") else q(name) for name in bundle.install)
        ctx.remote.run(
            f"{q(python)} -m pip install -q --disable-pip-version-check --no-cache-dir --no-index {links} {wanted}",
            timeout=PIP_TIMEOUT,
        )
    finally:
        if not share:  # pushed for this install only; the directories above it go too when empty
            parents = [base, base.rsplit("/", 1)[0], f"{ctx.facts.home}/.cache"]
            ctx.remote.run(f"rm -rf {' '.join(q(d) for d in staged)}; rmdir {' '.join(q(d) for d in parents)} 2>/dev/null", check=False)
    check = ctx.remote.run(f"{q(python)} -c {q(probe_script(runtime.imports))}", check=False)
    if check.exited != 0:
        yield Item("venv", Status.FAILED, f"{venv}: installed, yet {check.stdout.strip() or 'the check failed'}")
        return
    yield Item("venv", Status.CHANGED, f"{venv}: {check.stdout.strip()} (--no-index, wheels via {where})")


def _share(ctx: Context) -> str | None:
    """The share's mount point on this node, when the master's share is mounted there."""
    mnt = str(ctx.inv.data_dir)
    source = ctx.remote.run(f"findmnt -n -o SOURCE --mountpoint {q(mnt)}", check=False).stdout.strip()
    return mnt if source == f"{ctx.master_address}:{ctx.inv.share_dir}" else None


def _bundle(ctx: Context, target: wheelhouse.Platform) -> Bundle:
    """The wheels for `target`, made once per run whatever the number of nodes (a failure too)."""
    shared = ctx.shared
    with shared.lock:
        found = shared.bundles.get(target.key)
        if found is None:
            try:
                found = _make_bundle(ctx, target)
            except ClusterError as exc:
                found = exc
            shared.bundles[target.key] = found
    if isinstance(found, ClusterError):
        raise found
    return found


def _make_bundle(ctx: Context, target: wheelhouse.Platform) -> Bundle:
    runtime: Runtime = ctx.options.runtime
    if runtime.requirements:
        requirements = wheelhouse.check_requirements(list(runtime.requirements))
        return Bundle(wheelhouse.download(target, requirements), None, tuple(requirements))
    wheel = build_wheel(ctx)
    house = wheelhouse.download(target, wheelhouse.requirements_of(wheel, target))
    return Bundle(house, wheel, (wheel.name,))


def _stage(ctx: Context, base: str, name: str, source: Path, files: dict[str, str]) -> str:
    """`source`'s files as `base/name` on the node, unless a whole copy is there; returns its path."""
    final = f"{base}/{name}"
    remote = ctx.remote
    if remote.ok(f"test -f {q(final)}/{wheelhouse.MANIFEST}"):
        return final
    partial = f"{base}/.{name}.partial-{secrets.token_hex(4)}"
    remote.run(f"mkdir -p {q(partial)}")
    try:
        for file in sorted(files):
            try:
                remote.conn.put(str(source / file), remote=f"{partial}/{file}")
            except Exception as exc:  # paramiko and socket errors alike: this node's copy failed
                raise ClusterError(f"copying {file} to {partial}: {type(exc).__name__}: {exc}") from None
        remote.upload(wheelhouse.Wheelhouse(source, files).manifest_text(), f"{partial}/{wheelhouse.MANIFEST}")
        remote.run(f"mv -T {q(partial)} {q(final)} 2>/dev/null || test -f {q(final)}/{wheelhouse.MANIFEST}")
    finally:
        remote.run(f"rm -rf {q(partial)}", check=False)
    return final


def _digest(path: Path) -> str:
    return wheelhouse.sha256(path)[:12]


def build_wheel(ctx: Context) -> Path:
    """picluster's wheel, built on the coordinator once per run whatever the number of nodes
    (the caller holds the shared lock; the runner removes it at the end)."""
    if ctx.shared.wheel is None:
        ctx.shared.wheel = wheelhouse.own_wheel(ctx.options.source_dir)
    return ctx.shared.wheel
