"""Each node's CPU and memory over a run, from the agents' samples in nodes.csv (monitor/record.py)."""

from pathlib import Path

from picluster.plots.canvas import Rendered, color, pyplot, save


def timeline_figure(rows: list[dict], out_dir: Path, name: str, formats, title: str = "") -> list[Rendered]:
    plt = pyplot()
    fig, (cpu, mem) = plt.subplots(2, 1, figsize=(10, 6), sharex=True)
    t0 = min(float(r["time"]) for r in rows)
    nodes = sorted({r["node"] for r in rows})
    for i, node in enumerate(nodes):
        mine = [r for r in rows if r["node"] == node]
        times = [float(r["time"]) - t0 for r in mine]
        (line,) = cpu.plot(times, [float(r["cpu_percent"]) for r in mine], color=color(i), label=node, linewidth=1)
        line.set_gid(f"cpu-{node}")
        (line,) = mem.plot(times, [float(r["memory_used"]) / 2**20 for r in mine], color=color(i), label=node, linewidth=1)
        line.set_gid(f"memory-{node}")
    totals = {float(r["memory_total"]) for r in rows}
    if len(totals) == 1:  # one size for all (a Pi, or a profile's limit): draw it
        limit = totals.pop() / 2**20
        mem.axhline(limit, color="red", linestyle="--", linewidth=1, label=f"node memory {limit:.0f} MiB").set_gid("memory-limit")
    cpu.set_ylabel("CPU busy % (of its limit)")
    cpu.set_ylim(0, 105)
    mem.set_ylabel("memory used, MiB")
    mem.set_ylim(bottom=0)
    mem.set_xlabel("seconds")
    for ax in (cpu, mem):  # beside the axes: a 17-node legend inside would hide the lines
        ax.legend(fontsize="x-small", ncol=1 if len(nodes) <= 12 else 2, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    fig.suptitle(title or "Nodes during the run (from their agents)")
    return save(fig, out_dir, name, formats)
