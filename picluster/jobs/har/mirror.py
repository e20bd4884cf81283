"""The chief's files, mirrored between its node's run directory and the coordinator's: which files, and when.

No shared file system is needed: before a start the coordinator pushes what the run needs (and,
to resume on a node that lost its copy, the records and checkpoints); while the run goes on it
copies the chief's progress back, and its records and checkpoints after every epoch, so a
resume hint always names a checkpoint the coordinator holds too.  The node's side is the run's
job folder (cluster/jobfolder.py), whose file primitives carry the bytes over the cluster's
connection; here are the choices and the local copies (each written whole, util/atomic.py).
"""

import os
import re
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING

from picluster.jobs.har.rundir import RunDir
from picluster.util import atomic

if TYPE_CHECKING:
    from picluster.cluster.jobfolder import Entry, JobFolder

# The chief's files the coordinator mirrors while the run goes on, and at the end.
PROGRESS = (RunDir.PROGRESS, RunDir.LIVE, RunDir.RESUME)
RECORDS = (RunDir.METRICS, RunDir.STATE)
TREES = (RunDir.CHECKPOINTS, RunDir.BEST, RunDir.TENSORBOARD)
FINAL = (RunDir.RESULT,)
# What a relaunched chief needs to resume (its records and these trees), pushed to its node.
RESUME_TREES = (RunDir.CHECKPOINTS, RunDir.BEST)
ALWAYS_COPY_BYTES = 4096  # smaller files are copied on every mirror (see stale)
_LISTED = re.compile(rb'^(model_checkpoint_path|all_model_checkpoint_paths): "(.*)"$', re.MULTILINE)


def listed_checkpoints(state: bytes | None) -> list[str]:
    """The checkpoints a Saver's state file names, the newest first (its model_checkpoint_path),
    by file name: read here without TensorFlow, which the coordinator does not load."""
    found = [(key, PurePosixPath(path.decode(errors="replace")).name) for key, path in _LISTED.findall(state or b"")]
    newest = [name for key, name in found if key == b"model_checkpoint_path"]
    return list(dict.fromkeys(newest[:1] + [name for _, name in reversed(found)]))


def stale(local: tuple[int, int] | None, remote: tuple[int, int]) -> bool:
    """Whether a file must be copied again: (size, whole-second mtime) here (None: missing) and there.

    SFTP times are whole seconds, and a checkpoint's state file is rewritten in place at the
    same size ("model.ckpt-26" -> "-39"): within one second it would look unchanged, so small
    files are always copied.  Large ones (the checkpoint data) only when size or time moved.
    """
    size, _ = remote
    if size <= ALWAYS_COPY_BYTES or local is None:
        return True
    return local != remote


class Mirror:
    """One run directory on a node (its job folder) and its local copy.  What the folder raises
    when a copy fails is one of jobfolder.COPY_ERRORS."""

    def __init__(self, folder: "JobFolder", local_dir: Path, beside: bool = False) -> None:
        """beside: the evaluator runs beside the coordinator, writing the records, best/ and
        tensorboard/ here; from the chief come its checkpoints, those it hands over and trained.jsonl only."""
        self.folder = folder
        self.local_dir = local_dir
        self.beside = beside
        self.record_names = () if beside else RECORDS
        self.trees = (RunDir.CHECKPOINTS, RunDir.TO_EVALUATE) if beside else TREES
        self._seen_progress: bytes | None = None
        self._seen_trained: bytes | None = None
        self.complete = False  # the final mirror is done

    # -- what the coordinator does with it -------------------------------------------------------

    def push_for_start(self, chief: bool, resume: bool, ours_newer: bool = False) -> None:
        """ours_newer: another node was the chief since this one last was (a run that went on
        without it): our copy, mirrored from that chief, is newer than the node's own."""
        self.put(self.local_dir / RunDir.CONFIG)
        if chief and resume and (ours_newer or not self.exists(f"{RunDir.CHECKPOINTS}/{RunDir.CHECKPOINT_STATE}")):
            # The node's own records are the newest when it was the last chief; ours are pushed
            # when it has none, or another chief has trained since.
            for name in RECORDS:
                self.put(self.local_dir / name)
            for tree in RESUME_TREES:
                self.put_tree(self.local_dir / tree)

    def follow(self, final: bool = False) -> None:
        """Copy the chief's progress back, and its records when an epoch ended (or at the end)."""
        moved = False
        for name in PROGRESS:
            data = self.get(name)
            if name == RunDir.PROGRESS and data != self._seen_progress:
                self._seen_progress, moved = data, True
        # The chief appends to metrics.csv before it replaces progress.json: a new
        # progress.json means a complete row.
        trained = self.read(RunDir.TRAINED) if self.beside else None
        if trained is not None and trained != self._seen_trained:
            moved = True
        if moved or final:
            self.records()  # each epoch: a resume hint must find the checkpoint here
        if trained is not None and trained != self._seen_trained:
            # After the checkpoints it names: the evaluator reads a line, then its checkpoint.
            atomic.write_bytes(self.local_dir / RunDir.TRAINED, trained)
            self._seen_trained = trained
        if final:
            for name in FINAL:
                self.get(name)
            self.complete = True

    def records(self) -> None:
        for name in self.record_names:
            self.get(name)
        for tree in self.trees:
            if tree == RunDir.CHECKPOINTS:
                self.get_checkpoints()
            else:  # to-evaluate/ is handed over to the evaluator here: moved, so that the node keeps none
                self.get_tree(PurePosixPath(tree), move=tree == RunDir.TO_EVALUATE)

    def get_checkpoints(self) -> None:
        """The chief's checkpoints, copied so that ours always restore: the files of each one the
        node's state file lists first, then the epochs they end, then the state file naming them.

        The chief keeps two and deletes the oldest as it saves (each epoch, a short one in a tenth
        of a second): a file may go between the listing and its copy.  Such a round is left for the
        next, our state file still naming checkpoints we hold whole; those it no longer names are
        dropped here too, as the node dropped them."""
        state = self.read(f"{RunDir.CHECKPOINTS}/{RunDir.CHECKPOINT_STATE}")
        names = listed_checkpoints(state)
        if state is None or not names:
            return
        entries = self.folder.listdir(PurePosixPath(RunDir.CHECKPOINTS)) or []
        files = [e for e in entries if not e.is_dir and any(e.name.startswith(f"{n}.") for n in names)]
        if not any(e.name == f"{names[0]}.index" for e in files):
            return  # the newest is gone already: a newer state file names the next
        local = self.local_dir / RunDir.CHECKPOINTS
        for entry in files:
            if not self.get_file(PurePosixPath(RunDir.CHECKPOINTS) / entry.name, entry):
                return
        epochs = self.read(f"{RunDir.CHECKPOINTS}/{RunDir.CHECKPOINT_EPOCHS}")
        if epochs is not None:
            atomic.write_bytes(local / RunDir.CHECKPOINT_EPOCHS, epochs)
        atomic.write_bytes(local / RunDir.CHECKPOINT_STATE, state)
        for old in local.glob("*.index"):
            name = old.name.removesuffix(".index")
            if name not in names:
                for part in local.glob(f"{name}.*"):
                    part.unlink(missing_ok=True)

    # -- files -----------------------------------------------------------------------------------

    def exists(self, relative: str) -> bool:
        return self.folder.exists(relative)

    def put(self, local: Path) -> None:
        if local.is_file():
            self.folder.put(local, local.relative_to(self.local_dir).as_posix())

    def put_tree(self, local: Path) -> None:
        if not local.is_dir():
            return
        try:
            self.folder.mkdir(local.relative_to(self.local_dir).as_posix(), 0o700)
        except OSError:
            pass  # it exists
        for item in sorted(local.iterdir()):
            self.put_tree(item) if item.is_dir() else self.put(item)

    def read(self, name: str) -> bytes | None:
        """One file's bytes on the node, or None when it has none."""
        return self.folder.read(name)

    def get(self, name: str) -> bytes | None:
        """Copy one file back (atomically); its bytes, or None when the node has none."""
        data = self.read(name)
        if data is None:
            return None
        target = self.local_dir / name
        target.parent.mkdir(parents=True, exist_ok=True)
        atomic.write_bytes(target, data)
        return data

    def get_tree(self, relative: PurePosixPath, move: bool = False) -> None:
        entries = self.folder.listdir(relative)
        if entries is None:
            return
        for entry in entries:
            child = relative / entry.name
            if entry.is_dir:
                self.get_tree(child)
                continue
            if move:
                if self.get(str(child)) is not None:
                    self.folder.remove(child)
            else:
                self.get_file(child, entry)

    def get_file(self, relative: PurePosixPath, entry: "Entry") -> bool:
        """Copy one listed file back when it moved on there (each epoch: only new checkpoint files),
        keeping its times; False when it went since the listing (its writer replaced or dropped it)."""
        if not stale(_size_and_second(self.local_dir / relative), (entry.size, entry.mtime)):
            return True
        if self.get(str(relative)) is None:
            return False
        os.utime(self.local_dir / relative, (entry.atime, entry.mtime))
        return True


def _size_and_second(path: Path) -> tuple[int, int] | None:
    try:
        st = path.stat()
    except FileNotFoundError:
        return None
    return st.st_size, int(st.st_mtime)
