"""Training configuration: one dataclass, its defaults and ranges in one commented block, validated once.

Each field declares its range beside its default (``within``) or its choices (``one_of``); the
checks below run on every TrainConfig, whether it comes from the command line or from a run's
config.json (``load``, which also refuses unknown, missing and mistyped fields).  A new option
needs one line here: ``name: float = within(default, low, high)``.
"""

import json
import math
from dataclasses import Field, asdict, dataclass, field, fields, replace
from pathlib import Path
from typing import Any

from picluster.jobs.har.augment import parse as augment_spec
from picluster.jobs.har.folds import parse as volunteers_spec
from picluster.model import tokens
from picluster.util.errors import UsageError

MODELS = ("convlstm", "resbidir")
MODES = ("sync", "async")
NORMS = ("window", "step", "batch", "none")  # see model._normalise
READOUTS = ("last", "mean", "both")  # see model.conv_logits
SELECTS = ("best", "last")
# Where validation, selection and saving of the best model run: "coordinator", a process beside the
# coordinator reading the chief's per-epoch checkpoints (workers never wait for it); "chief", worker 0
# between its epochs (every sync worker waits); "auto": the coordinator when it holds the data set.
EVALUATORS = ("auto", "coordinator", "chief")
SCHEDULES = ("constant", "cosine")
LR_SCALINGS = ("none", "sqrt", "linear")  # how the learning rate follows the update's batch (large-batch training)
ASYNC_LRS = ("constant", "staleness")  # "staleness": each update's rate divided by how many updates it missed
# How a step's gradients meet (exchange/): on the ps tasks, "fused" (one flat tensor of weights and
# one of gradients per ps: a few RPCs a step) or "variables" (one tensor per variable each way);
# "allreduce", between the workers themselves, each holding the whole model (sync only);
# "collective" and "collective-tree", TensorFlow's own all-reduce, in one ring or two levels of them;
# "tree", the ps's with each group of workers summed by its first before the ps (sync only).
EXCHANGES = ("fused", "variables", "tree", "allreduce", "collective", "collective-tree")
# The kinds with no ps in a step: each worker holds the model (sync only).
ALL_REDUCES = ("allreduce", "collective", "collective-tree")
SYNC_ONLY = ("tree", *ALL_REDUCES)
# What a fused exchange's tensors are on the wire: "bfloat16" halves the bytes each way (fusion.py);
# the ps keeps float32 weights and Adam either way.
WIRES = ("float32", "bfloat16")
WARMUPS = ("warmup_updates", "warmup_epochs")  # one warm-up, counted in either unit
MAX_CONFIG_BYTES = 64 * 1024  # config.json is about 1 KB
MAX_CONV_LAYERS = 7  # 128 steps: the seventh pool of 2 leaves one
# Fields a run's config.json of an earlier version names otherwise: (old name, models, new name).
RENAMED = (("conv_layers", ("convlstm",), "layers"),)
# Fields added since: the value that reproduces what a run of an earlier version did (its
# config.json lacks them), which is not always the new default.
ADDED: dict[str, Any] = {"eval_test_every_epoch": True, "val_volunteers": "",
                         "batch_per_worker": False, "lr_scaling": "none", "warmup_epochs": 0.0, "async_lr": "constant",
                         "adam_beta1": 0.9, "adam_beta2": 0.999, "evaluator": "chief", "exchange": "variables",
                         "warmup_updates": 0, "local_steps": 1, "local_after": 2, "emulate": False, "wire": "float32",
                         "max_restarts": 3, "worker_deadline": 0.0}


def within(default, low, high, *, low_open: bool = False, high_open: bool = False, flag: str | None = None):
    """A numeric field: its default and the range every value must fall in ((low, high] with low_open)."""
    return field(default=default, metadata={"range": (low, high, low_open, high_open), "flag": flag})


def one_of(default: str, choices: tuple[str, ...], flag: str | None = None):
    return field(default=default, metadata={"choices": choices, "flag": flag})


def parsed(default: str, parse, flag: str | None = None):
    """A text field with a grammar: ``parse(value)`` raises ValueError saying what is wrong."""
    return field(default=default, metadata={"parse": parse, "flag": flag})


@dataclass(frozen=True)
class TrainConfig:
    # -- model: the chosen recipe's convlstm, or the thesis' resbidir (docs/har.md) ----------------
    model: str = one_of("convlstm", MODELS)  # "convlstm": convolutions, then a bidir LSTM; "resbidir": the thesis' model
    bidir: bool = True
    keep_prob: float = within(0.85, 0.0, 1.0, low_open=True)  # dropout keep probability on inputs and before the output layer
    standardise: bool = True  # inputs scaled per channel by training-set moments; resbidir (thesis): raw
    # The model's depth, whichever it is: convlstm's convolution blocks (each pools the window, so
    # at most MAX_CONV_LAYERS), resbidir's stacked residual blocks (the thesis' n_stacked_layers).
    layers: int = within(3, 1, 16)
    # -- resbidir only (model.Shape; thesis ch. 4.3.5 and its appendix code) ---------------------
    residual: int = within(2, 1, 8)  # LSTMs summed inside a block (n_layers_in_highway); 1 = plain stack
    hidden: int = within(32, 1, 1024)  # units per block output; hidden/2 per direction when bidirectional
    norm: str = one_of("window", NORMS)  # moments for the residual blocks' outputs (model._normalise); thesis: "batch"
    relu_logits: bool = False  # thesis: ReLU on the logits
    window_stats: bool = False  # per-channel window mean and deviation beside the last state; thesis: none
    # -- convlstm only (model.ConvShape) ---------------------------------------------------------
    conv_filters: int = within(64, 1, 1024)
    conv_kernel: int = within(5, 1, 64)
    conv_pool: int = within(2, 1, 8)  # 128 steps -> 16 after three pools of 2
    conv_norm: bool = False  # per-step layer norm after each convolution (measured: no better, 4x slower)
    rnn_layers: int = within(1, 1, 8)  # (bi)LSTM layers over the shortened sequence
    rnn_hidden: int = within(64, 1, 1024)  # output of one LSTM layer; rnn_hidden/2 per direction when bidirectional
    readout: str = one_of("last", READOUTS)  # "last": forward's last and backward's first state; "mean": over time
    # -- training windows only, never validation or test (augment.py) ----------------------------
    # Without mirror: cross-validated over the training volunteers (5 folds x 5 seeds, docs/har.md)
    # the recipe without it validated 0.50 points higher at the chosen epoch (0.68 at the last),
    # higher on all 5 seeds' fold means; mirror had been added after looking at test errors.
    augment: str = parsed("rotate:45,scale:0.1,shift:8", augment_spec)  # "" = none
    label_smoothing: float = within(0.0, 0.0, 1.0, high_open=True)  # of the training loss's targets
    # -- optimisation (thesis values) --------------------------------------------------------
    learning_rate: float = within(0.001, 0.0, 1.0, low_open=True, flag="--lr")  # Adam; 0.01 diverged in the thesis
    lr_schedule: str = one_of("constant", SCHEDULES)  # "cosine": decays to 0 over --epochs; thesis: constant
    l2: float = within(0.0005, 0.0, 1.0)  # on weights; biases and normalisation parameters are left out; resbidir: 0.005
    clip_norm: float = within(15.0, 0.0, 1e6, low_open=True, flag="--clip")  # global gradient norm
    ema: float = within(0.0, 0.0, 1.0, high_open=True)  # decay of the evaluated weights' moving average (0: raw weights); thesis: none
    batch: int = within(100, 1, 100_000)  # windows per worker step (--global-batch: per sync update, split across the workers)
    # Sync: each worker feeds --batch windows, so an update sees workers x batch and an epoch has
    # that many times fewer exchanges, as large-batch training does; False: --batch is split across
    # the workers (the thesis' way: every update sees --batch windows, however many workers).
    batch_per_worker: bool = True
    lr_scaling: str = one_of("sqrt", LR_SCALINGS)  # the rate times (update's windows / --batch) ** (1/2, 1 or 0)
    # The scaled rate is reached linearly over this many updates, or epochs (one of the two): an
    # epoch at N sync workers is N times fewer updates, so a warm-up in epochs takes a larger
    # share of a large cluster's updates.
    warmup_updates: int = within(0, 0, 1_000_000)
    warmup_epochs: float = within(2.0, 0.0, 1000.0)
    async_lr: str = one_of("staleness", ASYNC_LRS)  # async: "staleness" divides each update's rate by its staleness
    # Adam's momentum.  Asynchrony adds momentum of its own (Mitliagkas et al., "Asynchrony begets
    # momentum", 2016): N async workers act like momentum about 1 - 1/N on top of this one.
    adam_beta1: float = within(0.9, 0.0, 1.0, high_open=True)
    # Adam's second-moment decay: 0.999 averages the squared gradients over about 1,000 updates,
    # more than a large cluster makes in a whole run (16 workers: about 4 an epoch).
    adam_beta2: float = within(0.999, 0.0, 1.0, high_open=True)
    epochs: int = within(60, 1, 100_000)  # convlstm + augmentation: no validation gain at 90; resbidir: 40 (the thesis ran 250)
    seed: int = within(1, 0, 2**31 - 1)
    select: str = one_of("best", SELECTS)  # the model kept: the epoch of best validation accuracy, or the last
    # -- distribution ------------------------------------------------------------------------
    mode: str = one_of("sync", MODES)  # "sync": gradients of all workers aggregated per step; "async": each applies its own
    workers: int = within(2, 1, 64)
    ps: int = within(1, 1, 16)
    exchange: str = one_of("fused", EXCHANGES)  # see EXCHANGES; a standalone run exchanges nothing
    wire: str = one_of("float32", WIRES)  # see WIRES; with --exchange fused (and emulated by --emulate)
    # Post-local SGD (localsgd.py): after --local-after epochs of synchronous steps, each worker
    # takes this many steps of its own between syncs that average the models; 1: every step syncs.
    local_steps: int = within(1, 1, 10_000)
    local_after: int = within(2, 0, 100_000)  # epochs
    standalone: bool = False  # one process, no ps: the benchmark's baseline
    # With standalone: that one process makes the updates a sync cluster of --workers makes (each
    # worker's tower on its shard, batches, augmentation and dropout draws), at this machine's speed:
    # the statistics emulator, to judge a recipe over many seeds (exchange/emulated.py).
    emulate: bool = False
    evaluator: str = one_of("auto", EVALUATORS)  # see EVALUATORS; a standalone run evaluates in its one process
    # -- reproducibility (same config and seed: identical metrics.csv in standalone and sync mode) --
    deterministic: bool = False  # op determinism (TF_DETERMINISTIC_OPS): not needed on CPU here, and slower standalone
    threads: int = within(0, 0, 1024)  # intra- and inter-op threads of a standalone run (0: every core); part of the result
    # -- bookkeeping -------------------------------------------------------------------------
    checkpoint_epochs: int = within(1, 1, 100_000)  # the chief saves every this many epochs (at most this much is lost)
    # A sync run's losses (elastic.py), kept with the run so that --resume goes on under the same rules:
    # the restarts from the last checkpoint before it stops, and the seconds without a step that
    # count as a stall (0: 3 of the slowest epochs, at least 30 s).
    max_restarts: int = within(3, 0, 1000)
    worker_deadline: float = within(0.0, 0.0, 86_400.0)
    target_val_accuracy: float = within(0.0, 0.0, 1.0)  # stop once validation accuracy reaches this (0: never)
    eval_batch: int = within(1000, 1, 100_000)
    data_dir: str = ""  # prepared HAR folder ("" = har_dir() of the inventory or this machine)
    # -- evaluation protocol (docs/har.md): validation chooses, the test set is scored once at the end --
    eval_test_every_epoch: bool = False  # for study only: also score the test volunteers after every epoch
    val_volunteers: str = parsed("", volunteers_spec)  # e.g. "3,11,19": these training volunteers validate ("" = the data's)

    def __post_init__(self) -> None:
        for f in fields(self):
            value = _checked(f, getattr(self, f.name), _flag(f))
            object.__setattr__(self, f.name, value)  # floats given as ints become floats
        defaults = {f.name: f.default for f in fields(self)}
        foreign = [name for name in OTHER_MODEL_ONLY[self.model] if getattr(self, name) != defaults[name]]
        if foreign:
            raise UsageError(_not_for(foreign[0], self.model))
        if self.warmup_updates and self.warmup_epochs:
            raise UsageError(f"--warmup-updates {self.warmup_updates} and --warmup-epochs {self.warmup_epochs:g} both set the warm-up: give one")
        if self.model == "convlstm" and self.layers > MAX_CONV_LAYERS:
            raise UsageError(f"--layers {self.layers} is too deep for --model convlstm: at most {MAX_CONV_LAYERS} convolution blocks (each pools the 128-step window)")
        if self.bidir and self.model == "resbidir" and self.hidden % 2:
            raise UsageError(f"--hidden {self.hidden} must be even with --bidir (hidden/2 units per direction)")
        if self.bidir and self.model == "convlstm" and self.rnn_hidden % 2:
            raise UsageError(f"--rnn-hidden {self.rnn_hidden} must be even with --bidir (rnn_hidden/2 units per direction)")
        if self.emulate and (not self.standalone or self.mode != "sync"):
            raise UsageError("--emulate makes a sync cluster's updates in one process: it goes with --standalone and --mode sync")
        if self.exchange in SYNC_ONLY and self.mode != "sync" and not self.standalone:
            raise UsageError(f"--exchange {self.exchange} averages every worker's gradient in each step: it goes with --mode sync; "
                             "an async worker applies its own through the ps (--exchange fused)")
        if self.wire != "float32" and self.exchange != "fused":
            raise UsageError(f"--wire {self.wire} is the fused exchange's: add --exchange fused, or drop --wire")
        if self.threads and not self.standalone:
            raise UsageError("--threads sets a standalone run's threads; a cluster's servers set their own: add --standalone or drop --threads")
        if self.local_steps > 1:
            # The local steps are built on the fused exchange's layout, and average models, not
            # gradients: a single process, async updates or a moving average have no such sync.
            why = ("a standalone run has one model" if self.standalone else "--mode async has no sync" if self.mode == "async"
                   else "one worker has no other model to average with" if self.workers == 1
                   else "it needs --exchange fused" if self.exchange != "fused" else "--ema is not kept by the local steps" if self.ema else None)
            if why:
                raise UsageError(f"--local-steps {self.local_steps} averages sync workers' models: {why}; drop --local-steps")
        if self.mode == "sync" and not self.standalone and not self.batch_per_worker and self.batch < self.workers:
            raise UsageError(f"--batch {self.batch} is smaller than --workers {self.workers}: --global-batch splits a batch across "
                             "the workers; raise --batch or drop --global-batch")

    @classmethod
    def for_model(cls, **given) -> "TrainConfig":
        """The config of the options given (the command line's): the model's own defaults where
        they differ from the dataclass's (the recipe's), and an option of the other model refused."""
        warmups = [name for name in WARMUPS if name in given]
        if len(warmups) == 1:  # the warm-up given is the warm-up: the other unit's default gives way
            given = given | {name: 0 for name in WARMUPS if name not in given}
        config = cls(**(MODEL_DEFAULTS.get(given.get("model", "convlstm"), {}) | given))  # ranges first
        foreign = [name for name in OTHER_MODEL_ONLY[config.model] if name in given]  # even at its default value
        if foreign:
            raise UsageError(_not_for(foreign[0], config.model))
        if config.model == "convlstm" and config.mode == "sync":  # the recipe studied: its large-update choices
            chosen = for_workers(config.replicas, given)
            config = replace(config, **chosen) if chosen else config
        if "exchange" not in given:
            config = replace(config, exchange=default_exchange(config.mode, given))
        return config

    @property
    def replicas(self) -> int:
        """The workers whose gradients make an update: one standalone, --workers emulated or on a cluster."""
        return 1 if self.standalone and not self.emulate else self.workers

    def worker_batch(self, workers: int) -> int:
        """Windows one worker feeds per step: --batch, or with --global-batch in sync mode its share
        of --batch (an update then sees --batch windows, as in the thesis)."""
        return self.batch // workers if self.mode == "sync" and not self.batch_per_worker else self.batch

    def lr_scale(self, workers: int) -> float:
        """The learning rate's factor for the windows one update sees: sync averages ``workers``
        gradients of worker_batch windows each; an async update is one worker's."""
        windows = self.worker_batch(workers) * (workers if self.mode == "sync" and self.replicas > 1 else 1)
        power = {"none": 0.0, "sqrt": 0.5, "linear": 1.0}[self.lr_scaling]
        return (windows / self.batch) ** power

    def alone(self, **changes) -> "TrainConfig":
        """The same model and variables in one process (an evaluator's graph, which restores a
        cluster run's checkpoints): no ps, no sync queues, no local steps."""
        return replace(self, standalone=True, local_steps=1, **changes)

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
        for old, models, new in RENAMED:  # the field's value under its new name, for the models it served
            if old in data and new in data:
                value = data.pop(old)
                if data.get("model") in models:
                    data[new] = value
        data = {name: value for name, value in ADDED.items() if name not in data} | data
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


RESBIDIR_ONLY = ("residual", "hidden", "norm", "relu_logits", "window_stats")
CONVLSTM_ONLY = ("conv_filters", "conv_kernel", "conv_pool", "conv_norm", "rnn_layers", "rnn_hidden", "readout")
OTHER_MODEL_ONLY = {"convlstm": RESBIDIR_ONLY, "resbidir": CONVLSTM_ONLY}
# Where the thesis model keeps its former defaults (the ones it was measured with, docs/har.md):
# augmentation lowered its validation accuracy (86.7 against 91.8 %), standardised inputs did not help it.
MODEL_DEFAULTS: dict[str, dict] = {
    "convlstm": {},
    "resbidir": {"standardise": False, "l2": 0.005, "augment": "", "epochs": 40},
}


# The recipe's choices for a sync update that averages many workers, chosen on validation with the
# statistics emulator over 30 seeds a variant (docs/lab.md "The recipe for few, large updates"):
# (from this many workers, {field: value}), each that applies adding to the ones before, each
# where its option is not given.  Fewer workers, async and standalone runs keep the defaults above.
FOR_WORKERS: tuple[tuple[int, dict[str, Any]], ...] = (
    # From 8 on: a fixed update of 400 windows split over the workers (14-15 updates an epoch
    # whatever their number: near one Pi's statistics) at the rate sqrt scaling gives 4 x one Pi's
    # 100 windows, and Adam's squared-gradient average over the last ~20 updates, not ~1,000.
    # 100 windows a worker made 3 updates an epoch at 16 (9 of 30 seeds without 96 % in 40
    # epochs) and 7 at 8 (a median of 22 epochs to 96 % validation against 16; on the lab, 80 s
    # to it against 70 s at the median of 5 seeds).
    (8, {"adam_beta2": 0.95, "batch_per_worker": False, "batch": 400, "learning_rate": 0.002}),
)
# The update's size is one choice: either of its fields given drops all of it with the rate (a
# --batch given keeps meaning windows per worker; 0.002 is the 400-window update's rate).
UPDATE_SIZE = ("batch_per_worker", "batch")


# The exchange a run gets unless --exchange is given (docs/lab.md "The cost of each update"): a sync
# update's gradients summed between the workers themselves (no ps in a step: 12.4x one Pi's epoch
# at 16 workers on 17 Pi-shaped hosts, the ps 5.9x); async updates go through the ps, as do the
# options that only the fused ps exchange has.
EXCHANGE_FOR_MODE = {"sync": "allreduce", "async": "fused"}
FUSED_ONLY = ("wire", "local_steps")


def default_exchange(mode: str, given=()) -> str:
    """The exchange of a run in ``mode`` whose --exchange is not given (``given``: the options that are)."""
    return "fused" if set(FUSED_ONLY) & set(given) else EXCHANGE_FOR_MODE[mode]


# What each exchange is, for the line that starts a run.
EXCHANGE_TEXT = {
    "fused": "through the ps, one flat tensor per ps each way",
    "variables": "through the ps, one tensor per variable each way",
    "tree": "through the ps, each group of 4 workers summed by its first worker",
    "allreduce": "all-reduce between the workers over TCP, no ps in a step",
    "collective": "TensorFlow's collective all-reduce, one ring of the workers",
    "collective-tree": "TensorFlow's collective all-reduce, rings of 4 then rings across them",
}


def for_workers(workers: int, given=()) -> dict[str, Any]:
    """The recipe's values for a sync update of ``workers`` workers (FOR_WORKERS), less the options
    ``given`` and, when the update's size is given, the rest of its choice (UPDATE_SIZE and the rate)."""
    chosen: dict[str, Any] = {}
    for least, values in FOR_WORKERS:
        if workers >= least:
            chosen |= values
    dropped = set(given) | ({*UPDATE_SIZE, "learning_rate"} if set(UPDATE_SIZE) & set(given) else set())
    return {name: value for name, value in chosen.items() if name not in dropped}


def _not_for(name: str, model: str) -> str:
    other = next(m for m in MODELS if m != model)
    return f"--{name.replace('_', '-')} applies to --model {other} only, not {model}; drop it or choose --model {other}"


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
    if kind is str and f.metadata.get("parse") and isinstance(value, str):
        try:
            f.metadata["parse"](value)
        except ValueError as exc:
            raise UsageError(f"{name} {tokens.show(value)}: {exc}") from None
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
