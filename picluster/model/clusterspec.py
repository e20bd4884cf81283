"""Tasks, the TensorFlow ClusterSpec and TF_CONFIG, from an inventory or for the local cluster."""

import ipaddress
import json
from dataclasses import asdict, dataclass, replace

from picluster.model.inventory import Inventory
from picluster.util.errors import UsageError

JOBS = ("ps", "worker")


@dataclass(frozen=True)
class Task:
    job: str
    index: int
    node: str
    host: str
    port: int

    @property
    def address(self) -> str:
        return f"{self.host}:{self.port}"

    @property
    def device(self) -> str:
        return f"/job:{self.job}/task:{self.index}"

    @property
    def label(self) -> str:
        return f"{self.job}:{self.index}"


@dataclass(frozen=True)
class Layout:
    """Every task of a cluster, ps first, each job in index order."""

    tasks: tuple[Task, ...]

    def with_ports(self, ps_port: int, worker_port: int) -> "Layout":
        """The same tasks, the ps ones on ``ps_port`` and the workers on ``worker_port`` (a Slurm
        job's servers take the ports Slurm reserved for their step)."""
        return Layout(tuple(replace(t, port=ps_port if t.job == "ps" else worker_port) for t in self.tasks))

    def job(self, name: str) -> list[Task]:
        return [t for t in self.tasks if t.job == name]

    @property
    def ps(self) -> list[Task]:
        return self.job("ps")

    @property
    def workers(self) -> list[Task]:
        return self.job("worker")

    def one_per_node(self) -> list[Task]:
        """Every worker, then the ps task of each node that runs no worker: the servers a job any
        server can run (Monte-Carlo) spreads over, so `--nodes 8` on eight Pis uses the one that
        holds the ps too.  The local cluster's ps shares its node with the workers: not added."""
        with_worker = {t.node for t in self.workers}
        spare: dict[str, Task] = {}
        for t in self.ps:
            if t.node not in with_worker:
                spare.setdefault(t.node, t)
        return self.workers + list(spare.values())

    def task(self, job: str, index: int) -> Task:
        for t in self.tasks:
            if t.job == job and t.index == index:
                return t
        count = len(self.job(job))
        raise UsageError(f"no task {job}:{index} in this cluster ({job} has {count} task{'s' if count != 1 else ''})")

    def cluster_dict(self) -> dict[str, list[str]]:
        """The ClusterSpec as a dict, jobs without tasks left out (TensorFlow rejects empty jobs)."""
        return {job: [t.address for t in self.job(job)] for job in JOBS if self.job(job)}

    def tf_config(self, job: str, index: int, chief: str | None = None) -> str:
        """TF_CONFIG for task ``job:index``.  With ``chief`` (an address) the cluster also has a
        chief there: TensorFlow 2's coordinator, which joins servers started without it."""
        cluster = self.cluster_dict()
        if chief is not None:
            cluster = {"chief": [chief], **cluster}
        if job == "chief":
            if chief is None or index != 0:
                raise UsageError("TF_CONFIG for the chief needs its address, and the chief is task 0")
        else:
            self.task(job, index)
        return json.dumps({"cluster": cluster, "task": {"type": job, "index": index}})

    def to_json(self) -> list[dict]:
        return [asdict(t) for t in self.tasks]

    @classmethod
    def from_json(cls, rows: list[dict]) -> "Layout":
        return cls(tuple(Task(**row) for row in rows))


def from_inventory(inv: Inventory) -> Layout:
    """ps tasks listen on tf_port; a worker on a node that also runs ps takes tf_port + 1."""
    tasks = []
    for index, name in enumerate(inv.ps):
        tasks.append(Task("ps", index, name, inv.node(name).address, inv.tf_port))
    for index, name in enumerate(inv.workers):
        port = inv.tf_port + 1 if name in inv.ps else inv.tf_port
        tasks.append(Task("worker", index, name, inv.node(name).address, port))
    return Layout(tuple(tasks))


def local_layout(ports_ps: list[int], ports_worker: list[int], host: str = "127.0.0.1") -> Layout:
    tasks = [Task("ps", i, "localhost", host, p) for i, p in enumerate(ports_ps)]
    tasks += [Task("worker", i, "localhost", host, p) for i, p in enumerate(ports_worker)]
    return Layout(tuple(tasks))


def resolve_tasks(layout: Layout, job: str | None, index: int | None, local_addresses: list[str]) -> list[Task]:
    """The tasks this machine runs: the one named by --job/--task, else those whose address is ours."""
    if job is not None or index is not None:
        if job is None or index is None:
            raise UsageError("give --job and --task together")
        return [layout.task(job, index)]
    ours = {str(ipaddress.ip_address(a)) for a in local_addresses}
    mine = [t for t in layout.tasks if t.host in ours]
    if not mine:
        raise UsageError(
            "none of this machine's addresses is in the inventory; pass --job and --task to choose a task"
        )
    return mine


def local_ipv4_addresses() -> list[str]:
    import ifaddr

    out = []
    for adapter in ifaddr.get_adapters():
        for ip in adapter.ips:
            if isinstance(ip.ip, str):
                out.append(ip.ip)
    return out
