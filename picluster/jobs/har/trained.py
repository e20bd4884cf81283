"""trained.jsonl: the chief's record of each epoch for the evaluator beside the coordinator.

One JSON line per record, tagged with the launch (a resumed run's file holds earlier launches'
lines too): a launch's first line says where it began (its start epoch and step, the checkpoint
it restored, the data set's checksum, the parameters on each ps), then one line per epoch (its
training figures and the checkpoint of its weights), and a last line once the chief has finished
its epochs.  The chief appends each line in one write after the checkpoint it names is saved.
"""

import json
import os
import time
from pathlib import Path


class Trained:
    """The chief's side: appends this launch's lines."""

    def __init__(self, path: Path, launch: str) -> None:
        self.path, self.launch = path, launch

    def add(self, **record) -> None:
        line = json.dumps({"launch": self.launch, "time": time.time(), **record}) + "\n"
        with open(self.path, "a", encoding="utf-8") as f:  # one write: a reader sees whole lines, or a partial last one
            f.write(line)
            f.flush()
            os.fsync(f.fileno())


def read(path: Path, launch: str) -> list[dict]:
    """The evaluator's side: the whole lines ``launch`` wrote, in order."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return []
    found = []
    for line in text.split("\n")[:-1]:  # a last line without its newline is still being written
        try:
            record = json.loads(line)
        except ValueError:
            continue  # a line cut short by a full disk in an earlier launch: not this launch's
        if isinstance(record, dict) and record.get("launch") == launch:
            found.append(record)
    return found
