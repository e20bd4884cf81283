"""Training configuration: one dataclass, its defaults in one commented block, validated once."""

import json
from dataclasses import asdict, dataclass, fields
from pathlib import Path

from picluster.errors import UsageError

MODES = ("sync", "async")
NORMS = ("window", "step", "batch", "none")  # see model._normalise
SCHEDULES = ("constant", "cosine")


@dataclass(frozen=True)
class TrainConfig:
    # -- model (thesis ch. 4.3.5 and its appendix code) ---------------------------------------
    layers: int = 3  # stacked blocks (the thesis' n_stacked_layers)
    residual: int = 2  # LSTMs summed inside a block (n_layers_in_highway); 1 = plain stack
    hidden: int = 32  # units per block output; hidden/2 per direction when bidirectional
    bidir: bool = True
    keep_prob: float = 0.85  # dropout keep probability on inputs and before the output layer
    norm: str = "window"  # moments for the residual blocks' outputs (model._normalise); thesis: "batch"
    standardise: bool = False  # inputs scaled per channel by training-set moments; thesis: raw
    relu_logits: bool = False  # thesis: ReLU on the logits
    window_stats: bool = False  # per-channel window mean and deviation beside the last state; thesis: none
    # -- optimisation (thesis values) --------------------------------------------------------
    learning_rate: float = 0.001  # Adam; 0.01 diverged in the thesis
    lr_schedule: str = "constant"  # "cosine": decays to 0 over --epochs; thesis: constant
    l2: float = 0.005  # on weights; biases and normalisation parameters are left out
    clip_norm: float = 15.0  # global gradient norm
    ema: float = 0.0  # decay of the weights' moving average that is evaluated (0: the raw weights); thesis: none
    batch: int = 100  # windows per update: split across the workers in sync mode, per worker in async
    epochs: int = 40  # the thesis ran 250; here accuracy stops improving after about 30
    seed: int = 1
    # -- distribution ------------------------------------------------------------------------
    mode: str = "sync"  # "sync": gradients of all workers aggregated per step; "async": each applies its own
    workers: int = 2
    ps: int = 1
    standalone: bool = False  # one process, no ps: the benchmark's baseline
    # -- bookkeeping -------------------------------------------------------------------------
    checkpoint_epochs: int = 1  # the chief saves every this many epochs (at most this much is lost)
    target_val_accuracy: float = 0.0  # stop once validation accuracy reaches this (0: never)
    eval_batch: int = 1000
    data_dir: str = ""  # prepared HAR folder ("" = har_dir() of the inventory or this machine)

    def __post_init__(self) -> None:
        _positive("layers", self.layers)
        _positive("residual", self.residual)
        _positive("hidden", self.hidden)
        _positive("batch", self.batch)
        _positive("epochs", self.epochs)
        _positive("checkpoint-epochs", self.checkpoint_epochs)
        _positive("eval-batch", self.eval_batch)
        if self.bidir and self.hidden % 2:
            raise UsageError(f"--hidden {self.hidden} must be even with --bidir (hidden/2 units per direction)")
        if self.bidir and self.hidden < 2:
            raise UsageError("--hidden must be at least 2 with --bidir")
        if not 0.0 < self.keep_prob <= 1.0:
            raise UsageError(f"--keep-prob {self.keep_prob} must be in (0, 1]")
        if not self.learning_rate > 0:
            raise UsageError(f"--lr {self.learning_rate} must be positive")
        if not 0.0 <= self.ema < 1.0:
            raise UsageError(f"--ema {self.ema} must be in [0, 1) (0 turns the average off)")
        if self.l2 < 0 or self.clip_norm <= 0:
            raise UsageError("--l2 must be >= 0 and --clip positive")
        if self.norm not in NORMS:
            raise UsageError(f"--norm {self.norm!r} must be one of {', '.join(NORMS)}")
        if self.lr_schedule not in SCHEDULES:
            raise UsageError(f"--lr-schedule {self.lr_schedule!r} must be one of {', '.join(SCHEDULES)}")
        if self.mode not in MODES:
            raise UsageError(f"--mode {self.mode!r} must be one of {', '.join(MODES)}")
        if self.seed < 0:
            raise UsageError(f"--seed {self.seed} must not be negative")
        if not self.standalone:
            _positive("workers", self.workers)
            _positive("ps", self.ps)
        if self.mode == "sync" and not self.standalone and self.batch < self.workers:
            raise UsageError(f"--batch {self.batch} is smaller than --workers {self.workers}: sync splits a batch across workers")
        if not 0.0 <= self.target_val_accuracy <= 1.0:
            raise UsageError("--target-val-accuracy must be between 0 and 1")

    def worker_batch(self, workers: int) -> int:
        """Windows one worker feeds per step.  Sync averages one gradient per worker per update,
        so each takes its share of --batch: an update sees --batch windows, as in the thesis."""
        return self.batch // workers if self.mode == "sync" else self.batch

    def steps_per_epoch(self, n_train: int, workers: int) -> tuple[int, int]:
        """(steps of each worker, global-step increments) per epoch: every worker takes the same
        number of steps (sync needs it); sync counts one increment per update, async one per step."""
        steps = n_train // workers // self.worker_batch(workers)
        return steps, steps if self.mode == "sync" and workers > 1 else steps * workers

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=1)

    @classmethod
    def load(cls, path: Path) -> "TrainConfig":
        try:
            data = json.loads(path.read_text())
        except (OSError, ValueError) as exc:
            raise UsageError(f"{path}: cannot read the run's config ({exc})") from None
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in known})


def _positive(name: str, value: int) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise UsageError(f"--{name} {value} must be a whole number of at least 1")
