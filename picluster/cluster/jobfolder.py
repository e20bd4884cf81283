"""A job's own folder on a node, reached over its cluster's open connection (Cluster.job_folder).

Where a job's processes cannot read this machine's files (an inventory's nodes, without a share
they all mount here), each runs in a folder of the job's own on its node; the job puts its files
there and copies them back over the same connection.  The folder also says where the node's own
servers keep their doors and pid files, for a job's process that runs inside one of them
(a door) or stands in for one (``stop_server``).
"""

import shlex
from dataclasses import dataclass
from pathlib import PurePosixPath
from typing import TYPE_CHECKING

from picluster.cluster.door import door_path

if TYPE_CHECKING:
    from picluster.cluster.ssh import Remote


@dataclass(frozen=True)
class JobFolder:
    node: str
    remote: "Remote"  # the cluster's connection to the node: closed by Cluster.release, not by the job
    path: PurePosixPath  # relative to the node user's home, as SFTP sees it
    servers: str  # the node's folder of its servers' pid files and doors, a path the shell expands ($HOME/...)

    @property
    def word(self) -> str:
        """The folder as a shell word (a ``cd``, a task's working folder)."""
        return f"\"$HOME\"/{shlex.quote(str(self.path))}"

    def door(self, job: str, index: int) -> str:
        """Where the node's server of task ``job:index`` takes jobs in (a path the shell expands)."""
        return door_path(self.servers, job, index)

    def stop_server(self, job: str, index: int) -> str:
        """Shell lines that stop the node's server of task ``job:index`` (as ``cluster up`` started
        it, proven by its pid file: pidfiles.py) and wait until it is gone, so that another process
        can take its address: a training replica that serves its worker task itself.  ``cluster up``
        starts it again."""
        return f"python3 {self.servers}/pidfiles.py --dir {self.servers} stop --wait 10 {job}-{index} >/dev/null"
