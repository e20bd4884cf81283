"""The HAR package's map: its docstring names every module in it (and nothing that is not there),
and no module of it points the reader at a file that does not exist."""

import ast
import re
from pathlib import Path

from conftest import ROOT

HAR = ROOT / "picluster" / "jobs" / "har"
NAMED = re.compile(r"(?<![\w/.])((?:[a-z_]+/)*[a-z_]+\.py)\b")


def _modules() -> set[str]:
    """Every module of the package, as its map names it: graph.py, exchange/ps.py's ps.py."""
    return {p.name for p in HAR.rglob("*.py") if p.name != "__init__.py"}


def test_the_package_docstring_names_every_module_and_only_those():
    doc = ast.get_docstring(ast.parse((HAR / "__init__.py").read_text())) or ""
    named = {m.rsplit("/", 1)[-1] for m in NAMED.findall(doc)} - {Path(__file__).name}
    assert not _modules() - named, f"modules the map of picluster/jobs/har/__init__.py leaves out: {sorted(_modules() - named)}"
    assert not named - _modules(), f"the map names modules that are not there: {sorted(named - _modules())}"


def test_every_file_a_module_of_the_package_points_at_is_there():
    """A comment or docstring naming a file (``emulate.py``) that a change removed or renamed."""
    everywhere = {p.name for top in ("picluster", "tests", "benchmarks", "scripts") for p in (ROOT / top).rglob("*.py")}
    wrong = []
    for path in sorted(HAR.rglob("*.py")):
        for name in NAMED.findall(path.read_text()):
            if name.rsplit("/", 1)[-1] not in everywhere:
                wrong.append(f"{path.relative_to(ROOT)}: {name}")
    assert not wrong, "named but not there: " + "; ".join(wrong)
