"""CONTRIBUTING.md's facts about the code, checked: its map (*Where things live*) names every module
of the package and no file that is gone, and its layer diagram names every package."""

import re
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "picluster"


def _block(heading: str) -> str:
    """The fenced block under ``heading`` in CONTRIBUTING.md."""
    text = (ROOT / "CONTRIBUTING.md").read_text()
    section = text[text.index(f"## {heading}") :]
    opened = section.index("```\n") + 4
    return section[opened : section.index("```", opened)]


def _modules() -> list[Path]:
    return [p for p in sorted(PACKAGE.rglob("*.py")) if p.stem not in ("__init__", "__main__")]


def test_the_map_names_every_module():
    words = set(re.findall(r"[A-Za-z_][A-Za-z0-9_]*", _block("Where things live")))
    unnamed = [str(p.relative_to(ROOT)) for p in _modules() if p.stem not in words]
    assert unnamed == [], "add them to CONTRIBUTING.md's *Where things live*"


def test_the_map_names_no_file_that_is_gone():
    named = set(re.findall(r"\b([a-z_][a-z0-9_]*)\.py\b", _block("Where things live")))
    present = {p.stem for folder in ("picluster", "tests", "benchmarks", "examples", "scripts") for p in (ROOT / folder).rglob("*.py")}
    assert sorted(named - present) == []


def test_the_layers_name_every_package():
    diagram = _block("Layers")
    packages = sorted(p.name for p in PACKAGE.iterdir() if (p / "__init__.py").is_file())
    assert [name for name in packages if f"{name}/" not in diagram] == []
