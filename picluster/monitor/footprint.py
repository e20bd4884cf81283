"""What a node's processes hold in memory, per process and for the node as a whole.

A process's resident set is its anonymous pages (heap, stacks, tensors: its own) plus
file-backed pages (TensorFlow's shared libraries: about 400 MB of ``libtensorflow*.so`` mapped
by every process that imports it).  Two processes on one node that map the same library share
those pages, so the node needs the sum of the anonymous parts but each file only once:

    node resident = sum(anonymous) + for each mapped file, the most any one process holds of it

That is the figure to hold against a Pi's 1 GB.  It is an estimate (two processes may touch
different pages of one file), and better than summing RSS (which counts the libraries twice)
or PSS (which splits them with processes outside the node that map them too).

Read from ``/proc/PID/status`` (RssAnon, RssFile, RssShmem, VmHWM, VmSwap) and
``/proc/PID/smaps`` (per mapping), so it needs to be able to read those: the process's own user
or root.
"""

from collections.abc import Iterable
from dataclasses import dataclass, field

from picluster.util.processes import memory_status


@dataclass(frozen=True)
class ProcessMemory:
    pid: int
    name: str
    rss: int  # bytes resident: anon + file + shmem
    anon: int
    file: int
    shmem: int
    peak_rss: int  # VmHWM: the most this process was ever resident
    swap: int
    files: dict[str, int] = field(default_factory=dict, compare=False, repr=False)  # mapped file -> resident bytes


def _mapped_files(pid: int) -> dict[str, int]:
    """Resident bytes per mapped file (all of its mappings), from smaps."""
    files: dict[str, int] = {}
    current: str | None = None
    with open(f"/proc/{pid}/smaps") as f:
        for line in f:
            first = line.split(None, 1)[0]
            if "-" in first and not first.endswith(":"):  # a mapping's header: range perms offset dev inode [path]
                fields = line.split(None, 5)
                path = fields[5].strip() if len(fields) == 6 else ""
                inode = fields[4] if len(fields) > 4 else "0"
                current = path if inode != "0" and path.startswith("/") else None
            elif first == "Rss:" and current is not None:
                files[current] = files.get(current, 0) + int(line.split()[1]) * 1024
    return files


def process_memory(pid: int, name: str = "") -> ProcessMemory:
    status = memory_status(pid)
    if not name:
        try:
            with open(f"/proc/{pid}/comm") as f:
                name = f.read().strip()
        except OSError:
            name = str(pid)
    return ProcessMemory(
        pid=pid,
        name=name,
        rss=status.get("VmRSS", 0),
        anon=status.get("RssAnon", 0),
        file=status.get("RssFile", 0),
        shmem=status.get("RssShmem", 0),
        peak_rss=status.get("VmHWM", 0),
        swap=status.get("VmSwap", 0),
        files=_mapped_files(pid),
    )


def node_resident(processes: Iterable[ProcessMemory]) -> int:
    """Bytes the node needs for these processes: their anonymous memory, shared files once."""
    processes = list(processes)
    files: dict[str, int] = {}
    for p in processes:
        for path, size in p.files.items():
            files[path] = max(files.get(path, 0), size)
    return sum(p.anon + p.shmem for p in processes) + sum(files.values())


def tree(pid: int) -> list[int]:
    """``pid`` and all its descendants (a client's shell and what it exec'd, a server's re-exec)."""
    import psutil

    try:
        root = psutil.Process(pid)
        return [root.pid] + [child.pid for child in root.children(recursive=True)]
    except psutil.NoSuchProcess:
        return []
