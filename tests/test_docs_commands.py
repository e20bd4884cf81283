"""Every `picluster ...` command line in README.md and docs/ checked against the CLI itself: the
command exists, each option exists for it, and each value given as it would be pasted parses.
The docs cannot drift from the CLI unnoticed.

Two kinds of lines are read:
- literal ones, as a user pastes them (code blocks, `$ picluster ...`): option values are converted
  by the option's own type;
- synopses (brackets, alternatives `a|b`, placeholders such as NODESET or N): the command and the
  option names are checked, the placeholders are not converted.
A command given after `--` that is picluster again (`picluster submit -- picluster run ...`) is
checked the same way.
"""

import re
import shlex
from pathlib import Path

import click
import pytest

from picluster.cli import _register, app

_register()  # the subcommands, as main() adds them
ROOT = Path(__file__).resolve().parent.parent
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
# Code lines: "picluster ...", "$ picluster ...", "laptop$ picluster ...", "alice@node01:~$ picluster ...".
_CODE = re.compile(r"^\s*(?:[\w@:~./-]*\$\s+)?(picluster\s.*|picluster)$")
_SPAN = re.compile(r"`(picluster(?:\s[^`]*)?)`")
_PLACEHOLDER = re.compile(r"^[A-Z][A-Z0-9_]*(?:\.\.\.)?$|<[^>]+>|^\S*:[A-Z]+$")  # NODESET, FILE, <lab>/x, slurm:ID


def command_lines() -> list[tuple[str, str, bool]]:
    """(where, the command line, literal?) for every picluster command in the pages."""
    found = []
    for page in PAGES:
        fenced = False
        lines = page.read_text().splitlines()
        joined: list[tuple[int, str]] = []
        for number, line in enumerate(lines, 1):
            if joined and joined[-1][1].endswith("\\"):  # a continued shell line
                joined[-1] = (joined[-1][0], joined[-1][1][:-1] + " " + line.strip())
            else:
                joined.append((number, line))
        for number, line in joined:
            where = f"{page.relative_to(ROOT)}:{number}"
            if line.lstrip().startswith("```"):
                fenced = not fenced
                continue
            code = fenced or line.startswith("    ")
            match = _CODE.match(line) if code else None
            if match:
                text = _shell_command(match.group(1))
                found.append((where, text, not _is_synopsis(text)))
                continue
            for span in _SPAN.findall(line):
                text = span.replace("\\|", "|")
                found.append((where, text, not _is_synopsis(text)))
    return found


def _shell_command(text: str) -> str:
    """The picluster part of a shell line: before a comment, a pipe or a redirection."""
    text = re.split(r"\s#\s|\s#$", text, maxsplit=1)[0]
    return re.split(r"\s(?:\||>|2>|&&|;)\s", text, maxsplit=1)[0].strip()


def _is_synopsis(text: str) -> bool:
    words = text.split(" -- ")[0].split()
    return any("[" in w or "|" in w or "{" in w or _PLACEHOLDER.match(w) for w in words[1:]) or "..." in words


def _words(text: str) -> list[str]:
    try:
        return shlex.split(text)
    except ValueError:  # a synopsis with an unbalanced quote
        return text.split()


def check(text: str, literal: bool) -> list[str]:
    """What is wrong with one command line (nothing: [])."""
    words = _words(text)
    if not words or words[0] != "picluster":
        return []
    words = [w.strip("[]") for w in words[1:]]
    command: click.Command = app
    path = ["picluster"]
    ctx = click.Context(app, info_name="picluster")
    while isinstance(command, click.Group) and words and not words[0].startswith("-"):
        name = words.pop(0)
        if _PLACEHOLDER.match(name):
            return []  # "picluster COMMAND --help": any command
        choices = name.split("|")
        if len(choices) > 1:  # "nodes reboot|upgrade|shutdown ...": the rest must hold for each
            rest = " ".join(words)
            return [p for choice in choices for p in check(" ".join([*path, choice, rest]), literal)]
        command = command.get_command(ctx, name)
        if command is None:
            return [f"'{' '.join(path)}' has no command '{name}'"]
        path.append(name)
        ctx = click.Context(command, info_name=name, parent=ctx)
    problems = []
    options = {opt: p for p in command.params if isinstance(p, click.Option) for opt in (*p.opts, *p.secondary_opts)}
    while words:
        word = words.pop(0)
        if word == "--":
            rest = " ".join(words)
            if words and words[0] == "picluster":
                problems += check(rest if not literal else shlex.join(words), literal)
            break
        if not word.startswith("-") or word == "-":
            if not command.context_settings.get("allow_interspersed_args", command.allow_interspersed_args):
                break  # "launch SCRIPT ARGS...": what follows the script is the script's
            continue  # an argument (or a placeholder for one)
        if word in ("-h", "--help"):
            continue
        name, _, attached = word.partition("=")
        for alternative in name.split("|"):
            if alternative not in options:
                problems.append(f"'{' '.join(path)}' has no option {alternative}")
        param = options.get(name.split("|")[0])
        if param is None or param.is_flag or param.count:
            continue
        value = attached or (words.pop(0) if words else None)
        if value is None:
            problems.append(f"'{' '.join(path)} {name}' needs a value")
        elif literal and not _PLACEHOLDER.search(value) and not isinstance(param.type, click.Path):  # paths: any file
            try:
                param.type.convert(value, param, ctx)
            except click.BadParameter as exc:
                problems.append(f"'{' '.join(path)} {name} {value}': {exc.format_message()}")
    return problems


def test_the_pages_hold_command_lines_of_both_kinds():
    lines = command_lines()
    assert sum(literal for *_, literal in lines) > 50 and sum(not literal for *_, literal in lines) > 20, len(lines)
    assert any("montecarlo --samples 1e8 --nodes 8" in text for _, text, _ in lines)


@pytest.mark.parametrize("where, text, literal", command_lines(), ids=lambda v: v if isinstance(v, str) and ":" in v else None)
def test_every_documented_command_line_exists_with_its_options_and_values(where, text, literal):
    assert check(text, literal) == [], f"{where}: {text}"


def test_the_checker_finds_what_drifted():
    assert check("picluster nodes shutdown all --parallel 4", True) == ["'picluster nodes shutdown' has no option --parallel"]
    assert check("picluster run montecarlo --sweep 1e7,2e7,...,1e8", True)[0].startswith("'picluster run montecarlo --sweep 1e7,2e7,...,1e8': ")
    assert check("picluster cluster start", True) == ["'picluster cluster' has no command 'start'"]
    assert check("picluster submit --nodes 2 -- picluster run montecarlo --samples lots", True)[0].startswith(
        "'picluster run montecarlo --samples lots': ")
    assert check("picluster nodes reboot|upgrade NODESET [--parallel N]", False) == []
