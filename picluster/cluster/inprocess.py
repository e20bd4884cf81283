"""The temporary local cluster a job starts for itself: every task's server in one process.

``run`` and ``train`` start one when no cluster runs and no inventory is given.  Its servers are
real ``tf.distribute.Server``s on 127.0.0.1, as a persistent local cluster's, but all of them live
in one server host (``python -m picluster.cluster.server --all``): TensorFlow is imported once
rather than once per task, which on a small machine is most of a short job's time.

The host is a child of the coordinator, not the coordinator itself: the bind shim that keeps
gRPC off the other interfaces must be preloaded when a process starts, the coordinator's own
TensorFlow session stays apart from the servers, and a broken TensorFlow fails the host with its
exit status and log, which name its tasks.  PR_SET_PDEATHSIG (``--parent``) ends the host when the
coordinator dies, even by SIGKILL.  Its tasks live and die together: one cannot be restarted
alone, so ``repair`` starts the host again when it is gone.
"""

import logging
import os
import subprocess
import sys
from pathlib import Path

from picluster.cluster import server
from picluster.cluster.exits import Exited
from picluster.cluster.local import AGENT, LocalCluster, threads_per_task
from picluster.model.clusterspec import Task
from picluster.util import verbosity

log = logging.getLogger(__name__)  # -v: the one process that serves every task
HOST_LOG = "servers.log"


class InProcessCluster(LocalCluster):
    """A temporary local cluster whose servers share one process."""

    def _spawn_tasks(self, tasks: list[Task]) -> None:
        if set(tasks) != set(self.layout.tasks):
            # Some tasks died but not all: they share a process, so the survivors go too.
            self.stop_servers()
        for task in self.layout.tasks:
            self._ready(task).unlink(missing_ok=True)
        # One process: its thread pools are shared by every task, so they get all the cores.
        cmd = server.command(sys.executable, cluster_file=str(self.run_dir / "cluster.json"), every=True,
                             threads=threads_per_task(1), ready_dir=str(self.run_dir), parent=os.getpid())
        verbosity.command(log, "local", cmd)
        with open(self.run_dir / HOST_LOG, "ab") as out:
            proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                                    start_new_session=True, cwd=self.run_dir)
        for task in self.layout.tasks:
            self.pids[task.label] = proc.pid
        self._children[proc.pid] = proc

    def wait_ready(self, timeout: float) -> None:
        try:
            super().wait_ready(timeout)
        except Exited as exc:
            # The tasks share the process and start in order, each writing its ready file once it
            # serves: the ones without one are the task that failed and those after it.
            unserved = [self._exit(t.label) for t in self.layout.tasks if not self._ready(t).exists()]
            if not unserved:
                raise
            raise Exited("local cluster", unserved + [e for e in exc.exits if e.process == AGENT]) from None

    def stop_servers(self) -> None:
        """End the server host (its tasks still alive), leaving the agent and the run directory."""
        for pid in {pid for t in self.layout.tasks if (pid := self._live_pid(t)) is not None}:
            child = self._children.get(pid)
            if child is not None:
                child.kill()
                child.wait(10)

    def _log(self, task: Task) -> Path:
        return self.run_dir / HOST_LOG
