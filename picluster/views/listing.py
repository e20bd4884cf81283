"""A listing in the three forms every listing command prints (clig.dev's advice, Slurm's forms):

- for people, a table that fits the terminal: names are never cut; when the columns do not fit,
  the least needed are left out first (``--json`` has them all) and only free text (a reason)
  wraps.  Not on a terminal (a pipe, a file) it has no width: one row per line, nothing cut.
- ``--parsable``: ``sacct -P``'s form, one line per row, fields split by ``|``, a header line
  first unless ``--noheader`` (``squeue -h``).
- ``--json``: one document, ``{"schema": "picluster.NAME/VERSION", ...}``; a version changes
  only when a field changes meaning or goes away (a new field keeps it).

A listing's rows are plain JSON values (text, numbers, lists, objects, null): the JSON form
prints them as they are, the parsable one flattens them, and the table shows them as people read
them (times as ISO 8601 with the date, durations as ``1:02:05``).
"""

import json
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from rich import box
from rich.cells import cell_len
from rich.console import Console, ConsoleOptions, RenderableType, RenderResult
from rich.table import Table
from rich.text import Text

SEPARATOR = "|"
GAP = 2  # spaces between two columns of the table
WRAP_MIN = 12  # a column of free text keeps this many characters a line, or other columns are left out

Row = dict[str, Any]


@dataclass(frozen=True)
class Column:
    """One column of the table people read: its heading, its cell from a row, and how it gives way."""

    header: str
    cell: Callable[[Row], str | Text]
    drop: int = 0  # 0: always shown; otherwise, when the table does not fit, the highest is left out first
    wrap: bool = False  # free text (a reason): may fold onto more lines; any other column is shown whole
    right: bool = False


@dataclass
class Fitted:
    """A table that fits the width it is given (see the module's docstring); ``empty`` is said
    instead when there are no rows.  ``header`` False (``--noheader``): rows only."""

    columns: list[Column]
    rows: list[Row]
    title: str | None = None
    empty: str | None = None
    header: bool = True
    rule: bool = True  # the line under the header; not on a pipe, where a table is its rows

    def shown(self, width: int) -> list[Column]:
        """The columns that fit in ``width``: the droppable ones left out, highest first, until the rest fit."""
        cells = [[column.cell(row) for row in self.rows] for column in self.columns]
        need = {}
        for column, texts in zip(self.columns, cells):
            natural = max([cell_len(column.header) if self.header else 0, *(cell_len(_plain(t)) for t in texts)])
            need[column.header] = min(natural, WRAP_MIN) if column.wrap else natural
        kept = list(self.columns)
        while sum(need[c.header] for c in kept) + GAP * (len(kept) - 1) > width:
            droppable = [c for c in kept if c.drop]
            if not droppable:
                break
            kept.remove(max(droppable, key=lambda c: c.drop))
        return kept

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        if not self.rows:
            if self.empty and self.header:
                yield Text(self.empty)
            return
        if self.title and self.header:
            yield Text(self.title)  # a line of its own: wrapped to the terminal, never to the table's width
        columns = self.shown(options.max_width)
        table = Table(show_header=self.header, box=box.SIMPLE_HEAD if self.rule else None, show_edge=False, pad_edge=False,
                      collapse_padding=True, padding=(0, 1) if self.rule else (0, GAP, 0, 0))
        for column in columns:
            table.add_column(column.header, justify="right" if column.right else "left", no_wrap=not column.wrap,
                             overflow="fold")
        for row in self.rows:
            table.add_row(*(column.cell(row) for column in columns))
        yield table


def _plain(cell: str | Text) -> str:
    return cell.plain if isinstance(cell, Text) else cell


@dataclass
class Listing:
    """What a listing command found, in every form: ``rows`` under ``key`` in the JSON document
    (with ``meta`` beside them), ``fields`` the parsable form's columns, ``human`` what a person
    sees (tables and lines, in order)."""

    schema: str  # "jobs/1": the document's "schema" is "picluster.jobs/1"
    key: str
    fields: tuple[str, ...]
    rows: list[Row]
    human: list[RenderableType | str] = field(default_factory=list)
    meta: dict[str, Any] = field(default_factory=dict)

    def document(self) -> dict[str, Any]:
        return {"schema": f"picluster.{self.schema}", **self.meta, self.key: self.rows}

    def json(self, indent: int | None = 2) -> str:
        return json.dumps(self.document(), indent=indent, ensure_ascii=False)

    def lines(self, header: bool = True) -> Iterator[str]:
        """``sacct -P``'s form: the header line (unless ``header`` is False), then one line per row."""
        if header:
            yield SEPARATOR.join(self.fields)
        for row in self.rows:
            yield parsable_line([row.get(name) for name in self.fields])


def parsable_line(values: list[Any]) -> str:
    """Values split by ``|``, on one line: a line break inside a value is written as a space, and
    a ``|`` only in the last field stays (elsewhere it too is a space), so each line splits into
    its fields at the first N-1 ``|``.  --json has every value exactly as it is."""
    texts = [flat(v) for v in values]
    cleaned = [" ".join(t.splitlines()) if t else "" for t in texts]
    return SEPARATOR.join([t.replace(SEPARATOR, " ") for t in cleaned[:-1]] + cleaned[-1:])


def flat(value: Any) -> str:
    """A JSON value as one parsable field: null empty, a list comma-joined, an object as
    ``key=value`` words (its list values comma-joined), true/false as JSON writes them."""
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return f"{value:g}" if abs(value) < 1e15 else str(int(value))
    if isinstance(value, list):
        return ",".join(flat(v) for v in value)
    if isinstance(value, dict):
        return " ".join(f"{k}={flat(v)}" for k, v in value.items())
    return str(value)


# -- times ---------------------------------------------------------------------------------------

def iso(epoch: float | None) -> str | None:
    """A moment for machines: ISO 8601 in this machine's time zone, with its offset
    (``2026-12-01T14:03:22+01:00``); None stays None."""
    if epoch is None:
        return None
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(epoch)) + _offset(epoch)


def _offset(epoch: float) -> str:
    zone = time.strftime("%z", time.localtime(epoch))  # +0100
    return f"{zone[:3]}:{zone[3:]}" if len(zone) == 5 else ""


def when(moment: str | None) -> str:
    """A row's ISO moment for people, as sacct prints it: the date and the time, without the
    offset (this machine's own zone), ``2026-12-01T14:03:22``; "-" for none."""
    return moment[:19] if moment else "-"


def duration(seconds: float | None) -> str:
    """``m:ss`` under an hour, else ``h:mm:ss`` (``1-02:03:04`` past a day, as Slurm writes it)."""
    if seconds is None:
        return "-"
    seconds = round(seconds)
    days, rest = divmod(seconds, 86400)
    if rest < 3600 and not days:
        return f"{rest // 60}:{rest % 60:02d}"
    clock = f"{rest // 3600}:{rest // 60 % 60:02d}:{rest % 60:02d}"
    return f"{days}-{rest // 3600:02d}:{rest // 60 % 60:02d}:{rest % 60:02d}" if days else clock


def dash(value: Any) -> str:
    """A cell for people: "-" for nothing, so that every row has a word in every column (awk)."""
    text = flat(value)
    return text if text else "-"
