"""The Monte-Carlo sweep drawn as the thesis drew Table 5: time against samples, one line per
node count, the thesis's own numbers dashed beside ours; and the speedup over one node."""

from pathlib import Path

from picluster.jobs.montecarlo import thesis
from picluster.plots.canvas import Rendered, color, linear_reference, pyplot, save


def time_figure(seconds: dict[tuple[int, int], float], out_dir: Path, name: str, formats, title: str = "") -> list[Rendered]:
    """``seconds``: (samples, nodes) -> compute seconds (a failed cell is left out)."""
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(8, 5))
    nodes = sorted({n for _, n in seconds})
    for i, n in enumerate(nodes):
        points = sorted((s, t) for (s, m), t in seconds.items() if m == n)
        (line,) = ax.plot([s for s, _ in points], [t for _, t in points], "o-", color=color(i), label=f"{n} node{'s' if n > 1 else ''}")
        line.set_gid(f"ours-{n}")
        theirs = [(s, thesis.seconds(s, n)) for s in thesis.SAMPLES if thesis.seconds(s, n) is not None]
        if theirs and n in thesis.NODES:
            (dashed,) = ax.plot([s for s, _ in theirs], [t for _, t in theirs], "--", color=color(i), alpha=0.7,
                                label=f"thesis, {n} node{'s' if n > 1 else ''}")
            dashed.set_gid(f"thesis-{n}")
    ax.set_xlabel("samples")
    ax.set_ylabel("compute seconds")
    ax.set_title(title or "Monte-Carlo pi: time by sample count (thesis Table 5 dashed)")
    ax.set_ylim(bottom=0)
    ax.legend(fontsize="small", ncol=2)
    return save(fig, out_dir, name, formats)


def speedup_figure(seconds: dict[tuple[int, int], float], out_dir: Path, name: str, formats, title: str = "") -> list[Rendered]:
    """Speedup t(1 node) / t(N nodes) per sample count: the smallest, 6e7 (the thesis's largest
    one-node size) and the largest; the thesis's dashed where it has a one-node time."""
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(7, 5))
    sizes = sorted({s for s, _ in seconds if (s, 1) in seconds})
    chosen = sorted({sizes[0], sizes[-1], *(s for s in sizes if s == 6 * 10**7)}) if sizes else []
    top = 1
    for i, s in enumerate(chosen):
        nodes = sorted(n for (t, n) in seconds if t == s)
        top = max(top, *nodes)
        (line,) = ax.plot(nodes, [seconds[(s, 1)] / seconds[(s, n)] for n in nodes], "o-", color=color(i), label=f"{s:.0e} samples")
        line.set_gid(f"ours-{s:.0e}")
        base = thesis.seconds(s, 1)
        if base is not None:
            theirs = [(n, thesis.seconds(s, n)) for n in thesis.NODES if thesis.seconds(s, n)]
            (dashed,) = ax.plot([n for n, _ in theirs], [base / t for _, t in theirs if t], "--", color=color(i), alpha=0.7,
                                label=f"thesis, {s:.0e}")
            dashed.set_gid(f"thesis-{s:.0e}")
    linear_reference(ax, top)
    ax.set_xscale("log", base=2)
    ax.set_xticks([n for n in thesis.NODES if n <= max(top, 1)], [str(n) for n in thesis.NODES if n <= max(top, 1)])
    ax.set_xlabel("nodes")
    ax.set_ylabel("speedup over one node")
    ax.set_title(title or "Monte-Carlo pi: speedup by node count")
    ax.legend(fontsize="small")
    return save(fig, out_dir, name, formats)
