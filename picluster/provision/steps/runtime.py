"""Step 8, Python runtime: a virtualenv with picluster and TensorFlow on each node, made once.

An existing venv in which both import (checked with importlib.util.find_spec, so without the
seconds TensorFlow takes to import) is left alone.  Otherwise: `python3 -m venv`, then pip
installs a picluster wheel built once on the coordinator and copied over, and TensorFlow from
the package index (aarch64 wheels exist for TensorFlow 2.21 on Python 3.11).
"""

import subprocess
import sys
import tempfile
from pathlib import Path

from picluster.errors import ClusterError
from picluster.provision.result import Item, Status
from picluster.provision.steps import Context, q

TF_ARCHES = ("aarch64", "x86_64")
PIP_TIMEOUT = 3600.0
_CHECK = (
    "import importlib.util as u, importlib.metadata as m, sys\n"
    "missing = [n for n in ('picluster', 'tensorflow') if u.find_spec(n) is None]\n"
    "def v(*names):\n"
    "    for n in names:\n"
    "        try:\n"
    "            return m.version(n)\n"
    "        except m.PackageNotFoundError:\n"
    "            pass\n"
    "    return '?'\n"
    "if missing:\n"
    "    print('missing: ' + ' '.join(missing))\n"
    "    sys.exit(1)\n"
    "print('picluster ' + v('picluster') + ', tensorflow ' + v('tensorflow', 'tensorflow-cpu', 'tensorflow-aarch64'))\n"
)


def venv_path(ctx: Context) -> str:
    path = ctx.options.venv  # as cluster.venv: absolute, or under the home ("~/x" or "x")
    return path if path.startswith("/") else f"{ctx.facts.home}/{path.removeprefix('~/')}"


def run(ctx: Context):
    venv = venv_path(ctx)
    python = f"{venv}/bin/python"
    probe = ctx.remote.run(f"test -x {q(python)} && {q(python)} -c {q(_CHECK)}", check=False)
    if probe.exited == 0:
        yield Item("venv", Status.OK, f"{venv}: {probe.stdout.strip()}")
        return
    if ctx.facts.arch not in TF_ARCHES:
        yield Item("venv", Status.FAILED, f"TensorFlow has no {ctx.facts.arch} wheels: use a 64-bit OS")
        return
    exists = ctx.remote.ok(f"test -x {q(python)}")
    if ctx.dry_run:
        what = "would install picluster and " + ctx.options.tensorflow + f" into {venv}"
        yield Item("venv", Status.CHANGED, what if exists else f"would create {venv} and " + what[6:])
        return
    if not exists:
        ctx.remote.run(f"python3 -m venv {q(venv)}", timeout=300)
    wheel = build_wheel(ctx)
    remote_wheel = f"/tmp/{wheel.name}"
    ctx.remote.conn.put(str(wheel), remote=remote_wheel)
    ctx.remote.run(
        f"{q(venv)}/bin/pip install -q {q(remote_wheel)} {q(ctx.options.tensorflow)}; rc=$?; rm -f {q(remote_wheel)}; exit $rc",
        timeout=PIP_TIMEOUT,
    )
    yield Item("venv", Status.CHANGED, f"{venv}: picluster and {ctx.options.tensorflow} installed")


def build_wheel(ctx: Context) -> Path:
    """picluster's wheel, built on the coordinator once per run whatever the number of nodes."""
    shared = ctx.shared
    with shared.lock:
        if shared.wheel is None:
            out = Path(tempfile.mkdtemp(prefix="picluster-wheel-"))
            proc = subprocess.run(
                [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(out), str(ctx.options.source_dir)],
                capture_output=True, text=True, timeout=600,
            )  # fmt: skip
            wheels = sorted(out.glob("picluster-*.whl"))
            if proc.returncode != 0 or not wheels:
                last = (proc.stderr.strip().splitlines() or ["no wheel"])[-1]
                raise ClusterError(f"cannot build picluster's wheel: {last}")
            shared.wheel = wheels[0]
        return shared.wheel
