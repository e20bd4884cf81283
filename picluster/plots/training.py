"""HAR figures: accuracy and loss per epoch (training and validation), each epoch's time as
input, compute and exchange, and a scaling table's speedup and efficiency by worker count."""

from pathlib import Path

from picluster.plots.canvas import Rendered, color, linear_reference, pyplot, save


def curves_figure(rows: list[dict], out_dir: Path, name: str, formats, title: str = "") -> list[Rendered]:
    """Train and validation accuracy and loss per epoch (test scores are not plotted: the epoch
    is chosen on validation, and a test curve invites choosing it there)."""
    plt = pyplot()
    from matplotlib.ticker import MaxNLocator

    fig, (acc, loss) = plt.subplots(1, 2, figsize=(10, 4))
    epochs = [int(r["epoch"]) for r in rows]
    for ax, what in ((acc, "acc"), (loss, "loss")):
        for i, split in enumerate(("train", "val")):
            key = f"{split}_{what}"
            points = [(e, float(r[key])) for e, r in zip(epochs, rows) if r.get(key) not in (None, "")]
            (line,) = ax.plot([e for e, _ in points], [v for _, v in points], "-" if split == "train" else "o-", markersize=3,
                              color=color(i), label="training" if split == "train" else "validation")
            line.set_gid(key)
        ax.set_xlabel("epoch")
        ax.legend(fontsize="small")
    for ax in (acc, loss):
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    acc.set_ylabel("accuracy")
    acc.axhline(0.9, color="grey", linestyle=":", linewidth=1)
    loss.set_ylabel("loss (cross-entropy)")
    fig.suptitle(title or "HAR: accuracy and loss per epoch")
    return save(fig, out_dir, name, formats)


def epoch_time_figure(rows: list[dict], out_dir: Path, name: str, formats, title: str = "") -> list[Rendered]:
    """Stacked bars: each epoch's seconds of input, compute and exchange (the chief's view)."""
    plt = pyplot()
    from matplotlib.ticker import MaxNLocator

    fig, ax = plt.subplots(figsize=(8, 4))
    epochs = [int(r["epoch"]) for r in rows]
    bottom = [0.0] * len(rows)
    for i, part in enumerate(("input", "compute", "exchange")):
        values = [float(r.get(f"{part}_s") or 0) for r in rows]
        bars = ax.bar(epochs, values, bottom=bottom, color=color(i), label=part)
        for epoch, bar in zip(epochs, bars):
            bar.set_gid(f"{part}_s-{epoch}")
        bottom = [b + v for b, v in zip(bottom, values)]
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_xlabel("epoch")
    ax.set_ylabel("seconds")
    ax.set_title(title or "HAR: time per epoch")
    ax.legend(fontsize="small")
    return save(fig, out_dir, name, formats)


def scaling_figure(rows: list[dict], out_dir: Path, name: str, formats, title: str = "") -> list[Rendered]:
    """Speedup (epoch time of one worker over N's) and efficiency (speedup / N) per mode."""
    plt = pyplot()
    fig, (speed, eff) = plt.subplots(1, 2, figsize=(10, 4))
    modes = sorted({r["mode"] for r in rows})
    top, most = 1, 1.0
    for i, mode in enumerate(modes):
        mine = sorted((int(r["workers"]), float(r["s_per_epoch"])) for r in rows if r["mode"] == mode and r.get("s_per_epoch"))
        base = next((t for w, t in mine if w == 1), None)
        if base is None:
            continue
        workers = [w for w, _ in mine]
        top = max(top, *workers)
        (line,) = speed.plot(workers, [base / t for _, t in mine], "o-", color=color(i), label=mode)
        line.set_gid(f"speedup-{mode}")
        efficiency = [base / t / w for w, t in mine]
        most = max(most, *efficiency)
        (line,) = eff.plot(workers, efficiency, "o-", color=color(i), label=mode)
        line.set_gid(f"efficiency-{mode}")
    linear_reference(speed, top)
    for ax in (speed, eff):
        ax.set_xscale("log", base=2)
        ticks = [w for w in (1, 2, 4, 8, 16, 32, 64) if w <= top]
        ax.set_xticks(ticks, [str(w) for w in ticks])
        ax.set_xlabel("workers")
        ax.legend(fontsize="small")
    speed.set_ylabel("speedup in epoch time over one worker")
    eff.set_ylabel("efficiency (speedup / workers)")
    eff.set_ylim(0, 1.1 * most)  # above 100 % is a finding to show, not to cut off
    fig.suptitle(title or "HAR: scaling by worker count")
    return save(fig, out_dir, name, formats)
