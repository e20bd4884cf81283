"""How a listing is printed: the options every listing command takes (``--json``, ``--parsable``,
``--noheader``) and the table for people, fitted to the terminal, or not on one (a pipe, a file)
one row per line with nothing cut and no colour; ``--watch``'s refreshes (``watch``).
"""

import functools
import io
import json
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass

import click
from rich.console import Console, Group, RenderableType
from rich.text import Text

from picluster.cli.options import option
from picluster.util.errors import PiclusterError, UsageError
from picluster.views.listing import Fitted, Listing

PIPE_WIDTH = 10_000  # not on a terminal: no width, so nothing wraps or is cut


@dataclass(frozen=True)
class Form:
    """The form asked for: the table for people, ``--parsable``'s lines, or ``--json``'s document."""

    json: bool = False
    parsable: bool = False
    header: bool = True  # False: --noheader

    @property
    def human(self) -> bool:
        return not (self.json or self.parsable)


def output_options(command):
    """--json, --parsable and --noheader, handed to the command as ``form``."""

    @functools.wraps(command)
    def chosen(*args, as_json: bool, parsable: bool, noheader: bool, **kwargs):
        if as_json and parsable:
            raise UsageError("give one of --json and --parsable")
        if as_json and noheader:
            raise UsageError("--noheader is for the table and --parsable; a JSON document has no header")
        return command(*args, form=Form(as_json, parsable, not noheader), **kwargs)

    chosen = option("--noheader", is_flag=True, help="No header line (as squeue -h).")(chosen)
    chosen = option("--parsable", is_flag=True, help="One line per row, fields split by '|', a header line first (as sacct -P).")(chosen)
    return option("--json", "as_json", is_flag=True, help="One JSON document (its schema named in it: docs/scripting.md).")(chosen)


def show(listing: Listing, form: Form) -> None:
    """The listing in the form asked for, on stdout."""
    if form.json:
        click.echo(listing.json())
    elif form.parsable:
        for line in listing.lines(form.header):
            click.echo(line)
    else:
        human(listing.human, form.header)


def human(parts: list[RenderableType | str], header: bool = True) -> None:
    """Tables and lines for people: on a terminal, fitted to it; elsewhere one row per line."""
    if sys.stdout.isatty():
        console = Console(highlight=False)
        for part in parts:
            console.print(_part(part, header))
        return
    text = plain(parts, header)
    if text:
        click.echo(text)


def plain(parts: list[RenderableType | str], header: bool = True) -> str:
    """What a pipe or a file gets: no colour, no width, no trailing spaces."""
    out = Console(file=io.StringIO(), width=PIPE_WIDTH, color_system=None, highlight=False, legacy_windows=False)
    for part in parts:
        part = _part(part, header)
        if isinstance(part, Fitted):
            part.rule = False
        out.print(part)
    text = out.file.getvalue()  # type: ignore[attr-defined]
    return "\n".join(line.rstrip() for line in text.splitlines())


def _part(part: RenderableType | str, header: bool) -> RenderableType:
    if isinstance(part, str):
        return Text(part)  # as it is: never read as markup
    if isinstance(part, Fitted):
        part.header = header
    return part


def watch(make: Callable[[], Listing], form: Form, interval: float, what: str) -> None:
    """``make()``'s listing again every ``interval`` seconds until Ctrl-C (or q).  On a terminal
    (the table) it is redrawn in place; elsewhere (a pipe, a log, --json, --parsable) it is printed
    again each time it changes, the table after a line with the time, the JSON document on one
    line (JSON Lines).  An error at the first refresh ends the command; a later one is shown and
    the next refresh tries again."""
    first = make()
    try:
        if form.human and sys.stdout.isatty() and sys.stdin.isatty():
            _live(make, first, form, interval, what)
        else:
            _changes(make, first, form, interval)
    except KeyboardInterrupt:
        pass


def _live(make: Callable[[], Listing], first: Listing, form: Form, interval: float, what: str) -> None:
    from rich.live import Live

    from picluster.cli.keys import QuitKey

    def frame(listing: Listing | None, error: str | None) -> Group:
        stamp = time.strftime("%Y-%m-%dT%H:%M:%S")
        top = Text(f"{what}, every {interval:g} s, {stamp} (q or Ctrl-C quits)", style="dim")
        body = [Text(error, style="red")] if error else [_part(p, form.header) for p in listing.human] if listing else []
        return Group(top, *body)

    console = Console(highlight=False)
    last = first
    with QuitKey() as quit_key, Live(frame(first, None), console=console, auto_refresh=False) as live:
        while not quit_key.pressed(timeout=interval):
            try:
                last, error = make(), None
            except PiclusterError as exc:
                error = f"{exc} (trying again in {interval:g} s)"
            live.update(frame(last, error), refresh=True)


def _changes(make: Callable[[], Listing], first: Listing, form: Form, interval: float) -> None:
    shown = None
    listing: Listing | None = first
    while True:
        if listing is not None:
            if form.json:
                text = json.dumps(listing.document(), ensure_ascii=False)
            elif form.parsable:
                text = "\n".join(listing.lines(form.header))
            else:
                text = plain(listing.human, form.header)
            if text != shown:
                shown = text
                if form.human:
                    click.echo(f"# {time.strftime('%Y-%m-%dT%H:%M:%S%z')}")
                click.echo(text)
                sys.stdout.flush()
        time.sleep(interval)
        try:
            listing = make()
        except PiclusterError as exc:
            click.echo(f"picluster: {exc} (trying again in {interval:g} s)", err=True)
            listing = None
