"""`picluster provision` (Fabric over every node), `picluster inventory` (its nodes, or --ansible),
and what the Ansible twin needs: `picluster wheelhouse`, `picluster playbooks`."""

from pathlib import Path

import click

from picluster.cli.confirm import yes_option
from picluster.cli.options import Real, Whole, complete_nodes, node_inventory_option, option
from picluster.cli.output import Form, output_options, show
from picluster.util.errors import ClusterError, StorageError, UsageError

_known_hosts_option = option(
    "--known-hosts",
    type=click.Path(dir_okay=False, exists=True, path_type=Path),
    default=None,
    show_default="~/.ssh/known_hosts and picluster's own file; a new node's key is pinned there on first contact, a changed one is refused",
    help="Trust only the host keys in this file; an unknown node is refused too.",
)


def _load(inventory):
    """The parsed inventory these commands cannot do without."""
    if inventory is None:
        raise UsageError("this command needs an inventory: pass --inventory FILE, set PICLUSTER_INVENTORY, or run it in the folder that holds picluster.toml")
    return inventory


@click.command()
@node_inventory_option
@option("--only", default=None, metavar="STEP,..", help="Run only these steps (facts always runs): "
        "hostname, raspi, packages, nfs-server, nfs-client, ssh, runtime, firewall; with [slurm], slurm and queue.")
@option("--dry-run", is_flag=True, help="Print the plan per node; change nothing.")
@option("--venv", default=None,
        show_default="the inventory's cluster.venv", help="The virtualenv on each node (relative: under the user's home).")
@option("--nfsd-threads", type=Whole(1, 1024), default=None,
        show_default="max(8, number of nodes)", help="NFS server threads (nfsd) on the NFS master.")
@option("--fanout", type=Whole(1, 64), default=8, show_default=True, help="Nodes worked on at once.")
@option("--timeout", type=Real(1, 3600), default=120.0, show_default=True,
        help="Seconds one command may take before its node counts as unreachable (installs get longer).")
@_known_hosts_option
@option("--replaced", default=None, metavar="NODESET", shell_complete=complete_nodes,
        help="Nodes whose card was written afresh (a node set: node03, node[03-04], @workers!node02): pin the host key each "
             "presents now (the old one is shown), provision them, and start their tasks if the rest of the cluster is up.")
@option("--rotate-munge-key", is_flag=True,
        help="With [slurm]: make a new munge key, install it on every node and restart munge and the Slurm daemons "
             "(asks first; --yes does not).")
@yes_option
def provision(inventory, only, dry_run, venv, nfsd_threads, fanout, timeout, known_hosts, replaced, rotate_munge_key, yes) -> None:
    """Bring every node to the cluster's state: hostname, Pi settings, packages, NFS, SSH, Python, firewall.

    Idempotent: a second run reports no changes.  Exit code 1 when any node failed; the others
    still complete."""
    from contextlib import nullcontext

    from rich.console import Console

    from picluster.cluster import hostkeys
    from picluster.model import nodeset
    from picluster.model.inventory import venv_path
    from picluster.model.nodegroups import select
    from picluster.provision.report import show
    from picluster.provision.runner import parse_only, run_order
    from picluster.provision.runner import provision as run
    from picluster.provision.steps import Options
    from picluster.util import verbosity
    from picluster.views.steps import StepProgress

    inv = _load(inventory)
    steps = parse_only(only)
    fresh = tuple(select(inv, replaced)) if replaced is not None else ()
    if rotate_munge_key and inv.slurm is None:
        raise UsageError("--rotate-munge-key: the inventory has no [slurm] table, so its nodes have no munge key")
    if rotate_munge_key and steps is not None and "slurm" not in steps:
        raise UsageError("--rotate-munge-key: the slurm step installs the key; add it to --only")
    if venv is not None and inv.users and not venv.startswith("/"):
        raise UsageError(f"--venv {venv}: with [users], the runtime must be where every account can run it: give an absolute path")
    if rotate_munge_key and not dry_run:
        from picluster.cli.confirm import confirm

        # The old key is gone once replaced: a node it did not reach cannot talk to the others until provisioned again.
        confirm(f"replace the munge key of {inv.name} on {nodeset.fold(n.name for n in inv.nodes)} and restart munge and the Slurm daemons", yes)
    # Every connection of this command, the tasks a replaced node rejoins with included.
    hostkeys.use(hostkeys.strict(known_hosts) if known_hosts is not None else hostkeys.accept_new())
    hostkeys.current().check_files()  # a malformed known_hosts is refused before any connection
    options = Options(
        dry_run=dry_run, only=steps, venv=inv.venv if venv is None else venv_path(venv, "--venv"), nfsd_threads=nfsd_threads,
        fanout=fanout, timeout=timeout, known_hosts=known_hosts, replaced=fresh, rotate_munge_key=rotate_munge_key,
        connect_timeout=min(10.0, timeout),
    )  # fmt: skip
    console = Console()
    order = list(run_order(steps, inv.slurm is not None, bool(inv.users)))
    progress = None if verbosity.quiet() else StepProgress(console, order)  # live on a terminal, else a line per step
    with progress or nullcontext():
        reports = run(inv, options, watch=progress)
    show(console, reports, order, dry_run)
    failed = [r for r in reports if r.failed]
    if failed:
        first = failed[0]
        raise ClusterError(
            f"provisioning failed on {nodeset.fold(r.name for r in failed)} ({first.name}: {first.first_failure()})"
        )
    if fresh and not dry_run:
        from picluster.provision.rejoin import start_tasks

        with nullcontext() if verbosity.quiet() else console.status(f"starting the tasks of {nodeset.fold(fresh)}…"):
            started = start_tasks(inv, list(fresh))
        if started is None:
            console.print("the rest of the cluster is not up: its tasks start with 'picluster cluster up'", highlight=False)
        for name, what in (started or {}).items():
            console.print(f"{name}: started {', '.join(what)}" if what else f"{name}: its tasks were running already", highlight=False)


@click.command("inventory")
@node_inventory_option
@option("--ansible", "as_ansible", is_flag=True, help="Write an Ansible (YAML) inventory (for ansible/site.yml) instead of the listing.")
@option("--out", type=click.Path(dir_okay=False, path_type=Path), default=None,
        show_default="standard output", help="With --ansible: write it here.")
@_known_hosts_option
@output_options
def inventory(inventory, as_ansible, out, known_hosts, form: Form) -> None:
    """List the inventory's nodes: address, roles (ps, worker, nfs, slurm-controller) and
    TensorFlow tasks with their ports; with --ansible, write the Ansible twin's inventory."""
    from picluster.provision.ansible_inventory import ansible_inventory
    from picluster.provision.runner import public_key

    if not as_ansible:
        if out is not None or known_hosts is not None:
            raise UsageError(f"{'--out' if out is not None else '--known-hosts'} is for the Ansible inventory: add --ansible")
        from picluster.views.inventory import inventory_listing

        show(inventory_listing(_load(inventory)), form)
        return
    if not form.human:
        raise UsageError("--json, --parsable and --noheader are for the listing; --ansible writes YAML")
    if out is not None:
        from picluster.util import atomic

        try:
            atomic.not_a_file(out)  # a rename would replace a device or a pipe
        except StorageError as exc:
            raise UsageError(f"--out {out}: {exc}") from None
    inv = _load(inventory)
    if known_hosts is not None:
        from picluster.cluster import hostkeys

        hostkeys.strict(known_hosts)  # missing, unreadable or malformed: refused here, not by ssh later
    text = ansible_inventory(inv, known_hosts=known_hosts, public_key=public_key(inv.ssh_key))
    if out is None:
        click.echo(text, nl=False)
    else:
        atomic.write_text(out, text)  # whole or not at all; a failure is one StorageError line


@click.command("playbooks")
@option("--out", type=click.Path(file_okay=False, path_type=Path), required=True,
        help="Folder to copy them into (made if missing); its other files, such as inventory.yml, stay.")
@option("--force", is_flag=True, help="Replace the twin's files that differ there (edited, or another version's).")
def playbooks(out: Path, force: bool) -> None:
    """Copy the Ansible twin of provision and of the node chores (site.yml, reboot.yml,
    upgrade.yml, shutdown.yml, their roles and templates) into a folder, to run with ansible-playbook.

    Then: picluster inventory --ansible --out DIR/inventory.yml, and in DIR: ansible-playbook site.yml."""
    from picluster.provision import twin

    written = twin.copy(out, force)
    said = f"{len(written)} file{'s' if len(written) != 1 else ''} written" if written else "already there, the same"
    click.echo(f"the Ansible twin ({', '.join(twin.PLAYBOOKS)}) in {out}: {said}")


@click.command("wheelhouse")
@option("--out", type=click.Path(file_okay=False, path_type=Path), required=True,
        help="Directory to fill with wheels (made if missing).")
@option("--arch", default="aarch64", show_default=True, help="The nodes' machine (uname -m).")
@option("--python", "python_version", default="3.11.2", show_default=True, help="The nodes' python3 version.")
@option("--glibc", default="2.36", show_default=True, help="The nodes' C library version (getconf GNU_LIBC_VERSION).")
@click.argument("requirements", nargs=-1)
def wheelhouse(out: Path, arch: str, python_version: str, glibc: str, requirements: tuple[str, ...]) -> None:
    """Download the wheels nodes need, once, for ansible/'s runtime role (`-e wheelhouse=DIR`).

    By default picluster and its dependencies (TensorFlow among them) for Raspberry Pi OS bookworm
    64-bit; REQUIREMENTS names another set.  `picluster provision` does the same by itself."""
    import shutil

    from picluster.provision import wheelhouse as wh

    target = wh.Platform.asked(arch, python_version, glibc)  # usage errors, all found before any download
    wanted = wh.check_requirements(list(requirements)) if requirements else None
    wh.check_out(out)
    own = None
    if wanted is not None:
        house = wh.download(target, wanted)
    else:
        own = wh.own_wheel()
        house = wh.download(target, wh.requirements_of(own, target))
    try:
        files = dict(house.files)
        for name in files:
            shutil.copyfile(house.dir / name, out / name)
        if own is not None:
            shutil.copyfile(own, out / own.name)
            files[own.name] = wh.sha256(own)
            shutil.rmtree(own.parent, ignore_errors=True)
        (out / wh.MANIFEST).write_text(wh.Wheelhouse(out, files).manifest_text())
    except OSError as exc:
        raise StorageError(out, exc) from None
    click.echo(f"{len(files)} wheels for {target.key} in {out}")
