"""Wheels for the nodes, downloaded once by the coordinator, so nodes install without the internet.

    target = Platform.of("aarch64", "3.11.2", "2.36")       # what facts read on a node
    house = download(target, requirements_of(wheel, target))  # pip download, cached per machine
    # ... the runtime step stages house.dir on the share (or pushes it) and runs
    # pip install --no-index --find-links <there> on each node.

pip evaluates environment markers for the Python that runs it, not for ``--platform`` (pip issues
#4304, #11664): picluster's own ``tensorflow-cpu; platform_machine == 'x86_64'`` would be chosen on
an x86 coordinator for aarch64 Pis.  So picluster's direct requirements are evaluated here for the
target (packaging.markers), and pip is handed the result; deeper dependencies keep pip's
evaluation, which only differs from the target's in platform_machine.

The download lands in ``<cache_dir>/wheels/<platform>-<requirements hash>/`` (renamed into place
when whole), so a second run, or a new node of the same kind, needs no network at all.
"""

import hashlib
import json
import logging
import os
import re
import shutil
import subprocess
import sys
import zipfile
from dataclasses import dataclass
from email.parser import Parser
from pathlib import Path

from packaging.requirements import InvalidRequirement, Requirement

from picluster.util import paths, verbosity
from picluster.util.errors import ClusterError, StorageError, UsageError

log = logging.getLogger(__name__)  # -v: the pip commands run here
MANIFEST = "MANIFEST.json"
OLDEST_GLIBC = 17  # manylinux2014 = manylinux_2_17: nothing older is worth listing
NEWEST_GLIBC = 99  # glibc is at 2.4x; a larger number is a typo, and each minor is a --platform for pip
_ARCH = re.compile(r"^[A-Za-z0-9_]{1,32}$")
_PYTHON = re.compile(r"^3\.(\d{1,2})(?:\.\d{1,3})?$")
_GLIBC = re.compile(r"^2\.(\d{1,2})$")
DOWNLOAD_TIMEOUT = 3600.0
# The machines PyPI's Linux wheels are built for (manylinux): for any other, pip finds none of the
# compiled requirements, after fetching the pure ones.
MANYLINUX_ARCHES = ("aarch64", "armv7l", "i686", "ppc64le", "s390x", "x86_64")


@dataclass(frozen=True)
class Platform:
    """A node's machine, Python and C library, as pip's wheel tags name them."""

    arch: str  # uname -m: "aarch64", "x86_64"
    python: str  # "3.11"
    full_python: str  # "3.11.2"
    glibc: tuple[int, int]  # (2, 36)

    @classmethod
    def of(cls, arch: str, python: str, glibc: str) -> "Platform":
        """From a node's facts: a value that makes no sense is the node's fault (ClusterError)."""
        return cls._checked(arch, python, glibc, ClusterError, ("the node's architecture", "the node's Python", "the node's C library"))

    @classmethod
    def asked(cls, arch: str, python: str, glibc: str) -> "Platform":
        """From ``--arch``, ``--python`` and ``--glibc``: a bad one is a usage error, found before any download."""
        return cls._checked(arch, python, glibc, UsageError, ("--arch", "--python", "--glibc"))

    @classmethod
    def _checked(cls, arch: str, python: str, glibc: str, error: type, names: tuple[str, str, str]) -> "Platform":
        # Ranges keep pip's command line short (one --platform per glibc minor) and the names real.
        if not _ARCH.match(arch or ""):
            raise error(f"{names[0]} {_shown(arch)}: not a machine name such as aarch64, armv7l or x86_64")
        if arch not in MANYLINUX_ARCHES:
            raise error(f"{names[0]} {_shown(arch)}: PyPI has Linux wheels for {', '.join(MANYLINUX_ARCHES)} only")
        found = _PYTHON.match(python or "")
        if not found:
            raise error(f"{names[1]} {_shown(python)}: not a Python 3 version such as 3.11 or 3.11.2")
        g = _GLIBC.match(glibc or "")
        if not g or not OLDEST_GLIBC <= int(g[1]) <= NEWEST_GLIBC:
            raise error(f"{names[2]} {_shown(glibc)}: not a glibc version from 2.{OLDEST_GLIBC} to 2.{NEWEST_GLIBC}, such as 2.36")
        return cls(arch, f"3.{int(found[1])}", python, (2, int(g[1])))

    @property
    def key(self) -> str:
        """cp311-aarch64-glibc2.36: one wheelhouse per key."""
        return f"cp{self.python.replace('.', '')}-{self.arch}-glibc{self.glibc[0]}.{self.glibc[1]}"

    def tags(self) -> list[str]:
        """Platform tags newest first: manylinux_2_36_aarch64 ... manylinux_2_17_aarch64, manylinux2014_aarch64.
        pip expands manylinux2014 to 2010 and 1 itself but does not expand manylinux_2_X."""
        major, minor = self.glibc
        tags = [f"manylinux_{major}_{m}_{self.arch}" for m in range(minor, OLDEST_GLIBC - 1, -1)]
        return tags + [f"manylinux2014_{self.arch}"]

    def pip_args(self) -> list[str]:
        args = ["--only-binary=:all:", "--implementation", "cp", "--python-version", self.python]
        args += ["--abi", f"cp{self.python.replace('.', '')}"]
        for tag in self.tags():
            args += ["--platform", tag]
        return args

    def markers(self) -> dict[str, str]:
        """PEP 508 marker values on such a node (Linux, CPython)."""
        return {
            "implementation_name": "cpython",
            "implementation_version": self.full_python,
            "os_name": "posix",
            "platform_machine": self.arch,
            "platform_python_implementation": "CPython",
            "platform_system": "Linux",
            "python_full_version": self.full_python,
            "python_version": self.python,
            "sys_platform": "linux",
            "extra": "",
        }


def _shown(value: str) -> str:
    """A value quoted for a one-line message, cut short: an absurd one may be 100,000 characters."""
    shown = repr(value)
    return shown if len(shown) <= 40 else shown[:36] + "...'"


@dataclass(frozen=True)
class Wheelhouse:
    dir: Path
    files: dict[str, str]  # file name -> sha256

    @property
    def name(self) -> str:
        return self.dir.name

    def manifest_text(self) -> str:
        return json.dumps({"files": self.files}, indent=1, sort_keys=True) + "\n"


def requirements_of(wheel: Path, target: Platform) -> list[str]:
    """A wheel's own requirements that apply on `target`, markers dropped ("numpy>=1.26,<3")."""
    try:
        with zipfile.ZipFile(wheel) as archive:
            name = next(n for n in archive.namelist() if n.endswith(".dist-info/METADATA"))
            metadata = Parser().parsestr(archive.read(name).decode())
    except (OSError, StopIteration, zipfile.BadZipFile) as exc:
        raise ClusterError(f"cannot read the requirements of {wheel.name}: {exc}") from None
    wanted = []
    for line in metadata.get_all("Requires-Dist") or []:
        req = Requirement(line)
        if req.marker is None or req.marker.evaluate(target.markers()):
            req.marker = None
            wanted.append(str(req))
    return wanted


def check_requirements(requirements: list[str]) -> list[str]:
    """Requirement strings as pip reads them; a bad one is a one-line UsageError."""
    for text in requirements:
        try:
            req = Requirement(text)
        except InvalidRequirement as exc:
            raise UsageError(f"requirement {text!r}: {str(exc).splitlines()[0]}") from None
        if req.url:
            raise UsageError(f"requirement {text!r}: URLs are not downloaded for nodes; name a package")
    return list(requirements)


def check_out(out: Path) -> None:
    """``--out``: a folder we can write, made if missing; checked before anything is downloaded."""
    for place in (out, *out.parents):
        if place.exists() and not place.is_dir():
            raise UsageError(f"--out {out}: {place} is not a directory; give a folder for the wheels")
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise StorageError(out, exc) from None
    if not os.access(out, os.W_OK | os.X_OK):
        raise StorageError(out, "permission denied")


def key_of(target: Platform, requirements: list[str]) -> str:
    digest = hashlib.sha256("\n".join(sorted(requirements)).encode()).hexdigest()[:12]
    return f"{target.key}-{digest}"


def cache_root() -> Path:
    return paths.cache_dir() / "wheels"


def download(target: Platform, requirements: list[str], cache: Path | None = None) -> Wheelhouse:
    """Every wheel `requirements` need on `target`: cached, else `pip download` now."""
    root = cache or cache_root()
    final = root / key_of(target, requirements)
    if (final / MANIFEST).is_file():
        return _load(final)
    root.mkdir(parents=True, exist_ok=True)
    partial = root / f".{final.name}.partial-{os.getpid()}"
    shutil.rmtree(partial, ignore_errors=True)
    partial.mkdir()
    try:
        args = [sys.executable, "-m", "pip", "download", "--disable-pip-version-check", "-q", "--dest", str(partial),
                *target.pip_args(), *requirements]
        started = verbosity.command(log, "local", args)
        proc = subprocess.run(args, capture_output=True, text=True, timeout=DOWNLOAD_TIMEOUT)
        verbosity.ended(log, "local", started, proc.returncode)
        if proc.returncode != 0:
            lines = [ln.strip() for ln in (proc.stderr or proc.stdout).splitlines() if ln.strip()]
            errors = [ln for ln in lines if ln.startswith("ERROR:")] or lines or ["no output"]
            raise ClusterError(f"pip download for {target.key} failed: {errors[-1].removeprefix('ERROR: ')}")
        files = {p.name: sha256(p) for p in sorted(partial.glob("*.whl"))}
        (partial / MANIFEST).write_text(Wheelhouse(final, files).manifest_text())
        os.rename(partial, final)
    except subprocess.TimeoutExpired:
        raise ClusterError(f"pip download for {target.key} did not finish within {DOWNLOAD_TIMEOUT:g} s") from None
    finally:
        shutil.rmtree(partial, ignore_errors=True)
    return _load(final)


def _load(directory: Path) -> Wheelhouse:
    try:
        files = json.loads((directory / MANIFEST).read_text())["files"]
    except (OSError, ValueError, KeyError) as exc:
        raise ClusterError(f"wheelhouse {directory} is damaged ({exc}): delete it and run again") from None
    return Wheelhouse(directory, dict(files))


SOURCE_DIR = Path(__file__).resolve().parents[2]  # picluster's source when this is a checkout: the folder holding picluster/


def checkout(source_dir: Path = SOURCE_DIR) -> Path | None:
    """The checkout this picluster runs from (an editable install), None for an installed wheel."""
    try:
        project = (source_dir / "pyproject.toml").read_text()
    except OSError:
        return None
    return source_dir if re.search(r'^name = "picluster"$', project, re.M) and (source_dir / "picluster").is_dir() else None


def own_wheel(source_dir: Path | None = None) -> Path:
    """picluster's own wheel in a new temporary directory (the caller removes it): built from its
    source in a checkout (``source_dir``, else the checkout this runs from), else packed again from
    the files an installed wheel put here (pip, pipx: there is no source to build from)."""
    import tempfile

    source = source_dir or checkout()
    out = Path(tempfile.mkdtemp(prefix="picluster-wheel-"))
    if source is None:
        try:
            return repack(out)
        except BaseException:
            shutil.rmtree(out, ignore_errors=True)
            raise
    args = [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(out), str(source)]
    started = verbosity.command(log, "local", args)
    proc = subprocess.run(args, capture_output=True, text=True, timeout=600)
    verbosity.ended(log, "local", started, proc.returncode, proc.stderr)
    wheels = sorted(out.glob("picluster-*.whl"))
    if proc.returncode != 0 or not wheels:
        shutil.rmtree(out, ignore_errors=True)
        last = (proc.stderr.strip().splitlines() or ["no wheel"])[-1]
        raise ClusterError(f"cannot build picluster's wheel: {last}")
    return wheels[0]


# What an installer adds to a wheel's .dist-info, not the wheel's own (PEP 376, PEP 610).
_INSTALLERS = {"INSTALLER", "REQUESTED", "direct_url.json", "RECORD"}


def repack(out: Path) -> Path:
    """The installed picluster as the wheel it was installed from, in ``out``: every file its
    RECORD lists under site-packages (compiled caches and the installer's own files left out),
    each checked against the hash RECORD holds, and a new RECORD (the wheel format's, PEP 427).
    The console script and the man pages are not packed (the nodes run neither); an installer
    writes the script anew from the entry points."""
    import base64
    import csv
    import io
    from importlib import metadata

    try:
        dist = metadata.distribution("picluster")
    except metadata.PackageNotFoundError:
        raise ClusterError("picluster's wheel cannot be packed: picluster is not installed here (pip install it, or run from a checkout)") from None
    site = Path(str(dist.locate_file(""))).resolve()
    info = next((Path(str(f)).parts[0] for f in dist.files or [] if str(f).endswith(".dist-info/METADATA")), None)
    if info is None:
        raise ClusterError(f"picluster's wheel cannot be packed: its install in {site} has no RECORD")
    wheel_tags = Parser().parsestr((site / info / "WHEEL").read_text()).get_all("Tag") or ["py3-none-any"]
    name = f"picluster-{dist.version}-{wheel_tags[0]}.whl"
    rows = []
    with zipfile.ZipFile(out / name, "w", zipfile.ZIP_DEFLATED) as whl:
        for file in dist.files or []:
            relative = Path(str(file))
            path = (site / relative).resolve()
            if relative.parts[0] not in ("picluster", info) or "__pycache__" in relative.parts or relative.suffix == ".pyc":
                continue  # the console script and the man pages (outside site-packages: the installer's), compiled caches
            if relative.parts[0] == info and relative.name in _INSTALLERS:
                continue
            data = path.read_bytes()
            digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
            if file.hash is not None and file.hash.value != digest:
                raise ClusterError(f"picluster's wheel cannot be packed: {path} differs from what was installed (reinstall picluster)")
            whl.writestr(relative.as_posix(), data)
            rows.append((relative.as_posix(), f"sha256={digest}", str(len(data))))
        record = io.StringIO()
        csv.writer(record, lineterminator="\n").writerows([*rows, (f"{info}/RECORD", "", "")])
        whl.writestr(f"{info}/RECORD", record.getvalue())
    return out / name


def sha256(path: Path) -> str:
    with open(path, "rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()
