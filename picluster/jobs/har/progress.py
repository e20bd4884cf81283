"""What the user sees of a training: what it trains, one line per epoch as the chief writes it, then the selected model."""

import sys

from rich.console import Console
from rich.table import Table

from picluster.data.har.spec import CLASSES
from picluster.jobs.har import elastic


def describe_model(config) -> str:
    bidir = "bidir " if config.bidir else ""
    if config.model == "convlstm":
        model = f"convlstm: {config.layers} convolutions x {config.conv_filters}, {config.rnn_layers} {bidir}LSTM {config.rnn_hidden}"
    else:
        model = f"resbidir: {config.layers}x{config.residual} {bidir}LSTM, hidden {config.hidden}"
    return model + (f", augment {config.augment}" if config.augment else ", no augmentation")


def _update(config) -> str:
    """What one update is: its windows and learning rate (scaled for the windows, reached over the warm-up)."""
    workers = config.replicas
    windows = config.worker_batch(workers) * (workers if config.mode == "sync" else 1)
    lr = config.learning_rate * config.lr_scale(workers)
    length = (f"{config.warmup_updates} warm-up update{'s' if config.warmup_updates != 1 else ''}" if config.warmup_updates
              else f"{config.warmup_epochs:g} warm-up epoch{'s' if config.warmup_epochs != 1 else ''}" if config.warmup_epochs else "")
    warm = f" after {length}" if length and lr != config.learning_rate else ""
    stale = ", divided by its staleness" if config.mode == "async" and config.async_lr == "staleness" and workers > 1 else ""
    local = (f", models averaged every {config.local_steps} local steps after epoch {config.local_after}"
             if config.local_steps > 1 and config.mode == "sync" and workers > 1 else "")
    return f"{windows} windows per update at rate {lr:.3g}{warm}{stale}{local}"


def exchange_line(config) -> str:
    """How the run's updates meet, and why that way (the default for the run's mode, or given)."""
    from picluster.jobs.har.config import EXCHANGE_TEXT, default_exchange

    if config.exchange == default_exchange(config.mode):
        why = f"the default for {config.mode} updates; --exchange picks another"
    elif config.wire != "float32" or config.local_steps > 1:
        why = "--wire and --local-steps go through the fused ps exchange"
    else:
        why = "given by --exchange"
    return f"exchange: {config.exchange}, {EXCHANGE_TEXT[config.exchange]} ({why})"


def epoch_line(r: dict) -> str:
    """One epoch's row of metrics.csv, as the user reads it."""
    f = lambda k: float(r[k]) if r.get(k) not in (None, "") else float("nan")
    stale = f" stale {f('staleness_mean'):.2f}/{r['staleness_max']}" if r.get("staleness_mean") else ""
    # Sync: the worker the others waited for, when one held most steps back (straggler.py).
    if r.get("straggler") not in (None, ""):
        stale += f"  straggler worker:{int(float(r['straggler']))} (+{f('straggler_ms'):.0f} ms a step)"
    # Test scores per epoch only with --eval-test-every-epoch (and in runs made before it).
    test = f"test {f('test_loss'):.3f} {f('test_acc'):.1%} F1 {f('test_f1'):.3f}  " if r.get("test_acc") not in (None, "") else ""
    return (f"epoch {int(r['epoch']):3d}  train {f('train_loss'):.3f} {f('train_acc'):.1%}  "
            f"val {f('val_loss'):.3f} {f('val_acc'):.1%} F1 {f('val_f1'):.3f}  {test}"
            f"{f('epoch_s'):.1f}s = input {f('input_s'):.2f} + compute {f('compute_s'):.1f} + exchange {f('exchange_s'):.1f}{stale}")


class Printer:
    """The run's first line (what it trains, how) and its summary (the command's output)."""

    def __init__(self, config, run_dir, quiet: bool = False, console: Console | None = None) -> None:
        self.config = config
        # Progress goes to stderr so --json output stays parseable; a live panel brings its own console.
        # The summary is the command's output: on stdout (`train har > result.txt`), as run's report.
        self.console = console or Console(file=sys.stderr, highlight=False, soft_wrap=True)
        self.report = console or Console(highlight=False, soft_wrap=True)
        if not quiet:
            kind = (f"one process emulating sync, {config.ps} ps + {config.workers} workers" if config.emulate
                    else "one process" if config.standalone else f"{config.mode}, {config.ps} ps + {config.workers} workers")
            self.console.print(f"run {run_dir}: {describe_model(config)}, {kind}, {config.epochs} epoch{'s' if config.epochs != 1 else ''}, {_update(config)}")
            if config.replicas > 1:
                self.console.print(exchange_line(config))
            if config.mode == "async" and not config.standalone and config.workers > 1:
                self.console.print("async mode is not reproducible: which weights each gradient is computed against "
                                   "depends on timing, so the same --seed gives different numbers (README: HAR)")

    def summary(self, result: dict) -> None:
        c = self.report
        if result.get("best_epoch") is None:
            c.print("no epoch completed")
            return
        selected = "selected on validation" if result.get("selected_on", "validation") == "validation" else "selected: last"
        c.print(f"{selected}: epoch {result['best_epoch']} (val {result['val_accuracy']:.1%})  "
                f"test accuracy {result['test_accuracy']:.2%}  weighted F1 {result['test_f1']:.4f} (scored once, for this epoch)  "
                f"({result['wall_s']:.0f} s, {result['parameters']:,} parameters)")
        if result.get("test_accuracy_by_volunteer"):
            c.print("test accuracy by volunteer: "
                    + ", ".join(f"{v}: {a:.1%}" for v, a in result["test_accuracy_by_volunteer"].items()))
        if result.get("elastic"):
            c.print(elastic.line(result["elastic"]))
        if result.get("lost_workers"):
            c.print(f"workers lost during the run: {', '.join(map(str, result['lost_workers']))}")
        table = Table(title="test confusion matrix (rows: true, columns: predicted)")
        table.add_column("")
        for name in CLASSES:  # short headers: the whole table fits 80 columns, a pipe's width too
            table.add_column(SHORT_CLASSES[name], justify="right", no_wrap=True)
        for name, row in zip(CLASSES, result["confusion"]):
            table.add_row(name, *map(str, row))
        c.print(table)


# Column headers of the confusion matrix, in CLASSES' order.
SHORT_CLASSES = {"WALKING": "WALK", "WALKING_UPSTAIRS": "UP", "WALKING_DOWNSTAIRS": "DOWN", "SITTING": "SIT",
                 "STANDING": "STAND", "LAYING": "LAY"}


class Follower:
    """The training's progress, reported through the job controller's ``Running``: a line per
    epoch (not with --json), and on a live panel where the chief is in its epoch, and the last and
    best validation accuracy."""

    def __init__(self, config, job, quiet: bool = False) -> None:
        self.config = config
        self.job = job  # controller.Running
        self.quiet = quiet
        self.last_val: float | None = None
        self.best_val: float | None = None
        self.epochs_done = 0

    def epoch(self, row: dict) -> None:
        if not self.quiet:
            self.job.say(epoch_line(row))
        val = float(row["val_acc"])
        self.last_val = val
        self.best_val = val if self.best_val is None else max(self.best_val, val)
        self.epochs_done = int(row["epoch"])
        if self.job.live:  # without a panel the epoch line says it all
            self.job.progress(self.epochs_done, self.config.epochs, self._detail(None))

    def live(self, live: dict) -> None:
        if not self.job.live or int(live["epoch"]) <= self.epochs_done:
            return
        done = int(live["epoch"]) - 1 + int(live["step"]) / max(int(live["steps"]), 1)
        self.job.progress(done, self.config.epochs, self._detail(live))

    def _detail(self, live: dict | None) -> str:
        parts = []
        if live is not None:
            parts.append(f"epoch {live['epoch']}/{self.config.epochs} step {live['step']}/{live['steps']} "
                         f"train acc {float(live['train_acc']):.1%}")
        if self.last_val is not None:
            parts.append(f"val acc {self.last_val:.1%} (best {self.best_val:.1%})")
        return "  ".join(parts)
