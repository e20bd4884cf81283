"""`picluster inventory --ansible`: the inventory as Ansible's YAML inventory.

The variables carry the names the shared nfs/ templates use, so both paths render them alike;
`coordinator` (picluster.nft.j2) is what each node saw the play's SSH session come from, read by
the common role as the Fabric path's facts read it.
Scalars are written as JSON, which is valid YAML, so no YAML library is needed.
"""

import json
from pathlib import Path

from picluster.inventory import Inventory
from picluster.provision.steps.firewall import template_vars
from picluster.provision.steps.nfs import MOUNTD_PORT, SLOT_TABLE_ENTRIES, nfsd_threads


def ansible_inventory(inv: Inventory, known_hosts: Path | None = None, public_key: str | None = None) -> str:
    master = inv.node(inv.nfs_master)
    variables = {
        "ansible_user": inv.user,
        "cluster_name": inv.name,
        "cluster_user": inv.user,
        "share_dir": str(inv.share_dir),
        "data_dir": str(inv.data_dir),
        **template_vars(inv),  # subnet, tcp_ports, udp_ports
        "nfs_server": master.address,
        "nfs_master": master.name,
        "nfsd_threads": nfsd_threads(len(inv.nodes)),
        "mountd_port": MOUNTD_PORT,
        "slot_table_entries": SLOT_TABLE_ENTRIES,
        "cluster_nodes": [{"name": n.name, "address": n.address} for n in inv.nodes],
        "venv": inv.venv.removeprefix("~/"),  # the role's paths are relative to the home already
    }
    if inv.ssh_key is not None:
        variables["ansible_ssh_private_key_file"] = str(inv.ssh_key)
    if public_key is not None:
        variables["coordinator_public_key"] = public_key
    if known_hosts is not None:
        variables["ansible_ssh_common_args"] = f"-o UserKnownHostsFile={known_hosts} -o StrictHostKeyChecking=yes"
    j = json.dumps
    lines = [
        f"# Ansible inventory of cluster {inv.name}, written by `picluster inventory --ansible`",
        f"# from {inv.source or 'picluster.toml'}: edit that file and write this one again.",
        "all:",
        "  vars:",
    ]
    lines += [f"    {key}: {j(value)}" for key, value in variables.items()]
    lines += ["  hosts:"]
    lines += [f"    {j(n.name)}:\n      ansible_host: {j(n.address)}" for n in inv.nodes]
    lines += ["  children:"]
    for group, members in (("nfs_server", [inv.nfs_master]), ("ps", inv.ps), ("worker", inv.workers)):
        lines += [f"    {group}:", "      hosts:"]
        lines += [f"        {j(name)}: {{}}" for name in members]
    return "\n".join(lines) + "\n"
