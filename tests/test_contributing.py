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


def _ci_times():
    """scripts/ci_times.py, which is no module of the package."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("ci_times", ROOT / "scripts" / "ci_times.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_suite_times_stated_are_the_last_runs_rows():
    """CONTRIBUTING's times are the last clean-clone run's rows in docs/data/ci_parts.csv, as
    scripts/ci_times.py writes them from a run's log, and its loop says the same whole minutes."""
    ci_times = _ci_times()
    last = ci_times.runs()[-1]
    wall, parts = ci_times.statement(last)
    text = (ROOT / "CONTRIBUTING.md").read_text()
    stated = ci_times.LAST.findall(text)
    assert [(commit, int(minutes), what) for _, commit, minutes, what in stated] == [(last[0]["commit"], wall, parts)]
    assert [int(m.group(2)) for m in ci_times.LOOP.finditer(text)] == [wall]
    assert {r["part"] for r in last} >= {"unit", "e2e", "lab", "vm", "wall"}


def test_the_readmes_times_are_the_last_runs_rounded():
    """README's "whole suite takes about N minutes" and "`./dev test -m unit` (about N minutes)" are
    the last run's, rounded as scripts/ci_times.py writes them (readme_times)."""
    ci_times = _ci_times()
    suite, unit = ci_times.readme_times(ci_times.runs()[-1])
    text = (ROOT / "README.md").read_text()
    assert [int(m.group(2)) for m in ci_times.SUITE.finditer(text)] == [suite]
    assert [int(m.group(2)) for m in ci_times.UNIT.finditer(text)] == [unit]


def test_readmes_round_numbers():
    ci_times = _ci_times()

    def rows(wall, unit):
        return [{"part": "unit", "tests": "1", "minutes": unit}, {"part": "wall", "tests": "0", "minutes": wall}]

    # The whole minutes CONTRIBUTING states (halves up), to the nearest 5; the unit part's whole minutes.
    assert [ci_times.readme_times(rows(*r)) for r in [("35.5", "2.1"), ("37.4", "2.5"), ("37.5", "0.2"), ("1.0", "1.4")]] == [
        (35, 2), (35, 3), (40, 1), (5, 1)]


def test_the_times_script_reads_a_runs_log(tmp_path, monkeypatch):
    ci_times = _ci_times()
    log = ("....\ntime by part: unit 1136 tests 2.1 min; e2e 59 tests 8.8 min; lab 89 tests 19.9 min; vm 7 tests 3.3 min; all 34.1 min\n"
           "=========== 1291 passed, 12 deselected in 2046.00s (0:34:06) ===========\n\nreal\t35m31.200s\nuser\t1m0s\n")
    assert ci_times.parse(log) == {"unit": (1136, 2.1), "e2e": (59, 8.8), "lab": (89, 19.9), "vm": (7, 3.3), "wall": (0, 35.52)}
    for broken, why in [(log.replace("= 1291 passed", "= 2 failed, 1289 passed"), "no passing run"),
                        (log.replace("deselected in", "deselected, 1 error in"), "no passing run"),
                        (log.replace("vm 7 tests 3.3 min; ", ""), "no vm part"),
                        (log.replace("real", "took"), "no 'real' time")]:
        with pytest.raises(SystemExit, match=why):
            ci_times.parse(broken)
    monkeypatch.setattr(ci_times, "CSV", tmp_path / "parts.csv")
    monkeypatch.setattr(ci_times, "CONTRIBUTING", tmp_path / "CONTRIBUTING.md")
    monkeypatch.setattr(ci_times, "README", tmp_path / "README.md")
    (tmp_path / "CONTRIBUTING.md").write_text((ROOT / "CONTRIBUTING.md").read_text())
    readme = ci_times.UNIT.sub(r"\g<1>9\g<3>minutes)", ci_times.SUITE.sub(r"\g<1>99\g<3>", (ROOT / "README.md").read_text()))
    (tmp_path / "README.md").write_text(readme.replace("The whole suite takes", "The suite takes"))
    (tmp_path / "log").write_text(log)
    (tmp_path / "parts.csv").write_text((ROOT / "docs" / "data" / "ci_parts.csv").read_text())
    before = len(ci_times.runs())
    with pytest.raises(SystemExit, match="not a commit"):
        ci_times.main(str(tmp_path / "log"), "HEAD")
    with pytest.raises(SystemExit, match=r"README.md should state the times once in each place \(found 0 and 1\)"):
        ci_times.main(str(tmp_path / "log"), "abc1234")
    assert len(ci_times.runs()) == before  # nothing written
    (tmp_path / "README.md").write_text(readme)
    ci_times.main(str(tmp_path / "log"), "abc1234")
    assert (tmp_path / "README.md").read_text() == readme.replace("about 99", "about 35").replace("(about 9 minutes)", "(about 2 minutes)")
    written = (tmp_path / "CONTRIBUTING.md").read_text()
    assert "Last clean-clone run (abc1234): 36 min in all; unit 1,136 tests 2.1 min; e2e 59 tests 8.8 min; " \
           "lab 89 tests 19.9 min; vm 7 tests 3.3 min." in written and "(about 36 min)" in written
    last = ci_times.runs()[-1]
    assert last[-1] == {"run": str(before + 1), "commit": "abc1234", "date": ci_times.date.today().isoformat(), "part": "wall",
                        "tests": "0", "minutes": "35.5"}
    assert len(ci_times.runs()) == before + 1 and len(last) == 5
