"""trained.jsonl: the chief's record of each epoch for the evaluator beside the coordinator.

One JSON line per record, tagged with the launch (a resumed run's file holds earlier launches'
lines too): a launch's first line says where it began (its start epoch and step, the checkpoint
it restored, the data set's checksum, the parameters on each ps), then one line per epoch (its
training figures and the checkpoint of its weights), and a last line once the chief has finished
its epochs.  The chief appends each line in one write after the checkpoint it names is saved and
before the Saver's state file names it (chief.save): a resume restores a recorded epoch (unless
the state file itself is lost, when the checkpoints present are taken).

Each epoch's checkpoint is handed over in a folder of its own (``to-evaluate/``, a hard link to
the chief's files): the chief's Saver keeps only its last two for a resume, and an evaluator that
falls behind (a busy coordinator, epochs shorter than a validation pass) must still find every
epoch's weights.  The evaluator removes each one once it has read it.
"""

import errno
import json
import os
import shutil
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


    def handed_over(self, prefix: Path, folder: Path, **record) -> None:
        """An epoch's checkpoint at ``prefix`` handed over in ``folder`` and its line appended,
        before the checkpoint is the one a resume restores (chief.save's ``recorded``)."""
        hand_over(prefix, folder)
        self.add(checkpoint=prefix.name, **record)


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


def hand_over(prefix: Path, folder: Path) -> None:
    """Link the checkpoint at ``prefix`` (its .index and data files) into ``folder`` for the evaluator.

    A hard link costs the chief nothing and outlives the Saver's deletion of the original; a file
    system without hard links gets a copy."""
    folder.mkdir(exist_ok=True)
    for part in sorted(prefix.parent.glob(prefix.name + ".*")):
        target = folder / part.name
        try:
            os.link(part, target)
        except FileExistsError:
            pass  # handed over already (a relaunched chief at the same step)
        except OSError as exc:
            if exc.errno not in (errno.EPERM, errno.EXDEV, errno.ENOTSUP, errno.EOPNOTSUPP, errno.EMLINK):
                raise
            shutil.copyfile(part, target)


def release(folder: Path, name: str) -> None:
    """The evaluator's side: checkpoint ``name`` has been read; its handed-over files go."""
    for part in folder.glob(name + ".*"):
        part.unlink(missing_ok=True)


def clear_handed_over(folder: Path) -> None:
    """A launch's beginning: what an earlier launch handed over is not this one's to evaluate."""
    if folder.is_dir():
        for part in folder.iterdir():
            part.unlink(missing_ok=True)
