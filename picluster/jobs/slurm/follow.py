"""A Slurm job's output file followed as the job writes it (``picluster logs -f slurm:ID``).

Every second, the queue says where the job stands (squeue, and sacct with accounting, over one
connection to the controller); once it has started, ``scontrol`` says where its output goes, and
the bytes added since the last read are read there: on the controller when it sees the file (the
share, or its own disk), else on the node that runs the batch script.  When the job has ended,
the file is read to its end and the job's state and exit code are returned.
"""

import base64
import binascii
import shlex
import time

from picluster.cluster.here import Here
from picluster.cluster.nodecluster import open_node
from picluster.cluster.ssh import Remote
from picluster.jobs.follow import Emit, Ended, Source
from picluster.jobs.slurm import queue
from picluster.jobs.slurm.rows import SlurmJob, scontrol_exit, stdout_path
from picluster.model.inventory import Inventory
from picluster.util.errors import ClusterError, PiclusterError, UsageError

POLL_S = 1.0


class _File:
    """The output file on one machine, read from where the last read stopped."""

    def __init__(self, shell: Remote | Here, source: Source, own: bool) -> None:
        self.shell, self.source, self.own = shell, source, own  # own: a connection of its own, closed with it
        self.offset = 0

    def read(self) -> bytes:
        path = shlex.quote(self.source.log or "")
        done = self.shell.run(f"[ -r {path} ] && tail -c +{self.offset + 1} -- {path} | base64 -w 0", check=False)
        if done.exited != 0:
            return b""
        try:
            data = base64.b64decode(done.stdout.strip(), validate=True)
        except (binascii.Error, ValueError):
            raise ClusterError(f"reading {self.source.log}: the answer was not the file's bytes") from None
        self.offset += len(data)
        return data

    def close(self) -> None:
        if self.own:
            self.shell.close()


def _locate(inv: Inventory, remote: Remote | Here, job: SlurmJob) -> _File | None:
    """Where the job's output file can be read now: the controller, else its batch host; None
    while Slurm has not said or the file is not there yet."""
    path = stdout_path(remote.run(f"scontrol -o show job {job.id}", check=False).stdout)
    if path is None:
        return None
    source = Source("batch", job.batch_host or None, path)
    if remote.run(f"[ -r {shlex.quote(path)} ]", check=False).exited == 0:
        return _File(remote, source, own=False)
    names = {n.name for n in inv.nodes}
    if job.batch_host not in names:
        return None
    try:
        there = open_node(inv, inv.node(job.batch_host))
    except ClusterError:
        return None  # not reachable now: asked again at the next poll
    found = _File(there, source, own=True)
    if there.run(f"[ -r {shlex.quote(path)} ]", check=False).exited == 0:
        return found
    found.close()
    return None


def follow(inv: Inventory, number: str, emit: Emit, say, wait: bool = True, poll_s: float = POLL_S) -> Ended:
    """Each new piece of the job's output through ``emit`` until it has ended (``wait``), or what
    there is now; the job's state and exit code then.  ``say``: a line beside the output."""
    remote = queue.connect(inv)
    file: _File | None = None
    read_any = False
    try:
        while True:
            current = queue.current(inv, remote, number)
            if current.state != "PENDING":
                file = file or _locate(inv, remote, current)
                data = file.read() if file is not None else b""
                if data:
                    read_any = True
                    emit(file.source, data)  # type: ignore[union-attr]
            if not current.active or not wait:
                break
            time.sleep(poll_s)
        if not read_any and not current.active:
            _whole(inv, current, emit, say)  # Slurm has forgotten where it wrote (or the node holding it is away)
        code = current.exit_code
        if code is None and not current.active:
            code = scontrol_exit(remote.run(f"scontrol -o show job {number}", check=False).stdout, current)
    finally:
        if file is not None:
            file.close()
        remote.close()
    reason = None if current.reason in ("", "None") else current.reason
    return Ended(current.ref, current.state, reason, code, current.active)


def _whole(inv: Inventory, job: SlurmJob, emit: Emit, say) -> None:
    """The output as ``picluster logs`` finds it without following (on every node); why there is none, said."""
    try:
        text = queue.output(inv, job.id)
    except PiclusterError as exc:
        if not isinstance(exc, UsageError) or job.state != "CANCELLED":
            say(str(exc))
        return
    if text:
        emit(Source("batch", job.batch_host or None, None), text.encode())
