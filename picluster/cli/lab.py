"""`picluster lab`: test hosts on this machine (root only): real SSH servers in network namespaces,
or (--vm) virtual machines with their own kernel."""

import os
import shlex
import time
from pathlib import Path

import click

from picluster.cli.confirm import yes_option
from picluster.cli.group import Group
from picluster.cli.options import Real, Whole, exclude_option, option, other_spelling
from picluster.cli.output import Form, output_options, show
from picluster.util.errors import ClusterError, UsageError


@click.group(cls=Group)
def lab() -> None:
    """Test hosts on this machine: each a network namespace with its own address, hostname,
    private /etc, /boot/firmware (a mock Pi boot partition) and share, and a real sshd; or, with
    --vm, a Debian 12 virtual machine with its own kernel on the same bridge and addresses."""


@lab.command()
@option("--nodes", "-n", type=Whole(1, 99), default=4, show_default=True, help="How many hosts (each standing in for a node).")
@option(
    "--name", "lab_id", default=None, show_default="random", help="Lab name: 1-6 lowercase letters or digits."
)
@option(
    "--inventory-out",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="Also write the lab's picluster.toml here (it is always written in the lab's state dir).",
)
@option(
    "--timeout", type=Real(1, 3600), default=None, show_default="60; 600 with --vm; 1800 with --arch arm64", help="Seconds to wait for SSH."
)
@option("--vm", is_flag=True, help="Virtual machines with their own kernel (qemu) instead of namespaces.")
# The choices are lab/vm/image.py's ARCHES (a test checks): that module is too heavy to import here.
@option("--arch", type=click.Choice(["amd64", "arm64"]), default="amd64", show_default=True,
        help="With --vm: the VMs' Debian architecture; arm64 is the Pi's, emulated (slow; its image builds once in tens of minutes).")
@option("--share-venv", is_flag=True,
        help="With --vm: each VM runs this machine's venv, its Python and picluster read-only at their own paths (virtiofs), "
             "so an inventory's venv can be this one and provisioning installs no TensorFlow. Namespace hosts always do.")
@option("--cpu", type=float, default=None, help="Cores of CPU time each host may use, e.g. 0.5 (a cgroup CFS quota).")
@option("--memory", default=None, help="Memory each host may use, swap included, e.g. 1G or 512M (a cgroup limit).")
@option("--profile", default=None, help="Limits of a board: pi3b (1 GB, CPU calibrated to the thesis's Pi, 300 Mbit/s link); --cpu/--memory/--link override it.")
@option("--link", default=None, metavar="RATE",
        show_default="the profile's; else unlimited", help="Each host's link rate, both ways, as tc writes it: 300mbit (a Pi 3B+'s Ethernet), 1gbit (a Pi 4's).")
@other_spelling("--workers", "lab up counts hosts: give --nodes {value}")
def up(nodes: int, lab_id: str | None, inventory_out: Path | None, timeout: float | None, vm: bool, arch: str, share_venv: bool,
       cpu: float | None, memory: str | None, profile: str | None, link: str | None) -> None:
    """Create the hosts and wait until each answers SSH with the run's key."""
    from contextlib import nullcontext

    from rich.console import Console
    from rich.table import Table

    from picluster.lab import naming
    from picluster.lab.host import HostOptions
    from picluster.lab.lab import Lab
    from picluster.lab.limits import profile_link, resolve
    from picluster.lab.links import parse_rate
    from picluster.util import verbosity

    console = Console()
    started = time.perf_counter()
    limits = resolve(nodes, cpu, memory, profile) if (cpu, memory, profile) != (None, None, None) else None
    if link is None and not vm:  # a VM's end of the link is in its own kernel: the profile's rate is left out
        link = profile_link(profile)
    if link is not None:  # refused before anything is made
        parse_rate(link)
        if vm:
            raise UsageError("--link shapes namespace hosts only (a VM's end of the link is in its own kernel); leave out --link or --vm")
    if share_venv and not vm:
        raise UsageError("--share-venv is for VMs: namespace hosts see this machine's venv already; add --vm or leave it out")
    shared = {naming.host_name(i): HostOptions(coordinator_python=True) for i in range(1, nodes + 1)} if share_venv else None
    lab_ = Lab(nodes, lab_id=lab_id, owned=False, limits=limits, vm=vm, arch=arch, host_options=shared)
    def said(line: str) -> None:  # a VM lab takes minutes: each stage as it ends, with the time so far
        if not verbosity.quiet():
            console.print(f"{line} ({time.perf_counter() - started:.0f} s)", soft_wrap=True, highlight=False, markup=False)

    with nullcontext() if verbosity.quiet() else console.status(f"starting {nodes} test {(f'{arch} VMs' if arch != 'amd64' else 'VMs') if vm else 'hosts'}…"):
        lab_.up(timeout=timeout, on_progress=said)
        if link is not None:
            try:
                for host in lab_.hosts:
                    lab_.shape(host, rate=link)
            except BaseException:
                lab_.down()  # a lab without the links asked for is not left behind
                raise
    elapsed = time.perf_counter() - started
    written = [lab_.inventory_path]
    if inventory_out is not None:
        written.append(lab_.write_inventory(inventory_out))

    table = Table(title=f"lab {lab_.id} ({lab_.kind.describe()}): {lab_.subnet} on bridge {lab_.bridge}, coordinator {lab_.gateway}")
    table.add_column("host")
    table.add_column("address")
    table.add_column("ssh", overflow="fold")
    for host in lab_.hosts:
        table.add_row(host.name, host.address, shlex.join(lab_.ssh_command(host)))
    console.print(table)
    out = [f"up in {elapsed:.1f} s", *(f"inventory: {path}" for path in written)]
    if limits:
        out.insert(1, f"each host limited to {limits.describe()} (cgroup v{_cgroup_version()})")
    if link is not None:
        out.insert(1, f"each host's link shaped to {link} both ways (tc tbf)")
    out.append(f"tear down: picluster lab down --name {lab_.id}")
    for line in out:
        console.print(line, soft_wrap=True, highlight=False)


@lab.command()
@option("--name", "lab_id", default=None, help="Only this lab.")
@output_options
def status(lab_id: str | None, form: Form) -> None:
    """Show the labs on this machine and the state of each host."""
    from picluster.lab import labs, registry
    from picluster.views.labs import labs_listing

    ids = registry.known_ids()
    if lab_id is not None:
        if lab_id not in ids:
            raise UsageError(f"no lab named {lab_id} (labs: {', '.join(ids) or 'none'})")
        ids = [lab_id]
    found, hosts = [], {}
    for one in ids:
        lab_ = labs.open_lab(one)
        if not lab_.hosts:
            found.append({"name": one, "subnet": None, "phase": "leftovers", "owner_pid": None,
                          "title": f"lab {one}: leftovers without state (picluster lab down --name {one})"})
            continue
        owner = lab_.owner
        kept = f"owned by pid {owner['pid']}" if owner else "kept until `picluster lab down`"
        subnet = str(lab_.plan.subnet) if lab_.plan else None
        found.append({"name": one, "subnet": subnet, "phase": lab_.phase, "owner_pid": owner["pid"] if owner else None,
                      "title": f"lab {one}: {subnet or 'no subnet yet'}, {lab_.phase}, {kept}"})
        hosts[one] = lab_.status()
    show(labs_listing(found, hosts), form)


def _cgroup_version() -> int | None:
    from picluster.lab.cgroups import version

    return version()


@lab.command()
@option("--name", "lab_id", default=None, show_default="the only one", help="The lab.")
@click.argument("nodes", required=False)
@exclude_option
@option("--timeout", type=Real(1, 3600), default=600.0, show_default=True,
        help="Seconds each VM may take to answer SSH again.")
def reboot(lab_id: str | None, nodes: str | None, exclude: tuple[str, ...], timeout: float) -> None:
    """Reboot VM hosts (all, or NODES such as node[02-03] or node[01-04]!node02) and wait until
    each answers SSH again."""
    from picluster.model import nodeset

    if os.geteuid() != 0:
        raise ClusterError("rebooting lab hosts needs root (they belong to root's lab)")
    lab_ = _one_lab(lab_id)
    names = nodeset.expand(nodes) if nodes else [h.name for h in lab_.hosts]
    spared = {name for other in exclude for name in nodeset.expand(other)}
    names = [name for name in names if name not in spared]
    if not names:
        raise UsageError("-x leaves no host to reboot")
    for name, seconds in lab_.reboot(*names, timeout=timeout).items():
        click.echo(f"{name}: back after {seconds:.1f} s")


def _one_lab(lab_id: str | None):
    from picluster.lab import naming, registry
    from picluster.lab.lab import Lab

    if lab_id is None:
        ids = registry.known_ids()
        if len(ids) != 1:
            raise UsageError(f"name the lab with --name (labs: {', '.join(ids) or 'none'})")
        lab_id = ids[0]
    return Lab.load(naming.check_id(lab_id))


@lab.command()
@option("--name", "lab_id", default=None, help="The lab to tear down.")
@option("--all", "all_labs", is_flag=True, help="Every lab found on this machine (by name prefix); asks first (--yes does not).")
@yes_option
def down(lab_id: str | None, all_labs: bool, yes: bool) -> None:
    """Tear a lab down: processes, namespaces, links, run dir.  Safe to repeat."""
    from picluster.cli.confirm import confirm
    from picluster.lab import labs, naming, registry

    if lab_id is not None and all_labs:
        raise UsageError("give --name or --all, not both")
    if lab_id is not None:
        naming.check_id(lab_id)
    if os.geteuid() != 0:
        raise ClusterError("tearing a lab down needs root")
    if all_labs:
        ids = registry.known_ids()
        if not ids:
            click.echo("no labs")
            return
        # Every lab on this machine, other people's and other test runs' among them.
        confirm(f"tear down every lab on this machine ({', '.join(ids)})", yes)
        done = labs.down_all()
        click.echo(f"down: {', '.join(done)}" if done else "no labs")
        return
    if lab_id is None:
        ids = registry.known_ids()
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
