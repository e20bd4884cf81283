"""The local cluster's ``cluster.json``, read back as untrusted input: value by value.

The file is ours, but it sits in the user's state directory, where an editor, another version
or a lost write may have left anything.  Each value is checked for type and range; the first
wrong one is named (``layout[1].index is 'a', not a whole number``), so ``cluster status``
says in one line what is wrong instead of failing deep inside with a traceback.
"""

from picluster.model.clusterspec import Layout, Task

JOBS = ("ps", "worker")


class BadState(ValueError):
    pass


def parse(data) -> tuple[Layout, dict[str, int], bool, int | None]:
    """(layout, pids by label, temporary, agent port) from the parsed JSON."""
    if not isinstance(data, dict):
        raise BadState(f"the top is {type(data).__name__}, not an object")
    rows = data.get("layout")
    if not isinstance(rows, list) or not rows:
        raise BadState("layout is not a list of tasks")
    tasks = []
    for n, row in enumerate(rows):
        where = f"layout[{n}]"
        if not isinstance(row, dict) or set(row) != {"job", "index", "node", "host", "port"}:
            raise BadState(f"{where} is not a task (job, index, node, host, port)")
        if row["job"] not in JOBS:
            raise BadState(f"{where}.job is {_shown(row['job'])}, not ps or worker")
        _whole(row["index"], f"{where}.index", 0, 10**6)
        for key in ("node", "host"):
            if not isinstance(row[key], str) or not row[key]:
                raise BadState(f"{where}.{key} is {_shown(row[key])}, not a name")
        _whole(row["port"], f"{where}.port", 1, 65535)
        tasks.append(Task(**row))
    if len({(t.job, t.index) for t in tasks}) != len(tasks):
        raise BadState("layout names a task twice")
    pids = data.get("pids", {})
    if not isinstance(pids, dict):
        raise BadState("pids is not an object")
    for label, pid in pids.items():
        _whole(pid, f"pids[{label!r}]", 1, 2**31 - 1)
    temporary = data.get("temporary", False)
    if not isinstance(temporary, bool):
        raise BadState(f"temporary is {_shown(temporary)}, not true or false")
    port = data.get("agent_port")
    if port is not None:
        _whole(port, "agent_port", 1, 65535)
    return Layout(tuple(tasks)), dict(pids), temporary, port


def _whole(value, where: str, low: int, high: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise BadState(f"{where} is {_shown(value)}, not a whole number from {low} to {high}")


def _shown(value) -> str:
    shown = repr(value)
    return shown if len(shown) <= 40 else shown[:37] + "..."
