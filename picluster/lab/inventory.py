"""The lab's picluster.toml: the same file a Pi cluster's owner writes, for the lab's hosts."""

import json

from picluster.lab.host import DATA_DIR, SHARE_DIR, Host
from picluster.lab.plan import Plan
from picluster.model import nodeset

TF_PORT = 2222


def inventory_text(plan: Plan, hosts: list[Host], key_path: str) -> str:
    names = [h.name for h in hosts]
    octets = [int(h.address.rsplit(".", 1)[1]) for h in hosts]
    base = hosts[0].address.rsplit(".", 1)[0]
    workers = names[1:] or names[:1]
    return f"""\
[cluster]
name = {_toml(f"lab-{plan.id}")}
user = {_toml(plan.user.name)}
nodes = {_toml(nodeset.fold(names))}
addresses = {_toml(f"{base}.[{octets[0]}-{octets[-1]}]" if len(octets) > 1 else hosts[0].address)}
subnet = {_toml(str(plan.subnet))}
ssh_key = {_toml(key_path)}
tf_port = {TF_PORT}
share_dir = {_toml(SHARE_DIR)}
data_dir = {_toml(DATA_DIR)}

[roles]
ps = {_toml(names[0])}
worker = {_toml(nodeset.fold(workers))}
nfs_master = {_toml(names[0])}
"""


def _toml(value: str) -> str:
    # A JSON string is a valid TOML basic string.
    return json.dumps(value)
