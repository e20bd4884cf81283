"""The bind shim (native/bindaddr.c), built once per machine with the system C compiler.

TensorFlow's gRPC server always listens on the wildcard address; the shim, preloaded
into server processes, narrows that to the task's own address (see the C file).  A process
that hosts a server (``picluster.cluster.server``, or a training replica that serves its own
worker task) re-executes itself once with the shim preloaded, then checks its listening sockets.
"""

import hashlib
import logging
import os
import platform
import shutil
import subprocess
import sys
import tempfile
from importlib import resources
from pathlib import Path

from picluster.util import verbosity
from picluster.util.errors import ClusterError
from picluster.util.paths import state_dir

log = logging.getLogger(__name__)  # -v: the compiler's command, the once it runs


def bind_shim() -> Path:
    source = resources.files("picluster.cluster").joinpath("native/bindaddr.c").read_bytes()
    digest = hashlib.sha256(source).hexdigest()[:12]
    target = state_dir() / "native" / f"libbindaddr-{digest}-{platform.machine()}.so"
    if target.exists():
        return target
    compiler = shutil.which(os.environ.get("CC", "cc")) or shutil.which("gcc")
    if compiler is None:
        raise ClusterError(
            "no C compiler to build the bind shim that keeps TensorFlow servers off other interfaces; "
            "install one (apt-get install gcc libc6-dev)"
        )
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=target.parent) as tmp:
        src = Path(tmp) / "bindaddr.c"
        src.write_bytes(source)
        out = Path(tmp) / target.name
        args = [compiler, "-O2", "-shared", "-fPIC", "-o", str(out), str(src), "-ldl"]
        started = verbosity.command(log, "local", args)
        proc = subprocess.run(args, capture_output=True, text=True)
        verbosity.ended(log, "local", started, proc.returncode, proc.stderr)
        if proc.returncode != 0:
            first = (proc.stderr.strip().splitlines() or ["unknown error"])[0]
            raise ClusterError(f"building the bind shim failed: {first}")
        os.replace(out, target)
    return target


SHIM_MARK = "PICLUSTER_SHIM_LOADED"


def reexec_with_shim(host: str, ports: list[int], module: str) -> None:
    """Replace this process by ``python -m module <same arguments>`` with the shim preloaded,
    binding each of ``ports`` to ``host`` only; returns at once when that has already happened."""
    if os.environ.get(SHIM_MARK) == "1":
        return
    env = dict(os.environ)
    preload = [str(bind_shim())] + [p for p in env.get("LD_PRELOAD", "").split(":") if p]
    env.update(LD_PRELOAD=":".join(preload), PICLUSTER_BIND_ADDR=host, PICLUSTER_BIND_PORT=",".join(map(str, ports)), **{SHIM_MARK: "1"})
    os.execve(sys.executable, [sys.executable, "-m", module, *sys.argv[1:]], env)


def listening_hosts(port: int) -> set[str]:
    """The addresses this process listens on at ``port``."""
    import psutil

    return {
        c.laddr.ip
        for c in psutil.Process().net_connections(kind="inet")
        if c.status == psutil.CONN_LISTEN and c.laddr.port == port
    }


def only_on(host: str, port: int) -> str | None:
    """Why this process's listening sockets at ``port`` are not ``host`` alone, or None when they are."""
    hosts = listening_hosts(port)
    if not hosts or not hosts <= {host, f"::ffff:{host}"}:
        return f"listening on {sorted(hosts)}, expected {host} only"
    return None
