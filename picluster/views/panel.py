"""The per-node panel shared by ``picluster top`` and the live views of ``run`` and ``train``."""


from rich import box
from rich.table import Table
from rich.text import Text

from picluster.model.nodestats import NodeRow, throttle_flags
from picluster.views.listing import Listing

_BLOCKS = " ▁▂▃▄▅▆▇█"


def cpu_bars(percents: list[float]) -> Text:
    """One block per core, height = load; then the mean.  One block for a host with a CPU limit
    (its share of a core); "-" until two scrapes of the node's counters have come in."""
    if not percents:
        return Text("-")
    text = Text()
    for p in percents:
        level = min(len(_BLOCKS) - 1, max(0, round(p / 100 * (len(_BLOCKS) - 1))))
        text.append(_BLOCKS[level] if level else "·", style=_load_style(p))
    mean = sum(percents) / len(percents) if percents else 0.0
    text.append(f" {mean:3.0f}%")
    return text


def _load_style(percent: float) -> str:
    return "red" if percent >= 90 else "yellow" if percent >= 60 else "green"


def short_bytes(n: float) -> str:
    """4 characters or so: 999, 1.5k, 23M, 1.2G (rates in a narrow column)."""
    for unit in ("", "k", "M", "G", "T"):
        if abs(n) < 1000 or unit == "T":
            return f"{n:.0f}{unit}" if unit == "" or n >= 10 else f"{n:.1f}{unit}"
        n /= 1000.0
    return f"{n:.0f}T"


def _tasks(tasks: dict[str, str]) -> Text:
    """One task is named; for more, a count and only those not up (a local cluster runs many)."""
    if not tasks:
        return Text("-")
    if len(tasks) == 1:
        text = Text()
        for label, state in sorted(tasks.items()):
            text.append(f"{label} {state} ", style=STATE_STYLE.get(state, "red"))
        return text
    up = sum(1 for s in tasks.values() if s == "up")
    text = Text(f"{up}/{len(tasks)} up", style="green" if up == len(tasks) else "yellow")
    for label, state in sorted(tasks.items()):
        if state != "up":
            text.append(f" {label} {state}", style=STATE_STYLE.get(state, "red"))
    return text


STATE_STYLE = {"up": "green", "starting": "yellow", "down": "red"}

_SAID = {"under_voltage": "under-voltage", "freq_capped": "frequency capped", "throttled": "throttled",
         "soft_temp_limit": "soft temperature limit"}
# The word in the node's row: the first condition of these that holds now (worst first).
_WORD = (("under_voltage", "under-voltage"), ("throttled", "throttled"), ("freq_capped", "capped"),
         ("soft_temp_limit", "hot"))


def throttle_flag(bits: int | None) -> tuple[Text, str]:
    """The word flagging a node in its row (red: now; yellow: only since boot) and the whole
    story for the table's caption; both empty for a node that is fine or has no Pi firmware."""
    if not bits:
        return Text(""), ""
    now, since_boot = throttle_flags(bits)
    word = next((w for name, w in _WORD if name in now), "")
    flag = Text(f" {word}", style="bold red") if word else Text(" was throttled" if since_boot else "", style="yellow")
    parts = [f"now {', '.join(_SAID[c] for c in now)}"] if now else []
    if since_boot:
        parts.append(f"since boot {', '.join(_SAID[c] for c in since_boot)}")
    return flag, "; ".join(parts)


def nodes_table(rows: list[NodeRow], title: str | None = None) -> Table:
    table = Table(title=title, expand=False, pad_edge=False, box=box.SIMPLE_HEAD, collapse_padding=True,
                  caption_justify="left")
    notes = []
    # Fits 80 columns for a Pi (4 cores, 2 tasks): terminals on a Pi console are that narrow.
    for name in ("node", "roles", "cpu", "load", "mem GiB", "°C", "rx/tx B/s", "tasks"):
        table.add_column(name, justify="left" if name in ("node", "roles", "cpu", "tasks") else "right", no_wrap=True)
    for row in rows:
        roles = ",".join(row.roles) or "-"
        s = row.stats
        if s is None:
            table.add_row(row.name, roles, Text("unreachable", style="bold red"), "-", "-", "-", "-", _tasks(row.tasks))
            continue
        flag, story = throttle_flag(s.throttled)
        if story:
            notes.append(f"{row.name}: {story} (the Pi's firmware: check its power supply and cooling)")
        memory = f"{s.memory_used / 2**30:.1f}/{s.memory_total / 2**30:.1f}"
        temp = f"{s.temperature:.0f}" if s.temperature is not None else "-"
        net = f"{short_bytes(row.rx_rate)}/{short_bytes(row.tx_rate)}"
        table.add_row(Text(row.name) + flag, roles, cpu_bars(s.cpu_percent), f"{s.load[0]:.2f}", memory, temp, net,
                      _tasks(row.tasks))
    if notes:
        table.caption = "\n".join(notes)
    return table


NODE_FIELDS = ("node", "roles", "reachable", "cpu_percent", "load", "memory_used_bytes", "memory_total_bytes",
               "temperature_c", "rx_bytes_s", "tx_bytes_s", "throttled", "tasks")


def nodes_listing(rows: list[NodeRow], title: str | None = None) -> Listing:
    """``picluster top --once`` in every form (``picluster.top/1``): the panel for people, and each
    node's figures as numbers (bytes, bytes a second, percent, °C) for machines."""
    found = []
    for row in rows:
        s = row.stats
        now, since_boot = throttle_flags(s.throttled) if s is not None and s.throttled else ([], [])
        found.append({
            "node": row.name, "roles": list(row.roles), "reachable": s is not None,
            "cpu_percent": round(sum(s.cpu_percent) / len(s.cpu_percent), 1) if s is not None and s.cpu_percent else None,
            "cores_percent": [round(p, 1) for p in s.cpu_percent] if s is not None else [],
            "load": [round(x, 2) for x in s.load] if s is not None else None,
            "memory_used_bytes": int(s.memory_used) if s is not None else None,
            "memory_total_bytes": int(s.memory_total) if s is not None else None,
            "temperature_c": s.temperature if s is not None else None,
            "rx_bytes_s": round(row.rx_rate, 1) if s is not None else None,
            "tx_bytes_s": round(row.tx_rate, 1) if s is not None else None,
            "throttled": now, "throttled_since_boot": since_boot, "tasks": dict(sorted(row.tasks.items())),
        })
    return Listing("top/1", "nodes", NODE_FIELDS, found, [nodes_table(rows, title)], {"cluster": title})
