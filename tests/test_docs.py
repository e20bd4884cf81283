"""The README is a landing page and docs/ the manual: short, linked, and written for users.

A newcomer must find the two commands and the card's three uses on the first page; every link
must lead somewhere; user docs name neither our issue tracker nor our development machines.
"""

import re
from pathlib import Path

import pytest

from conftest import ROOT

README = ROOT / "README.md"
USER_DOCS = [README, *sorted((ROOT / "docs").glob("*.md"))]
# [text](target) and ![alt](target), the target up to a space or the closing parenthesis.
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")


def links(page: Path) -> list[str]:
    text = re.sub(r"```.*?```", "", page.read_text(), flags=re.S)  # links in code blocks are not links
    return [t for t in LINK.findall(text) if not re.match(r"[a-z][a-z0-9+.-]*:", t)]  # relative only


def anchors(page: Path) -> set[str]:
    """The anchors GitHub makes of a page's headings: lower case, punctuation dropped, spaces to '-'."""
    text = re.sub(r"```.*?```", "", page.read_text(), flags=re.S)
    found = set()
    for heading in re.findall(r"^#+ +(.+?) *$", text, flags=re.M):
        slug = re.sub(r"[^\w\- ]", "", heading.lower()).replace(" ", "-")
        found.add(slug)
    return found


def test_the_readme_is_a_landing_page_of_at_most_300_lines():
    lines = README.read_text().count("\n")
    assert lines <= 300, f"README.md has {lines} lines; move the rest into docs/"


def test_the_readme_shows_the_two_commands_and_the_three_uses_verbatim():
    text = README.read_text()
    for command in ("./dev run", "./dev test"):
        assert command in text, command
    for command in (
        "$ picluster provision\n",
        "$ picluster run montecarlo --samples 1e8 --nodes 8\n",
        "$ picluster train har --layers 3\n",
    ):
        assert command in text, f"README.md lacks the card's {command.strip()!r} with its output"


@pytest.mark.parametrize("page", USER_DOCS, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_every_relative_link_leads_to_a_file_and_heading(page):
    broken = []
    for target in links(page):
        path, _, anchor = target.partition("#")
        dest = (page.parent / path).resolve() if path else page
        if not dest.exists():
            broken.append(f"{target}: no such file")
        elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
            broken.append(f"{target}: no heading makes #{anchor}")
    assert not broken, f"{page.relative_to(ROOT)}: " + "; ".join(broken)


@pytest.mark.parametrize("page", USER_DOCS, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_user_docs_name_no_issue_and_no_development_machine_path(page):
    text = page.read_text()
    found = re.findall(r"(?i)\bissues? #?\d+|(?<![\w&/])#\d+\b|/work/\S*|CPU lock", text)
    assert not found, f"{page.relative_to(ROOT)}: {found} (history goes to CHANGELOG.md; show a user's commands only)"


def test_the_anchor_rule_matches_a_known_heading():
    # Guards the checker itself: a heading with punctuation and code must make GitHub's anchor.
    assert "har-training-cost-per-mode-benchmarksharpy" in anchors(ROOT / "docs" / "performance.md")
