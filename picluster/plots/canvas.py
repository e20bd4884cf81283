"""Matplotlib, set up once for files (no display), and figures written in each asked-for format."""

import math
from pathlib import Path

from picluster.errors import UsageError

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


def save(fig, out_dir: Path, name: str, formats: tuple[str, ...]) -> list[Path]:
    """``out_dir/name.png`` and/or ``.svg``; the figure is closed afterwards."""
    plt = pyplot()
    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    try:
        fig.tight_layout()
        for fmt in formats:
            path = out_dir / f"{name}.{fmt}"
            fig.savefig(path, format=fmt, metadata={"Software": "picluster"} if fmt == "png" else None)
            written.append(path)
    finally:
        plt.close(fig)
    return written


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
