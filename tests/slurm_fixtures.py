"""A small Slurm inventory for the units that read job scripts and batch requests: loopback
addresses only, so the refusals they test happen before anything connects."""

import tomllib

from picluster.model.inventory import parse_inventory

INVENTORY = """
[cluster]
name = "pis"
user = "pi"
nodes = "node[01-04]"
addresses = "127.0.0.[11-14]"
venv = "/opt/pcvenv"

[slurm]
partition = "lab"
"""


def inventory(text: str = INVENTORY):
    return parse_inventory(tomllib.loads(text))
