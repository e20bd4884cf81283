"""The man pages in docs/man are generated from the commands' help by scripts/man_pages.py, never
written by hand: the committed pages are what it writes now, one per command and group."""

import subprocess
import sys

from conftest import ROOT, picluster


def test_the_man_pages_are_current_with_the_commands_help():
    check = subprocess.run([sys.executable, str(ROOT / "scripts" / "man_pages.py"), "--check"], capture_output=True, text=True, timeout=120)
    assert check.returncode == 0, check.stderr  # if not: .venv/bin/python scripts/man_pages.py, and commit docs/man


def test_a_command_page_holds_its_help_and_its_options(tmp_path):
    done = subprocess.run([sys.executable, str(ROOT / "scripts" / "man_pages.py"), "--out", str(tmp_path)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    page = (tmp_path / "picluster-run-montecarlo.1").read_text()
    assert page.startswith('.TH PICLUSTER\\-RUN\\-MONTECARLO 1 "" "picluster ')
    help_text = picluster("run", "montecarlo", "--help").stdout
    assert "Estimate pi by drawing points in the unit square on every worker." in help_text
    assert "\nEstimate pi by drawing points in the unit square on every worker.\n" in page
    for option in ("\\-\\-samples COUNT", "\\-\\-nodes COUNT", "\\-v, \\-\\-verbose", "\\-q, \\-\\-quiet", "\\-h, \\-\\-help"):
        assert f"\n.B {option}\n" in page, option
    # Every command and group has its page, and the top one lists them.
    top = (tmp_path / "picluster.1").read_text()
    for name in ("provision", "run", "train", "jobs", "playbooks"):
        assert f"\n.B {name}\n" in top and (tmp_path / f"picluster-{name}.1").is_file(), name
    assert (tmp_path / "picluster-train-har.1").is_file() and (tmp_path / "picluster-nodes-reboot.1").is_file()
