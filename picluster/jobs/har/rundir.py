"""A HAR run's folder: the name of every file in it, and which process writes it (one writer each).

The coordinator and the replicas (local, or on the worker nodes with the chief's files mirrored
back) share only this folder; each file has one writer, so no two processes ever replace the
same file:

    config.json     the coordinator, when a run starts or resumes (TrainConfig)
    layout.json     the coordinator: the tasks used, the cluster, the launch id, the inventory
    nodes.csv       the coordinator's recorder: each node's CPU and memory (``picluster plot``)
    worker-N.log    replica N's output
    worker-N.json   replica N: its state while it runs
    metrics.csv     the evaluator: one row per epoch
    state.json      the evaluator: the best epoch so far, for --resume
    progress.json   the evaluator: the last epoch's row
    live.json       the chief: where it is within the epoch
    resume.json     the chief: the checkpoint a resumed run restored
    trained.jsonl   the chief, with an evaluator beside the coordinator: each epoch's training
                    figures and checkpoint, a line each (a launch's first line says where it began)
    evaluator.log   the evaluator beside the coordinator: its output
    result.json     the evaluator, once, at the end
    checkpoints/    the chief
    to-evaluate/    the chief, with an evaluator beside the coordinator: each epoch's checkpoint
                    handed over (trained.py); the evaluator removes each once it has read it
    best/ tensorboard/   the evaluator

The evaluator is the chief itself (worker 0, between its epochs) or, with ``--evaluator
coordinator``, a process beside the coordinator (evaluator.py) that reads the chief's checkpoints.
"""

import json
import shutil
from pathlib import Path


class RunDir:
    CONFIG = "config.json"
    LAYOUT = "layout.json"
    NODES = "nodes.csv"
    METRICS = "metrics.csv"
    STATE = "state.json"
    PROGRESS = "progress.json"
    LIVE = "live.json"
    RESUME = "resume.json"
    RESULT = "result.json"
    TRAINED = "trained.jsonl"
    EVALUATOR_LOG = "evaluator.log"
    CHECKPOINTS = "checkpoints"
    CHECKPOINT_STATE = "checkpoint"  # in checkpoints/: the Saver's state file, naming the ones kept
    CHECKPOINT_EPOCHS = "epochs.json"  # in checkpoints/: the epoch each one ends (checkpoints.py)
    TO_EVALUATE = "to-evaluate"
    BEST = "best"
    TENSORBOARD = "tensorboard"

    # What a training writes as it goes (not its config, layout or logs): what starting it over
    # from epoch 1 removes, here and in a node's copy.
    TRAINING = (METRICS, STATE, PROGRESS, LIVE, RESUME, RESULT, TRAINED, CHECKPOINTS, TO_EVALUATE, BEST, TENSORBOARD)

    def __init__(self, path: Path | str) -> None:
        self.path = Path(path)

    def __fspath__(self) -> str:
        return str(self.path)

    def __str__(self) -> str:
        return str(self.path)

    @property
    def config(self) -> Path:
        return self.path / self.CONFIG

    @property
    def layout(self) -> Path:
        return self.path / self.LAYOUT

    @property
    def nodes(self) -> Path:
        return self.path / self.NODES

    @property
    def metrics(self) -> Path:
        return self.path / self.METRICS

    @property
    def state(self) -> Path:
        return self.path / self.STATE

    @property
    def progress(self) -> Path:
        return self.path / self.PROGRESS

    @property
    def live(self) -> Path:
        return self.path / self.LIVE

    @property
    def resume_note(self) -> Path:
        return self.path / self.RESUME

    @property
    def result(self) -> Path:
        return self.path / self.RESULT

    @property
    def trained(self) -> Path:
        return self.path / self.TRAINED

    @property
    def evaluator_log(self) -> Path:
        return self.path / self.EVALUATOR_LOG

    @property
    def checkpoints(self) -> Path:
        return self.path / self.CHECKPOINTS

    @property
    def to_evaluate(self) -> Path:
        return self.path / self.TO_EVALUATE

    @property
    def best(self) -> Path:
        return self.path / self.BEST

    @property
    def tensorboard(self) -> Path:
        return self.path / self.TENSORBOARD

    @staticmethod
    def worker_log_name(task: int) -> str:
        return f"worker-{task}.log"

    def worker_log(self, task: int) -> Path:
        return self.path / self.worker_log_name(task)

    def worker_status(self, task: int) -> Path:
        return self.path / f"worker-{task}.json"

    def start_over(self) -> None:
        """Remove what the training wrote (TRAINING): the run starts again from its first epoch."""
        for name in self.TRAINING:
            target = self.path / name
            shutil.rmtree(target) if target.is_dir() else target.unlink(missing_ok=True)

    def has_checkpoint(self) -> bool:
        """Whether a checkpoint is here to resume from: a state file, and a checkpoint's index."""
        return (self.checkpoints / self.CHECKPOINT_STATE).is_file() and any(self.checkpoints.glob("*.index"))

    def resume_hint(self) -> str:
        """The end of a failure's line when there is a checkpoint here to go on from."""
        if self.has_checkpoint():
            return f"; continue with 'picluster train har --resume {self}'"
        return ""


def read_json(path: Path) -> dict | None:
    """A run's JSON file as written (None: missing, half written, or not JSON): the files are
    read while their writers run, and a damaged one is the same as none."""
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError, RecursionError):
        return None
