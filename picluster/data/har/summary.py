"""Rich tables of a prepared HAR data set beside UCI HAR's own counts."""

import numpy as np
from rich import box
from rich.console import Console
from rich.table import Table

from picluster.data.har.dataset import SPLITS, HarData
from picluster.data.har.spec import CLASSES, SUBJECTS, UCI_CLASS_COUNTS, UCI_SUBJECT_COUNTS


def _delta(ours: int, theirs: int) -> str:
    if theirs == 0:
        return "-"
    if ours == theirs:
        return "0.0%"
    return f"{100.0 * (ours - theirs) / theirs:+.1f}%"


def class_table(data: HarData) -> Table:
    # UCI has no validation split: ours is carved from its training volunteers, so train + val
    # is what compares with UCI's train column.
    counts = {s: np.bincount(data.split(s).y, minlength=len(CLASSES)) for s in SPLITS}
    table = Table(
        title="Windows per class", title_justify="left", box=box.SIMPLE, show_edge=False, pad_edge=False,
        caption="Δ train compares train+val with UCI's train.", caption_justify="left",
    )
    table.add_column("class", no_wrap=True)
    for name in ("train", "val", "test", "UCI\ntrain", "Δ\ntrain", "UCI\ntest", "Δ\ntest"):
        table.add_column(name, justify="right", no_wrap=True)
    uci_train, uci_test = UCI_CLASS_COUNTS["train"], UCI_CLASS_COUNTS["test"]
    rows = [
        (name, counts["train"][i], counts["val"][i], counts["test"][i], uci_train[i], uci_test[i])
        for i, name in enumerate(CLASSES)
    ]
    rows.append(
        ("total", counts["train"].sum(), counts["val"].sum(), counts["test"].sum(), sum(uci_train), sum(uci_test))
    )
    for i, (name, train, val, test, u_train, u_test) in enumerate(rows):
        table.add_row(
            name, str(train), str(val), str(test),
            str(u_train), _delta(train + val, u_train), str(u_test), _delta(test, u_test),
            end_section=i == len(rows) - 2,
        )
    return table


def subject_table(data: HarData) -> Table:
    table = Table(title="Windows per volunteer", title_justify="left", box=box.SIMPLE, show_edge=False, pad_edge=False)
    for name in ("volunteer", "split", "windows", "UCI", "Δ"):
        table.add_column(name, justify="left" if name == "split" else "right")
    split_of, count_of = {}, {}
    for split in SPLITS:
        subjects, counts = np.unique(data.split(split).subject, return_counts=True)
        for s, c in zip(subjects.tolist(), counts.tolist()):
            split_of[s], count_of[s] = split, c
    for s in SUBJECTS:
        ours, theirs = count_of.get(s, 0), UCI_SUBJECT_COUNTS[s]
        table.add_row(str(s), split_of.get(s, "-"), str(ours), str(theirs), _delta(ours, theirs))
    return table


def show_summary(console: Console, data: HarData, per_subject: bool = True) -> None:
    console.print(f"source: {data.source}", soft_wrap=True)
    console.print(class_table(data))
    if per_subject:
        console.print(subject_table(data))
    console.print(f"checksum: sha256 {data.checksum}", soft_wrap=True)
