#!/usr/bin/env python3
"""The suite's times, from a `.ci/run` log: appended to docs/data/ci_parts.csv and written into
CONTRIBUTING.md and README.md, whose statements of them `tests/test_contributing.py` checks
against the CSV.

    git clone . /tmp/ci && cd /tmp/ci && (time bash .ci/run) > /tmp/ci.log 2>&1
    python3 scripts/ci_times.py /tmp/ci.log COMMIT

The log gives pytest's last line per part (`time by part: unit 1133 tests 2.4 min; ...`) and the
shell's `real` (the whole run: lint and install too).  A run that did not pass is refused.
"""

import csv
import re
import sys
from datetime import date
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CSV = ROOT / "docs" / "data" / "ci_parts.csv"
CONTRIBUTING = ROOT / "CONTRIBUTING.md"
README = ROOT / "README.md"
FIELDS = ("run", "commit", "date", "part", "tests", "minutes")  # run: 1, 2, ... (a commit may be measured twice)
PARTS = ("unit", "e2e", "lab", "vm")  # what CI runs (tests/conftest.py's parts, the long one left out)
PART = re.compile(r"(\w+) (\d+) tests (\d+\.\d) min")
# The two places CONTRIBUTING states them; tests/test_contributing.py reads them with these too.
LOOP = re.compile(r"(\(\.ci/run: lint, then this\) \(about )(\d+)( min\))")
LAST = re.compile(r"^(\s*)Last clean-clone run \(([0-9a-f]+)\): (\d+) min in all; (.*)\.$", re.M)
# The two places README states them (``readme_times``): the whole suite, and the unit part alone.
SUITE = re.compile(r"(The\s+whole\s+suite\s+takes\s+about\s+)(\d+)(\s+minutes)")
UNIT = re.compile(r"(`\./dev test -m unit`\s+\(about\s+)(\d+)(\s+)minutes?\)")


def parse(log: str) -> dict[str, tuple[int, float]]:
    """part -> (tests, minutes), and "wall" -> (0, the whole run's minutes)."""
    log = re.sub(r"\x1b\[[0-9;]*m", "", log)  # colours, should the run have had a terminal
    # pytest's last line, "=== 1287 passed, 12 deselected in 2100.11s (0:35:00) ===", with nothing failed.
    summary = re.findall(r"^[=\s]*(\d+ passed\b.*?)[=\s]*$", log, re.M)
    if not summary or re.search(r"\b(failed|errors?)\b", summary[-1]):
        raise SystemExit("ci_times: the log shows no passing run (pytest's last line 'N passed', without failures)")
    line = [x for x in log.splitlines() if x.startswith("time by part: ")]
    real = re.findall(r"^real\s+(\d+)m(\d+(?:\.\d+)?)s$", log, re.M)
    if not line or not real:
        raise SystemExit("ci_times: no 'time by part:' line or no 'real' time: run it as (time bash .ci/run) > LOG 2>&1")
    parts = {name: (int(tests), float(minutes)) for name, tests, minutes in PART.findall(line[-1])}
    if set(PARTS) - set(parts):
        raise SystemExit(f"ci_times: the run has no {', '.join(sorted(set(PARTS) - set(parts)))} part: not a whole CI run")
    minutes, seconds = real[-1]
    return parts | {"wall": (0, int(minutes) + float(seconds) / 60)}


def runs() -> list[list[dict]]:
    """The CSV's runs, oldest first, each as its rows."""
    grouped: dict[str, list[dict]] = {}
    with CSV.open(newline="") as f:
        for row in csv.DictReader(f):
            grouped.setdefault(row["run"], []).append(row)
    return [grouped[run] for run in sorted(grouped, key=int)]


def statement(rows: list[dict]) -> tuple[int, str]:
    """The whole run's minutes, rounded, and the parts as CONTRIBUTING states them."""
    wall = next(int(float(r["minutes"]) + 0.5) for r in rows if r["part"] == "wall")  # halves up
    parts = "; ".join(f"{r['part']} {int(r['tests']):,} tests {float(r['minutes']):.1f} min" for r in rows if r["part"] != "wall")
    return wall, parts


def readme_times(rows: list[dict]) -> tuple[int, int]:
    """README's round numbers: the whole run's minutes as CONTRIBUTING states them (``statement``),
    to the nearest 5 (halves up; at least 5), and the unit part's to the nearest minute (halves up;
    at least 1)."""
    wall, _ = statement(rows)
    unit = next(float(r["minutes"]) for r in rows if r["part"] == "unit")
    return max(5, 5 * int(wall / 5 + 0.5)), max(1, int(unit + 0.5))


def rewritten(path: Path, edits: list) -> str:
    """The file's text with each (pattern, replacement) made, each pattern found exactly once:
    else nothing is written, and the script says where the statement went missing."""
    text = path.read_text()
    found = []
    for pattern, replacement in edits:
        text, n = pattern.subn(replacement, text)
        found.append(str(n))
    if found != ["1"] * len(edits):
        raise SystemExit(f"ci_times: {path.name} should state the times once in each place (found {' and '.join(found)})")
    return text


def main(log_path: str, commit: str) -> None:
    if not re.fullmatch(r"[0-9a-f]{7,40}", commit):
        raise SystemExit(f"ci_times: {commit!r} is not a commit: give its hash (git rev-parse --short HEAD)")
    parts = parse(Path(log_path).read_text(errors="replace"))
    number = str(int(runs()[-1][0]["run"]) + 1 if CSV.exists() else 1)
    rows = [{"run": number, "commit": commit, "date": date.today().isoformat(), "part": p, "tests": str(t), "minutes": f"{m:.1f}"}
            for p, (t, m) in parts.items()]
    wall, stated = statement(rows)
    text = rewritten(CONTRIBUTING, [
        (LOOP, lambda m: f"{m.group(1)}{wall}{m.group(3)}"),
        (LAST, lambda m: f"{m.group(1)}Last clean-clone run ({commit}): {wall} min in all; {stated}."),
    ])
    suite, unit = readme_times(rows)
    readme = rewritten(README, [
        (SUITE, lambda m: f"{m.group(1)}{suite}{m.group(3)}"),
        (UNIT, lambda m: f"{m.group(1)}{unit}{m.group(3)}minute{'' if unit == 1 else 's'})"),
    ])
    new = not CSV.exists()
    with CSV.open("a", newline="") as f:  # the three files once all are known to be right
        writer = csv.DictWriter(f, FIELDS)
        if new:
            writer.writeheader()
        writer.writerows(rows)
    CONTRIBUTING.write_text(text)
    README.write_text(readme)
    print(f"{commit}: {wall} min in all; {stated}")


if __name__ == "__main__":
    if len(sys.argv) != 3:
        raise SystemExit("usage: scripts/ci_times.py LOG COMMIT")
    main(*sys.argv[1:])
