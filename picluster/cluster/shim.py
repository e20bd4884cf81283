"""The bind shim (native/bindaddr.c), built once per machine with the system C compiler.

TensorFlow's gRPC server always listens on the wildcard address; the shim, preloaded
into server processes, narrows that to the task's own address (see the C file).
"""

import hashlib
import os
import platform
import shutil
import subprocess
import tempfile
from importlib import resources
from pathlib import Path

from picluster.errors import ClusterError
from picluster.paths import state_dir


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
        proc = subprocess.run(
            [compiler, "-O2", "-shared", "-fPIC", "-o", str(out), str(src), "-ldl"],
            capture_output=True,
            text=True,
        )
        if proc.returncode != 0:
            first = (proc.stderr.strip().splitlines() or ["unknown error"])[0]
            raise ClusterError(f"building the bind shim failed: {first}")
        os.replace(out, target)
    return target
