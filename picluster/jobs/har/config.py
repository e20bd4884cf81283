"""Training configuration: one dataclass, its defaults and ranges in one commented block, validated once.

Each field declares its range beside its default (``within``) or its choices (``one_of``); the
checks below run on every TrainConfig, whether it comes from the command line or from a run's
config.json (``load``, which also refuses unknown, missing and mistyped fields).  A new option
needs one line here: ``name: float = within(default, low, high)``.
"""

import json
import math
from dataclasses import Field, asdict, dataclass, field, fields
from pathlib import Path

from picluster import tokens
from picluster.errors import UsageError

MODES = ("sync", "async")
NORMS = ("window", "step", "batch", "none")  # see model._normalise
SCHEDULES = ("constant", "cosine")
MAX_CONFIG_BYTES = 64 * 1024  # config.json is about 1 KB


def within(default, low, high, *, low_open: bool = False, high_open: bool = False, flag: str | None = None):
    """A numeric field: its default and the range every value must fall in ((low, high] with low_open)."""
    return field(default=default, metadata={"range": (low, high, low_open, high_open), "flag": flag})


def one_of(default: str, choices: tuple[str, ...], flag: str | None = None):
    return field(default=default, metadata={"choices": choices, "flag": flag})


@dataclass(frozen=True)
class TrainConfig:
    # -- model (thesis ch. 4.3.5 and its appendix code) ---------------------------------------
    layers: int = within(3, 1, 16)  # stacked blocks (the thesis' n_stacked_layers)
    residual: int = within(2, 1, 8)  # LSTMs summed inside a block (n_layers_in_highway); 1 = plain stack
    hidden: int = within(32, 1, 1024)  # units per block output; hidden/2 per direction when bidirectional
    bidir: bool = True
    keep_prob: float = within(0.85, 0.0, 1.0, low_open=True)  # dropout keep probability on inputs and before the output layer
    norm: str = one_of("window", NORMS)  # moments for the residual blocks' outputs (model._normalise); thesis: "batch"
    standardise: bool = False  # inputs scaled per channel by training-set moments; thesis: raw
    relu_logits: bool = False  # thesis: ReLU on the logits
    window_stats: bool = False  # per-channel window mean and deviation beside the last state; thesis: none
    # -- optimisation (thesis values) --------------------------------------------------------
    learning_rate: float = within(0.001, 0.0, 1.0, low_open=True, flag="--lr")  # Adam; 0.01 diverged in the thesis
    lr_schedule: str = one_of("constant", SCHEDULES)  # "cosine": decays to 0 over --epochs; thesis: constant
    l2: float = within(0.005, 0.0, 1.0)  # on weights; biases and normalisation parameters are left out
    clip_norm: float = within(15.0, 0.0, 1e6, low_open=True, flag="--clip")  # global gradient norm
    ema: float = within(0.0, 0.0, 1.0, high_open=True)  # decay of the evaluated weights' moving average (0: raw weights); thesis: none
    batch: int = within(100, 1, 100_000)  # windows per update: split across the workers in sync mode, per worker in async
    epochs: int = within(40, 1, 100_000)  # the thesis ran 250; here accuracy stops improving after about 30
    seed: int = within(1, 0, 2**31 - 1)
    # -- distribution ------------------------------------------------------------------------
    mode: str = one_of("sync", MODES)  # "sync": gradients of all workers aggregated per step; "async": each applies its own
    workers: int = within(2, 1, 64)
    ps: int = within(1, 1, 16)
    standalone: bool = False  # one process, no ps: the benchmark's baseline
    # -- bookkeeping -------------------------------------------------------------------------
    checkpoint_epochs: int = within(1, 1, 100_000)  # the chief saves every this many epochs (at most this much is lost)
    target_val_accuracy: float = within(0.0, 0.0, 1.0)  # stop once validation accuracy reaches this (0: never)
    eval_batch: int = within(1000, 1, 100_000)
    data_dir: str = ""  # prepared HAR folder ("" = har_dir() of the inventory or this machine)

    def __post_init__(self) -> None:
        for f in fields(self):
            value = _checked(f, getattr(self, f.name), _flag(f))
            object.__setattr__(self, f.name, value)  # floats given as ints become floats
        if self.bidir and self.hidden % 2:
            raise UsageError(f"--hidden {self.hidden} must be even with --bidir (hidden/2 units per direction)")
        if self.mode == "sync" and not self.standalone and self.batch < self.workers:
            raise UsageError(f"--batch {self.batch} is smaller than --workers {self.workers}: sync splits a batch across workers")

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
        """A run's config.json, held to the same schema as the command line; errors name the field."""
        where = f"{path}"
        try:
            with open(path, "rb") as f:
                raw = f.read(MAX_CONFIG_BYTES + 1)
        except OSError as exc:
            raise UsageError(f"{where}: cannot read the run's config ({exc.strerror})") from None
        if len(raw) > MAX_CONFIG_BYTES:
            raise UsageError(f"{where}: larger than {MAX_CONFIG_BYTES // 1024} KiB; not a run's config")
        try:
            data = json.loads(raw.decode("utf-8"))  # NaN and Infinity load as floats: the field check names them
        except RecursionError:
            raise UsageError(f"{where}: nested too deeply; not a run's config") from None
        except (UnicodeDecodeError, ValueError) as exc:
            raise UsageError(f"{where}: not valid JSON ({tokens.show(str(exc))})") from None
        if not isinstance(data, dict):
            raise UsageError(f"{where}: must be a JSON object of training options, found a {type(data).__name__}")
        known = {f.name: f for f in fields(cls)}
        unknown = sorted(set(data) - set(known))
        if unknown:
            raise UsageError(f"{where}: unknown field {tokens.show(unknown[0])} (written by another picluster version?)")
        missing = [name for name in known if name not in data]
        if missing:
            raise UsageError(f"{where}: field {missing[0]!r} is missing (written by another picluster version?)")
        try:
            for name, value in data.items():
                _checked(known[name], value, f"field {name!r}")
            return cls(**data)
        except UsageError as exc:
            raise UsageError(f"{where}: {exc}") from None


def _flag(f: Field) -> str:
    return f.metadata.get("flag") or "--" + f.name.replace("_", "-")


def _checked(f: Field, value, name: str):
    """``value`` for field ``f`` if it has the field's type and lies in its range; UsageError naming ``name``."""
    kind = f.type
    shown = tokens.show(value)
    if kind is bool:
        if not isinstance(value, bool):
            raise UsageError(f"{name} must be true or false, got {shown}")
        return value
    if kind is str:
        choices = f.metadata.get("choices")
        if not isinstance(value, str) or (choices and value not in choices):
            raise UsageError(f"{name} {shown} must be {'one of ' + ', '.join(choices) if choices else 'a string'}")
        if len(value) > tokens.PATH_MAX or not value.isprintable():
            raise UsageError(f"{name} {shown} must be printable and at most {tokens.PATH_MAX} characters")
        return value
    if isinstance(value, bool) or not isinstance(value, (int, float)) or (kind is int and not isinstance(value, int)):
        raise UsageError(f"{name} {shown} must be {'a whole number' if kind is int else 'a number'}")
    if kind is float:
        value = float(value)
        if not math.isfinite(value):
            raise UsageError(f"{name} {shown} must be a finite number")
    low, high, low_open, high_open = f.metadata["range"]
    if value < low or value > high or (low_open and value == low) or (high_open and value == high):
        interval = f"{'(' if low_open else '['}{low:g}, {high:g}{')' if high_open else ']'}"
        what = f"a whole number from {low:,} to {high:,}" if kind is int else f"in {interval}"
        raise UsageError(f"{name} {shown} must be {what}")
    return value
