#!/usr/bin/env python3
"""The man pages, generated from the commands' own help (never written by hand): one page per
command and group, as git's are (picluster(1), picluster-run-montecarlo(1), ...), into docs/man/.

    .venv/bin/python scripts/man_pages.py            # write them (after changing a command's help)
    .venv/bin/python scripts/man_pages.py --check    # exit 1 naming the pages that are not current

tests/test_man_pages.py checks that the committed pages are what this writes.  The wheel installs
them in share/man/man1 (pyproject.toml's data-files), where pipx links them for `man`.
"""

import argparse
import inspect
import re
import sys
from pathlib import Path

import click

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "docs" / "man"


def pages() -> dict[str, str]:
    """file name -> troff text, for every command and group under `picluster`."""
    from picluster import __version__
    from picluster.cli import _register, app

    _register()
    found: dict[str, str] = {}

    def walk(cmd: click.Command, ctx: click.Context) -> None:
        name = ctx.command_path.replace(" ", "-")
        found[f"{name}.1"] = page(cmd, ctx, __version__)
        if isinstance(cmd, click.Group):
            for sub in cmd.list_commands(ctx):
                child = cmd.get_command(ctx, sub)
                if child is not None and not child.hidden:
                    walk(child, click.Context(child, info_name=sub, parent=ctx))

    walk(app, click.Context(app, info_name="picluster", **app.context_settings))  # -h, --help as typed
    return found


def page(cmd: click.Command, ctx: click.Context, version: str) -> str:
    path = ctx.command_path
    summary = cmd.get_short_help_str(limit=10_000).rstrip(".")
    lines = [
        f'.TH {roman(path.replace(" ", "-").upper())} 1 "" "picluster {version}" "picluster manual"',
        ".nh",  # no hyphenation, and ragged right: option names stay whole
        ".ad l",
        ".SH NAME",
        f"{roman(path.replace(' ', '-'))} \\- {text(summary)}",
        ".SH SYNOPSIS",
        f".B {roman(path)}",
        text(" ".join(cmd.collect_usage_pieces(ctx))),
        ".SH DESCRIPTION",
        *paragraphs(cmd.help or ""),
    ]
    options = [p.get_help_record(ctx) for p in cmd.get_params(ctx) if isinstance(p, click.Option)]
    options = [r for r in options if r is not None]
    if options:
        lines.append(".SH OPTIONS")
        for opts, help_text in options:
            lines += [".TP", f".B {roman(opts)}", text(help_text)]
    if isinstance(cmd, click.Group):
        subs = [(n, cmd.get_command(ctx, n)) for n in cmd.list_commands(ctx)]
        shown = [(n, c) for n, c in subs if c is not None and not c.hidden]
        lines.append(".SH COMMANDS")
        for name, sub in shown:
            lines += [".TP", f".B {roman(name)}", text(sub.get_short_help_str(limit=10_000)), f"See {roman(path.replace(' ', '-'))}-{roman(name)}(1)."]
    if cmd.epilog:
        lines += [".SH NOTES", *paragraphs(cmd.epilog)]
    lines += [".SH SEE ALSO", "picluster(1); the manual: docs/ in picluster's source (README.md, docs/*.md)."]
    return "\n".join(lines) + "\n"


def paragraphs(help_text: str) -> list[str]:
    """Click's help text as troff paragraphs: blank lines part them; a ``\\b`` paragraph keeps its lines."""
    out = []
    for block in re.split(r"\n\s*\n", inspect.cleandoc(help_text)):
        if not block.strip():
            continue
        if block.startswith("\b"):
            out += [".PP", ".nf", *(text(line) for line in block[1:].strip("\n").splitlines()), ".fi"]
        else:
            out += [".PP", text(" ".join(block.split()))]
    return out


def text(line: str) -> str:
    """A line of text, safe in troff: backslashes and a leading dot or quote escaped, and hyphens
    as the minus sign, so option names in it can be copied and searched (`--nodes`, not `‐‐nodes`)."""
    line = line.replace("\\", "\\e").replace("-", "\\-")
    return f"\\&{line}" if line.startswith((".", "'")) else line


def roman(words: str) -> str:
    """Command and option names (set in bold by the caller)."""
    return text(words)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="exit 1 when docs/man differs from what would be written")
    parser.add_argument("--out", type=Path, default=OUT, help=f"where to write them [{OUT.relative_to(ROOT)}]")
    args = parser.parse_args()
    wanted = pages()
    have = {p.name: p.read_text() for p in args.out.glob("*.1")} if args.out.is_dir() else {}
    stale = sorted(n for n in wanted.keys() | have.keys() if wanted.get(n) != have.get(n))
    if args.check:
        if stale:
            sys.exit(f"man pages not current: {', '.join(stale)} (run: .venv/bin/python scripts/man_pages.py)")
        return
    args.out.mkdir(parents=True, exist_ok=True)
    for name in stale:
        if name in wanted:
            (args.out / name).write_text(wanted[name])
        else:
            (args.out / name).unlink()
    print(f"{len(wanted)} man pages in {args.out}: {len(stale)} written or removed")


if __name__ == "__main__":
    main()
