"""``picluster plot SOURCE``: figures (PNG and SVG) from a sweep CSV, a scaling CSV or a run directory."""

from pathlib import Path

import click

from picluster.cli.options import option


@click.command()
@click.argument("source", type=click.Path(path_type=Path))
@option("--out", "out_dir", type=click.Path(file_okay=False, path_type=Path), default=None,
        show_default="beside a CSV; RUN_DIR/plots for a run", help="Directory for the figures.")
@option("--format", "formats", default="png,svg", show_default=True, help="Figure format: png, svg or both.")
@option("--title", default="", help="Title of the main figure.")
def plot(source: Path, out_dir: Path | None, formats: str, title: str) -> None:
    """Draw SOURCE: a Monte-Carlo sweep CSV (time by samples with the thesis's Table 5 dashed,
    speedup by nodes), a HAR run directory (accuracy and loss curves, input/compute/exchange per
    epoch, each node's CPU and memory) or a HAR scaling CSV (speedup, efficiency)."""
    from picluster.plots import plot as draw
    from picluster.plots.canvas import check_formats

    for path in draw(source, out_dir, check_formats(formats), title):
        click.echo(str(path))
