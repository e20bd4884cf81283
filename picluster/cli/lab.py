"""`picluster lab`: test hosts on this machine, real SSH servers in network namespaces (root only)."""

import os
import shlex
import time
from pathlib import Path

import click

from picluster.cli.options import Real, Whole
from picluster.errors import ClusterError, UsageError


@click.group()
def lab() -> None:
    """Test hosts on this machine: each a network namespace with its own address, hostname,
    private /etc, /boot/firmware (a mock Pi boot partition) and share, and a real sshd."""


@lab.command()
@click.option("--nodes", "-n", type=Whole(1, 99), default=4, show_default=True, help="How many hosts.")
@click.option(
    "--name", "lab_id", default=None, help="Lab name: 1-6 lowercase letters or digits [default: random]."
)
@click.option(
    "--inventory-out",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="Also write the lab's picluster.toml here (it is always written in the lab's state dir).",
)
@click.option(
    "--timeout", type=Real(1, 600), default=60.0, show_default=True, help="Seconds to wait for SSH."
)
def up(nodes: int, lab_id: str | None, inventory_out: Path | None, timeout: float) -> None:
    """Create the hosts and wait until each answers SSH with the run's key."""
    from rich.console import Console
    from rich.table import Table

    from picluster.lab.lab import Lab

    console = Console()
    started = time.perf_counter()
    lab_ = Lab(nodes, lab_id=lab_id, owned=False)
    with console.status(f"starting {nodes} test hosts…"):
        lab_.up(timeout=timeout)
    elapsed = time.perf_counter() - started
    written = [lab_.inventory_path]
    if inventory_out is not None:
        written.append(lab_.write_inventory(inventory_out))

    table = Table(title=f"lab {lab_.id}: {lab_.subnet} on bridge {lab_.bridge}, coordinator {lab_.gateway}")
    table.add_column("host")
    table.add_column("address")
    table.add_column("ssh", overflow="fold")
    for host in lab_.hosts:
        table.add_row(host.name, host.address, shlex.join(lab_.ssh_command(host)))
    console.print(table)
    out = [f"up in {elapsed:.1f} s", *(f"inventory: {path}" for path in written)]
    out.append(f"tear down: picluster lab down --name {lab_.id}")
    for line in out:
        console.print(line, soft_wrap=True, highlight=False)


@lab.command()
@click.option("--name", "lab_id", default=None, help="Only this lab.")
def status(lab_id: str | None) -> None:
    """Show the labs on this machine and the state of each host."""
    from rich.console import Console
    from rich.table import Table

    from picluster.lab import registry as labs

    console = Console()
    ids = labs.known_ids()
    if lab_id is not None:
        if lab_id not in ids:
            raise UsageError(f"no lab named {lab_id} (labs: {', '.join(ids) or 'none'})")
        ids = [lab_id]
    if not ids:
        console.print("no labs")
        return
    for one in ids:
        lab_ = labs.open_lab(one)
        if not lab_.hosts:
            console.print(f"lab {one}: leftovers without state (picluster lab down --name {one})")
            continue
        owner = lab_.owner
        kept = f"owned by pid {owner['pid']}" if owner else "kept until `picluster lab down`"
        subnet = lab_.plan.subnet if lab_.plan else "no subnet yet"
        table = Table(title=f"lab {one}: {subnet}, {lab_.phase}, {kept}")
        for column in ("host", "address", "sshd", "link", "shaping"):
            table.add_column(column)
        for st in lab_.status():
            table.add_row(st.name, st.address, st.sshd, st.link, st.shaping or "-")
        console.print(table)


@lab.command()
@click.option("--name", "lab_id", default=None, help="The lab to tear down.")
@click.option("--all", "all_labs", is_flag=True, help="Every lab found on this machine (by name prefix).")
def down(lab_id: str | None, all_labs: bool) -> None:
    """Tear a lab down: processes, namespaces, links, run dir.  Safe to repeat."""
    from picluster.lab import naming
    from picluster.lab import registry as labs

    if lab_id is not None and all_labs:
        raise UsageError("give --name or --all, not both")
    if lab_id is not None:
        naming.check_id(lab_id)
    if os.geteuid() != 0:
        raise ClusterError("tearing a lab down needs root")
    if all_labs:
        done = labs.down_all()
        click.echo(f"down: {', '.join(done)}" if done else "no labs")
        return
    if lab_id is None:
        ids = labs.known_ids()
        if not ids:
            click.echo("no labs")
            return
        if len(ids) > 1:
            raise UsageError(f"several labs ({', '.join(ids)}): name one with --name, or use --all")
        lab_id = ids[0]
    if labs.teardown(lab_id):
        click.echo(f"lab {lab_id}: down")
    else:
        click.echo(f"lab {lab_id}: nothing to tear down")
