"""`picluster lab status`: the labs on this machine and each host, as a listing
(``picluster.labs/1``): a table per lab for people, one row per host (with its lab) for machines."""

from picluster.views.listing import Column, Fitted, Listing, Row, dash

HOST_FIELDS = ("lab", "host", "address", "machine", "state", "link", "shaping", "limits", "memory_bytes",
               "memory_peak_bytes", "cpu_seconds", "oom_kills")


def host_rows(lab: str, hosts: list) -> list[Row]:
    """Each host (a lab.HostStatus): where it is, whether it runs, and what its cgroup used."""
    rows = []
    for st in hosts:
        usage = st.usage or {}
        rows.append({"lab": lab, "host": st.name, "address": st.address, "machine": st.machine, "state": st.state,
                     "link": st.link, "shaping": st.shaping or None, "limits": st.limits or None,
                     "memory_bytes": usage.get("memory"), "memory_peak_bytes": usage.get("memory_peak"),
                     "cpu_seconds": usage.get("cpu_seconds"), "oom_kills": usage.get("oom_kills")})
    return rows


def _memory(row: Row) -> str:
    if row["memory_bytes"] is None:
        return "-"
    return f"{row['memory_bytes'] / 2**20:.1f} ({(row['memory_peak_bytes'] or 0) / 2**20:.1f})"


def status_table(title: str, hosts: list, lab: str = "") -> Fitted:
    """One row per host; the limits and what the host's cgroup used, when it has limits.  At 80
    columns the host, its address and state always; then memory, OOM kills, CPU, the rest."""
    rows = host_rows(lab, hosts)
    columns = [Column("host", lambda r: r["host"]), Column("address", lambda r: r["address"]),
               Column("machine", lambda r: r["machine"], drop=4), Column("state", lambda r: r["state"]),
               Column("link", lambda r: r["link"], drop=6), Column("shaping", lambda r: dash(r["shaping"]), drop=7, wrap=True)]
    if any(st.limits for st in hosts):
        columns += [Column("limits", lambda r: dash(r["limits"]), drop=5, wrap=True),
                    Column("mem MiB (peak)", _memory, right=True, drop=1),
                    Column("cpu s", lambda r: "-" if r["cpu_seconds"] is None else f"{r['cpu_seconds']:.1f}", right=True, drop=3),
                    Column("oom kills", lambda r: dash(r["oom_kills"]), right=True, drop=2)]
    return Fitted(columns, rows, title=title)


def labs_listing(labs: list[dict], hosts: dict[str, list]) -> Listing:
    """``labs``: each lab's facts (name, subnet, phase, owner_pid), with a "title" for people and
    "hosts" (lab.HostStatus); a lab without state is a line saying what is left of it."""
    rows: list[Row] = []
    human: list = []
    for lab in labs:
        found = hosts.get(lab["name"], [])
        rows += host_rows(lab["name"], found)
        human.append(status_table(lab["title"], found, lab["name"]) if found else lab["title"])
    facts = [{key: value for key, value in lab.items() if key != "title"} for lab in labs]
    return Listing("labs/1", "hosts", HOST_FIELDS, rows, human or ["no labs"], {"labs": facts})
