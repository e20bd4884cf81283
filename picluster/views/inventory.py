"""`picluster inventory`: the inventory's nodes as a listing (``picluster.inventory/1``): each
node's address, roles and TensorFlow tasks (with their ports), and the cluster's settings beside
them for --json."""

from picluster.model.clusterspec import from_inventory
from picluster.model.inventory import Inventory
from picluster.views.listing import Column, Fitted, Listing, Row, dash

NODE_FIELDS = ("node", "address", "host", "roles", "tasks")


def roles(inv: Inventory, name: str) -> list[str]:
    """ps, worker, nfs (the NFS master), and with [slurm] the queue's controller."""
    found = inv.roles_of(name)
    if inv.slurm is not None and name == inv.slurm.controller:
        found.append("slurm-controller")
    return found


def inventory_listing(inv: Inventory) -> Listing:
    layout = from_inventory(inv)
    rows: list[Row] = []
    for node in inv.nodes:
        tasks = [f"{t.job}:{t.index}" for t in layout.tasks if t.node == node.name]
        ports = {f"{t.job}:{t.index}": t.port for t in layout.tasks if t.node == node.name}
        rows.append({"node": node.name, "address": node.address, "host": node.host, "roles": roles(inv, node.name),
                     "tasks": tasks, "ports": ports})
    columns = [Column("node", lambda r: r["node"]), Column("address", lambda r: r["address"]),
               Column("roles", lambda r: dash(r["roles"])),
               Column("tasks", lambda r: " ".join(f"{t}@{r['ports'][t]}" for t in r["tasks"]) or "-", wrap=True, drop=1)]
    if any(node.host for node in inv.nodes):
        columns.append(Column("host name", lambda r: dash(r["host"]), drop=2))
    slurm = inv.slurm
    facts = {
        "cluster": inv.name, "file": None if inv.source is None else str(inv.source), "user": inv.user,
        "tf_port": inv.tf_port, "agent_port": inv.agent_port, "share_dir": str(inv.share_dir), "data_dir": str(inv.data_dir),
        "venv": inv.venv, "nfs_master": inv.nfs_master,
        "slurm": None if slurm is None else {"controller": slurm.controller, "partition": slurm.partition, "accounting": slurm.accounting},
        "users": [u.name for u in inv.users],
    }
    title = (f"cluster {inv.name}: {len(inv.nodes)} nodes, user {inv.user}, share {inv.nfs_master}:{inv.share_dir} at {inv.data_dir}"
             + (f", Slurm partition {slurm.partition}" if slurm else ""))
    return Listing("inventory/1", "nodes", NODE_FIELDS, rows, [Fitted(columns, rows, title=title)], facts)
