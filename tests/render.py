"""Views under test render to a fixed-width, colourless console that writes to a string (as rich's own tests do)."""

import io

from rich.console import Console


def console(width: int = 80, terminal: bool = False) -> Console:
    """A console of ``width`` columns; ``terminal``: it claims to be one (live panels draw only there)."""
    return Console(file=io.StringIO(), width=width, color_system=None, legacy_windows=False, force_terminal=terminal)


def text(of: Console) -> str:
    """What a console made by ``console()`` has printed so far."""
    return of.file.getvalue()  # type: ignore[attr-defined]


def render(renderable, width: int = 80) -> str:
    """One renderable (a table, a panel), as text."""
    out = console(width)
    out.print(renderable)
    return text(out)
