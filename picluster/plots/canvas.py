"""Matplotlib, set up once for files (no display), and figures written in each asked-for format.

A call draws every figure into memory first (``save`` renders, it does not write), then
``write_all`` puts them on disk: each beside its name, then all renamed into place.  So a bad
value or a full disk leaves none of the call's figures, rather than the first of them.
"""

import io
import math
import os
from pathlib import Path

from picluster.util.errors import StorageError, UsageError

Rendered = tuple[Path, bytes]  # where a figure goes, and its bytes

FORMATS = ("png", "svg")


def pyplot():
    """matplotlib.pyplot on the Agg backend (files only), with text kept as text in SVG."""
    try:
        import matplotlib
    except ImportError:
        raise UsageError("picluster plot needs matplotlib: pip install 'picluster[plot]'") from None
    matplotlib.use("Agg")
    matplotlib.rcParams.update({"svg.fonttype": "none", "figure.dpi": 100, "savefig.dpi": 120,
                                "axes.grid": True, "grid.alpha": 0.3, "axes.spines.top": False, "axes.spines.right": False})
    import matplotlib.pyplot as plt

    return plt


def save(fig, out_dir: Path, name: str, formats: tuple[str, ...]) -> list[Rendered]:
    """``out_dir/name.png`` and/or ``.svg``, rendered (``write_all`` writes them); the figure is closed."""
    plt = pyplot()
    rendered = []
    try:
        fig.tight_layout()
        for fmt in formats:
            buffer = io.BytesIO()
            fig.savefig(buffer, format=fmt, metadata={"Software": "picluster"} if fmt == "png" else None)
            rendered.append((out_dir / f"{name}.{fmt}", buffer.getvalue()))
    finally:
        plt.close(fig)
    return rendered


def check_out(out_dir: Path, make: bool = True) -> None:
    """The output folder, made if missing (``make``); one line when it cannot be.  Checked (not
    made) before any drawing, so a bad value leaves no empty folder behind."""
    if out_dir.is_dir():
        return
    for place in (out_dir, *out_dir.parents):
        if place.exists() and not place.is_dir():
            raise UsageError(f"--out {out_dir}: {place} is not a directory; give a folder for the figures")
    if not make:
        return
    try:
        out_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise StorageError(out_dir, exc) from None


def write_all(rendered: list[Rendered]) -> list[Path]:
    """Every figure, or none: each written beside its name, then all renamed into place."""
    for folder in dict.fromkeys(path.parent for path, _ in rendered):
        check_out(folder)
    parts: list[Path] = []
    try:
        for path, data in rendered:
            parts.append(path.with_name(f".{path.name}.part"))
            with open(parts[-1], "wb") as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
        for (path, _), part in zip(rendered, parts):
            os.replace(part, path)
    except OSError as exc:
        for part in parts:
            part.unlink(missing_ok=True)
        raise StorageError(exc.filename or parts[-1], exc) from None
    return [path for path, _ in rendered]


def check_title(title: str) -> str:
    """A title with math text (an even number of unescaped ``$``) must parse, else one line, not
    matplotlib's traceback when the figure is drawn."""
    if not title:
        return title
    pyplot()
    from matplotlib import cbook
    from matplotlib.mathtext import MathTextParser

    if cbook.is_math_text(title):
        try:
            MathTextParser("path").parse(title)
        except ValueError as exc:
            why = " ".join(str(exc).split()).split("ParseException: ")[-1].split("ParseSyntaxException: ")[-1]
            raise UsageError(f"--title {title!r}: not valid math text ({why}); write a literal $ as \\$") from None
    return title


def check_formats(formats: str) -> tuple[str, ...]:
    chosen = tuple(f.strip().lower() for f in formats.split(",") if f.strip())
    bad = [f for f in chosen if f not in FORMATS]
    if bad or not chosen:
        raise UsageError(f"--format {formats!r}: choose png, svg or png,svg")
    return chosen


def color(index: int) -> str:
    """The n-th colour of matplotlib's default cycle: ours and the thesis's line for one node count match."""
    return f"C{index % 10}"


def linear_reference(ax, top: int) -> None:
    """Speedup = count, drawn as a curve: on a log-2 count axis a straight segment from (1, 1) to
    (top, top) would show 2 workers "ideally" at 3.3x.  Sampled 16 times per doubling."""
    steps = max(1, round(16 * math.log2(max(top, 1))))
    xs = [2 ** (i / 16) for i in range(steps + 1)]
    (ideal,) = ax.plot(xs, xs, ":", color="grey", label="linear")
    ideal.set_gid("linear")
