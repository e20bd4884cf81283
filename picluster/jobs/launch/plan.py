"""Which tasks a launched job runs, where, and with what ``TF_CONFIG``: as TFJob writes it per replica.

- coordinator mode: one task, the chief, on this machine.  Its ``TF_CONFIG`` names the cluster's
  ps and worker tasks and adds a chief at this machine's address on the cluster network (TF 2's
  ``ParameterServerStrategy`` starts a server there and connects to the running ones).  TensorFlow
  binds that server to the wildcard address, as it does every server, so the chief runs with the
  same bind shim as the cluster's servers: it listens on the chief's address only.
- each-worker mode: one task per worker task, beside that worker's server (on its node, or here
  for the local cluster), with ``TF_CONFIG``'s task set to that worker.

Every task also gets ``PICLUSTER_JOB_ID`` (e.g. to name a variable container per job) and
``PICLUSTER_ATTEMPT`` (1, then 2 after a restart).
"""

import ipaddress
import os
import socket

from picluster.cluster.tasks import TaskSpec
from picluster.jobs.launch.config import LaunchConfig
from picluster.model.clusterspec import Layout
from picluster.util.errors import UsageError

CHIEF = "chief"


def coordinator_task(config: LaunchConfig, layout: Layout, job_id: int) -> TaskSpec:
    if not layout.ps:
        raise UsageError("coordinator mode needs a ps task (ParameterServerStrategy keeps the variables there): "
                         "start the local cluster with --ps 1, or give a node the ps role")
    host = coordinator_address(layout)
    port = free_port(host)
    from picluster.cluster.shim import bind_shim

    preload = [str(bind_shim())] + [p for p in os.environ.get("LD_PRELOAD", "").split(":") if p]
    env = {"TF_CONFIG": layout.tf_config(CHIEF, 0, chief=f"{host}:{port}"),
           "LD_PRELOAD": ":".join(preload), "PICLUSTER_BIND_ADDR": host, "PICLUSTER_BIND_PORT": str(port)}
    # Here, the script runs where the user is: relative paths in its arguments mean what they meant.
    return TaskSpec(CHIEF, "localhost", CHIEF, config.command_line(), os.getcwd(), env | _common(job_id))


def worker_tasks(config: LaunchConfig, layout: Layout, job_id: int, folders: dict[str, str] | None) -> list[TaskSpec]:
    """One per worker; ``folders``: the staged folder per node (None: the local cluster, run in place)."""
    specs = []
    for task in layout.workers:
        env = {"TF_CONFIG": layout.tf_config("worker", task.index)} | _common(job_id)
        if folders is None:
            specs.append(TaskSpec(task.label, task.node, task.label, config.command_line(), str(config.folder), env))
        else:
            specs.append(TaskSpec(task.label, task.node, task.node, [config.relative_script, *config.args], folders[task.node], env))
    return specs


def _common(job_id: int) -> dict[str, str]:
    return {"PICLUSTER_JOB_ID": str(job_id), "PICLUSTER_ATTEMPT": "1", "PYTHONUNBUFFERED": "1"}


def coordinator_address(layout: Layout) -> str:
    """This machine's address as the cluster's nodes reach it: the route's source towards them."""
    first = layout.tasks[0]
    if ipaddress.ip_address(first.host).is_loopback:
        return first.host
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        probe.connect((first.host, first.port))  # no packet is sent: this only picks the route
        return probe.getsockname()[0]


def free_port(host: str) -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return s.getsockname()[1]
