"""`picluster inventory --ansible`: the inventory as Ansible's YAML inventory.

The variables carry the names the shared nfs/ templates use, so both paths render them alike;
`coordinator` (picluster.nft.j2) is what each node saw the play's SSH session come from, read by
the common role as the Fabric path's facts read it.
Ansible evaluates Jinja in inventory values (a ``{{ lookup('pipe', ...) }}`` in one runs on the
controller), so every string is written as ``!unsafe`` and a JSON-quoted scalar (valid YAML):
Ansible then uses it as data, never as a template.  The values the templates substitute are
checked as configuration words (picluster.model.tokens), as the Fabric path's renderer does.
"""

import json
import shlex
from pathlib import Path

from picluster.cluster import hostkeys
from picluster.model import tokens
from picluster.model.inventory import Inventory
from picluster.provision.steps import munge, slurm
from picluster.provision.steps.firewall import template_vars
from picluster.provision.steps.nfs import MOUNTD_PORT, SLOT_TABLE_ENTRIES, nfsd_threads
from picluster.util.errors import UsageError

# Ansible's own settings and free text: not substituted into a node's configuration file.
_NOT_CONFIG = {"ansible_user", "ansible_ssh_private_key_file", "ansible_ssh_common_args", "coordinator_public_key",
               "munge_key_file"}


def ansible_inventory(inv: Inventory, known_hosts: Path | None = None, public_key: str | None = None) -> str:
    if inv.users:
        raise UsageError(f"inventory {inv.source or inv.name}: [users] (accounts, keys, work folders) is set up by "
                         "'picluster provision' only, not by the Ansible playbooks yet: provision with picluster, or leave [users] out")
    master = inv.node(inv.nfs_master)
    variables: dict[str, object] = {
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
    if inv.slurm is not None:
        variables.update(slurm.template_vars(inv))
        variables.update(slurm_headroom_mb=slurm.HEADROOM_MB, slurm_headroom_share=slurm.HEADROOM_SHARE)
        # This machine's copy of the cluster's key, as `picluster provision` keeps it; the slurm
        # role fills it from the controller (or makes the first key) when it is missing.
        variables["munge_key_file"] = str(munge.key_path(inv))
    if inv.ssh_key is not None:
        variables["ansible_ssh_private_key_file"] = str(inv.ssh_key)
    if public_key is not None:
        variables["coordinator_public_key"] = public_key
    # The policy of picluster's own connections (cluster/hostkeys.py), in OpenSSH's words: the
    # --known-hosts file alone, or picluster's file and ~/.ssh/known_hosts with a new node's key
    # pinned in picluster's (accept-new writes to the first file named).
    files, checking = ([known_hosts], "yes") if known_hosts is not None else ([hostkeys.own_file(), hostkeys.user_file()], "accept-new")
    variables["ansible_ssh_common_args"] = f"-o {shlex.quote('UserKnownHostsFile=' + ' '.join(map(_ssh_word, files)))} -o StrictHostKeyChecking={checking}"
    for key, value in variables.items():
        if key not in _NOT_CONFIG:
            variables[key] = _config(key, value)
    for n in inv.nodes:  # host names are YAML keys: checked, not tagged
        tokens.hostname(n.name, "node name")
    lines = [
        f"# Ansible inventory of cluster {inv.name}, written by `picluster inventory --ansible`",
        f"# from {json.dumps(str(inv.source or 'picluster.toml'))}: edit that file and write this one again.",
        "all:",
        "  vars:",
    ]
    lines += [f"    {key}: {scalar(value)}" for key, value in variables.items()]
    lines += ["  hosts:"]
    lines += [f"    {json.dumps(n.name)}:\n      ansible_host: {scalar(n.address)}" for n in inv.nodes]
    lines += ["  children:"]
    controller = [inv.slurm.controller] if inv.slurm is not None else []  # empty: the playbooks' patterns still name it
    for group, members in (("nfs_server", [inv.nfs_master]), ("ps", inv.ps), ("worker", inv.workers), ("slurm_controller", controller)):
        lines += [f"    {group}:", "      hosts:"]
        lines += [f"        {json.dumps(name)}: {{}}" for name in members]
    return "\n".join(lines) + "\n"


def _ssh_word(path: Path) -> str:
    """A path as one word of an ssh_config value (ssh splits UserKnownHostsFile at spaces)."""
    text = str(path)
    if '"' in text or "\\" in text:
        raise UsageError(f"{text}: a known_hosts path for ssh cannot hold a double quote or a backslash")
    return f'"{text}"'


def scalar(value: object) -> str:
    """``value`` in YAML flow style, every string tagged ``!unsafe`` (data, never a Jinja template)."""
    if isinstance(value, str):
        return f"!unsafe {json.dumps(value)}"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{json.dumps(str(k))}: {scalar(v)}" for k, v in value.items()) + "}"
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(scalar(v) for v in value) + "]"
    if isinstance(value, bool) or value is None:
        return json.dumps(value)
    if isinstance(value, int):
        return str(value)
    raise TypeError(f"no YAML form for {type(value).__name__}")


def _config(key: str, value: object) -> object:
    """A template variable as the templates see it: checked like the Fabric renderer's, lists of words joined."""
    if isinstance(value, list) and value and all(isinstance(item, dict) for item in value):
        return [{k: _config(f"{key}.{k}", v) for k, v in item.items()} for item in value]
    text = tokens.config_word(value, key)
    return value if isinstance(value, int) else text
