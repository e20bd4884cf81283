"""Which checkpoint a resumed chief restores: the newest intact one, never a damaged one, never none.

The chief's Saver keeps the last two checkpoints (graph.py).  A disk that filled up, a copy cut
short or a bad sector can damage the newest: TensorFlow would fail to restore it and the run
would never resume.  So before the session opens, every checkpoint the state file lists is read
whole (each tensor through its CRC), newest first; damaged ones are moved to
``checkpoints/damaged/`` (kept for inspection) and named in one line; the state file is
rewritten to the newest intact one, which MonitoredTrainingSession then restores.

A run that has records (metrics.csv rows) but no intact checkpoint is refused: starting over
would silently overwrite the finished epochs' rows.
"""

import json
import re
import time
from dataclasses import dataclass, field
from pathlib import Path

import tensorflow as tf

from picluster.jobs.har.rundir import RunDir
from picluster.util import atomic
from picluster.util.errors import UsageError

_STEP = re.compile(r"-(\d+)$")


@dataclass
class Restore:
    """What a resumed chief starts from: ``checkpoint`` (None: a fresh start) and the damaged ones skipped."""

    checkpoint: str | None = None
    damaged: list[tuple[str, str]] = field(default_factory=list)

    def describe(self) -> str:
        skipped = "; ".join(f"checkpoint {name} is damaged ({why})" for name, why in self.damaged)
        return f"{skipped}; resuming from {self.checkpoint}" if skipped else f"resuming from {self.checkpoint}"


def prepare(directory: Path, has_records: bool, last_row: int | None = None) -> Restore:
    """Point the state file at the newest intact checkpoint; refuse when records exist and none is intact.

    ``last_row``: the newest epoch metrics.csv holds.  A checkpoint of a later epoch (its copy
    reached the coordinator and the epoch's row did not, before the chief's node was lost) is
    passed over while an older one is kept: restoring it would leave that epoch without its row."""
    restore = Restore()
    listed = _listed(directory)
    ahead = {p.name for p in listed if last_row is not None and (epoch_of(directory, p.name) or 0) > last_row}
    passed_over = False
    for prefix in listed:
        if prefix.name in ahead and any(p.name not in ahead for p in listed):
            passed_over = True
            continue
        why = damage(prefix)
        if why is None:
            restore.checkpoint = prefix.name
            break
        restore.damaged.append((prefix.name, why))
        _set_aside(prefix)
    if restore.checkpoint is not None:
        if restore.damaged or passed_over or not (directory / RunDir.CHECKPOINT_STATE).is_file():  # TensorFlow restores what it names
            tf.compat.v1.train.update_checkpoint_state(str(directory), restore.checkpoint, [restore.checkpoint])
    elif has_records:
        found = f"{restore.damaged[0][0]}: {restore.damaged[0][1]}" if restore.damaged else "there is none"
        more = f", {len(restore.damaged) - 1} more damaged" if len(restore.damaged) > 1 else ""
        raise UsageError(f"no intact checkpoint to resume from ({found}{more}); starting over would overwrite the "
                         "run's records: start a new run instead")
    return restore


def damage(prefix: Path) -> str | None:
    """Why the checkpoint at ``prefix`` cannot be restored, or None when every tensor reads back."""
    try:
        reader = tf.compat.v1.train.NewCheckpointReader(str(prefix))
        for name in reader.get_variable_to_shape_map():
            reader.get_tensor(name)
    except Exception as exc:  # DataLossError, NotFoundError, OutOfRangeError, ...: all mean "cannot restore"
        return unreadable(exc)
    return None


def unreadable(exc: BaseException) -> str:
    """Why a checkpoint could not be read, in a few words: the error's kind and its first line."""
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    return f"{type(exc).__name__}: {text[:80]}"


def _listed(directory: Path) -> list[Path]:
    """The checkpoints the state file lists, newest first (what TensorFlow would restore)."""
    try:
        state = tf.compat.v1.train.get_checkpoint_state(str(directory))
    except Exception:  # a damaged state file: fall back to the checkpoints present
        state = None
    if state is not None:
        names = [Path(p).name for p in state.all_model_checkpoint_paths or [state.model_checkpoint_path]]
    else:
        names = [p.name.removesuffix(".index") for p in directory.glob("*.index")]
    steps = {n: int(m[1]) for n in set(names) if (m := _STEP.search(n))}
    return [directory / n for n in sorted(steps, key=steps.__getitem__, reverse=True)]


def _set_aside(prefix: Path) -> None:
    aside = prefix.parent / "damaged"
    aside.mkdir(exist_ok=True)
    for path in prefix.parent.glob(prefix.name + ".*"):
        path.replace(aside / path.name)


EPOCHS = RunDir.CHECKPOINT_EPOCHS  # beside the checkpoints: the epoch each one ends
# The checkpoints of a run's folder: the newest, and the one before as a resume's fallback when
# the newest is damaged (prepare); every Saver that writes them keeps this many.
KEPT = 2


def _quoted(text: str) -> str:
    """A string of the text protobuf format: printable ASCII as it is, every other byte of its UTF-8 as octal."""
    return '"' + "".join(chr(b) if 32 <= b < 127 and b not in (34, 92) else f"\\{b:03o}" for b in text.encode()) + '"'


def name_newest(saver, prefix: str) -> None:
    """What a Saver's save does after the files when asked to write the state, without TensorFlow's
    private or deprecated calls: the state file ("checkpoint", the CheckpointState text format that
    tf.train.get_checkpoint_state reads) names ``prefix`` the newest, beside the ones before it up
    to KEPT; then the older ones' files are removed (a chief killed between the two leaves a file
    too many, never a state that names a removed checkpoint)."""
    newest = [p for p in saver.last_checkpoints if p != prefix] + [prefix]
    kept, gone = newest[-KEPT:], newest[:-KEPT]
    saver.set_last_checkpoints_with_time([(p, time.time()) for p in kept])
    atomic.write_text(Path(prefix).parent / "checkpoint", f"model_checkpoint_path: {_quoted(prefix)}\n"
                      + "".join(f"all_model_checkpoint_paths: {_quoted(p)}\n" for p in kept))
    for old in gone:
        for path in Path(old).parent.glob(Path(old).name + ".*"):
            path.unlink(missing_ok=True)


def record_epoch(directory: Path, name: str, epoch: int) -> None:
    """Note that checkpoint ``name`` in ``directory`` ends epoch ``epoch``: a run that went on with
    fewer or more workers made a different number of updates an epoch, so its global step alone no
    longer says which epoch a checkpoint ends.  Entries of checkpoints no longer kept are dropped."""
    path = directory / EPOCHS
    known = _epochs(path)
    known = {n: e for n, e in known.items() if (directory / f"{n}.index").exists()} | {name: int(epoch)}
    atomic.write_json(path, known)


def epoch_of(directory: Path, name: str | None) -> int | None:
    """The epoch checkpoint ``name`` ends, as recorded (None: not recorded, as in a run made before
    the record was kept: its step then says it, its workers never having changed)."""
    return _epochs(directory / EPOCHS).get(name) if name else None


def _epochs(path: Path) -> dict[str, int]:
    try:
        found = json.loads(path.read_text())
    except (OSError, ValueError, RecursionError):
        return {}
    if not isinstance(found, dict):
        return {}
    return {str(n): e for n, e in found.items() if isinstance(e, int) and not isinstance(e, bool) and e >= 0}


def write_note(path: Path, restore: Restore, launch: str, epoch: int, step: int) -> None:
    """resume.json: what this launch restored, for the coordinator to say (mirrored with the progress)."""
    atomic.write_json(path, {"launch": launch, "checkpoint": restore.checkpoint, "epoch": epoch,
                              "global_step": step, "damaged": restore.damaged, "time": time.time()})
