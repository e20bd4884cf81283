"""picluster's wheel, built once per session from a copy of this checkout, as `pip wheel` builds it
for a user (the copy: what the wheel is made of, so a stray build/ never lands in the checkout)."""

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SOURCES = ("pyproject.toml", "README.md", "picluster", "docs/man")  # docs/man: the man pages' data-files


@pytest.fixture(scope="session")
def built_wheel(tmp_path_factory) -> Path:
    src = tmp_path_factory.mktemp("wheel-src")
    for item in SOURCES:
        (src / item).parent.mkdir(parents=True, exist_ok=True)
        if (ROOT / item).is_dir():
            shutil.copytree(ROOT / item, src / item, symlinks=True, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy(ROOT / item, src / item)
    dist = tmp_path_factory.mktemp("dist")
    built = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(dist), str(src)],
                           capture_output=True, text=True, timeout=600)
    assert built.returncode == 0, built.stderr
    (wheel,) = dist.glob("picluster-*.whl")
    return wheel
