"""``picluster train har``: the deep residual bidirectional LSTM on HAR, replicated over ps/worker tasks."""

from pathlib import Path

import click

from picluster.cli.group import Group
from picluster.cli.options import Real, Whole, inventory_option, option, other_spelling
from picluster.util import verbosity
from picluster.util.errors import UsageError

# What --resume may change of a run's config: its length and its rules for losses.
RESUME_MAY_CHANGE = ("epochs", "max_restarts", "worker_deadline")


@click.group(cls=Group)
def train() -> None:
    """Train a model on the cluster (a temporary local one when none is running)."""


@train.command()
@inventory_option
@option("--model", type=click.Choice(["convlstm", "resbidir"]), default=None,
        show_default="convlstm", help="convlstm: convolutions, then a bidir LSTM (the chosen recipe); resbidir: the thesis' residual bidir LSTM.")
@option("--layers", type=Whole(), default=None,
        show_default="3", help="The model's depth: convlstm's convolution blocks (1-7), resbidir's stacked residual blocks (1-16).")
@option("--conv-filters", type=Whole(), default=None, show_default="64", help="convlstm: filters per convolution.")
@option("--conv-kernel", type=Whole(), default=None, show_default="5", help="convlstm: kernel length in steps.")
@option("--conv-pool", type=Whole(), default=None, show_default="2", help="convlstm: max-pool after each convolution.")
@option("--conv-norm/--no-conv-norm", default=None, show_default="no-conv-norm", help="convlstm: layer norm after each convolution.")
@option("--rnn-layers", type=Whole(), default=None, show_default="1", help="convlstm: (bi)LSTM layers.")
@option("--rnn-hidden", type=Whole(), default=None, show_default="64", help="convlstm: LSTM layer output, split over directions.")
@option("--readout", type=click.Choice(["last", "mean", "both"]), default=None, show_default="last", help="convlstm: last states, mean over time, or both.")
@option("--residual", type=Whole(), default=None, show_default="2", help="resbidir: residual LSTMs summed per block; 1 = none.")
@option("--hidden", type=Whole(), default=None, show_default="32", help="resbidir: hidden units per block, split over directions.")
@option("--norm", type=click.Choice(["window", "step", "batch", "none"]), default=None, show_default="window", help="resbidir: normalisation of residual block outputs.")
@option("--relu-logits/--linear-logits", default=None, show_default="linear-logits", help="resbidir: ReLU on the output layer, as in the thesis.")
@option("--window-stats/--no-window-stats", default=None, show_default="no-window-stats",
        help="resbidir: feed each input channel's window mean and deviation to the output layer.")
@option("--bidir/--no-bidir", default=None, show_default="bidir", help="Bidirectional LSTMs.")
@option("--standardise/--raw-inputs", default=None, show_default="convlstm: standardise; resbidir: raw-inputs", help="Scale inputs per channel by training-set moments.")
@option("--augment", type=str, default=None, metavar="SPEC",
        show_default="convlstm: rotate:45,scale:0.1,shift:8; resbidir: none", help="Augment training windows: rotate:DEG,mirror:P,scale:S,shift:STEPS; '' = none.")
@option("--label-smoothing", type=Real(), default=None, show_default="0", help="Label smoothing of the training loss's targets.")
@option("--epochs", type=Whole(), default=None, show_default="convlstm: 60; resbidir: 40", help="Training epochs.")
@option("--batch", type=Whole(), default=None, show_default="100; 400 an update from 8 sync workers",
        help="Windows per worker step; with --global-batch, per sync update.")
@option("--batch-per-worker/--global-batch", "batch_per_worker", default=None,
        show_default="batch-per-worker; global-batch from 8 sync workers", help="sync: each worker feeds --batch windows (an update sees workers x batch), "
                                              "or --batch is split across the workers, as in the thesis.")
@option("--lr-scaling", type=click.Choice(["none", "sqrt", "linear"]), default=None,
        show_default="sqrt", help="The rate times (an update's windows / --batch) to the power 0, 1/2 or 1.")
@option("--local-steps", type=Whole(), default=None,
        show_default="1: every step syncs", help="sync: after --local-after epochs, each worker's steps between syncs that average the models (post-local SGD).")
@option("--local-after", type=Whole(), default=None, show_default="2", help="Epochs of synchronous steps before --local-steps apply.")
@option("--warmup-updates", type=Whole(), default=None, show_default="none: --warmup-epochs", help="Updates over which the scaled rate is reached linearly.")
@option("--warmup-epochs", type=Real(), default=None, show_default="2", help="Epochs over which the scaled rate is reached linearly, instead of --warmup-updates.")
@option("--async-lr", type=click.Choice(["constant", "staleness"]), default=None,
        show_default="staleness", help="async: divide each update's rate by its staleness (updates since it read the weights).")
@option("--adam-beta1", type=Real(), default=None, show_default="0.9", help="Adam's momentum (beta1).")
@option("--adam-beta2", type=Real(), default=None, show_default="0.999; 0.95 from 8 sync workers", help="Adam's decay of the squared gradients' average (beta2).")
@option("--lr", "learning_rate", type=Real(), default=None, show_default="0.001; 0.002 from 8 sync workers", help="Adam learning rate.")
@option("--lr-schedule", type=click.Choice(["constant", "cosine"]), default=None, show_default="constant", help="Learning rate over the epochs.")
@option("--l2", type=Real(), default=None, show_default="convlstm: 0.0005; resbidir: 0.005", help="L2 weight on the weights.")
@option("--ema", type=Real(), default=None, show_default="0", help="Evaluate a moving average of the weights with this decay; 0 = off.")
@option("--keep-prob", type=Real(), default=None, show_default="0.85", help="Dropout keep probability.")
@option("--mode", type=click.Choice(["sync", "async"]), default=None, show_default="sync", help="Gradient aggregation.")
@option("--workers", type=Whole(), default=None, show_default="2; with an inventory all of its workers",
        help="Worker tasks, one client each (with an inventory, one per worker node).")
@option("--ps", type=Whole(), default=None, show_default="1; with an inventory all of its ps tasks", help="Parameter-server tasks.")
@option("--exchange", type=click.Choice(["fused", "variables", "tree", "allreduce", "collective", "collective-tree"]), default=None,
        show_default="fused",
        help="How a step's gradients meet: on the ps, one flat tensor per ps each way (fused) or one per variable, "
             "or each group of 4 workers summed by its first before the ps (tree); "
             "summed between the workers themselves, each holding the model (allreduce: picluster's, over TCP); "
             "or TensorFlow's collective all-reduce (one ring, or rings of 4 and a ring of their first workers). "
             "The last four: sync only.")
@option("--wire", type=click.Choice(["float32", "bfloat16"]), default=None, show_default="float32",
        help="What the fused exchange's tensors are between workers and ps: bfloat16 halves the bytes (float32 weights and Adam on the ps).")
@option("--standalone", is_flag=True, default=None, help="One process, no ps (the baseline for benchmarks).")
@option("--emulate", is_flag=True, default=None,
        help="One process makes the updates a sync cluster of --workers makes (each worker's batches, augmentation and dropout), "
             "at this machine's speed: judge a recipe over many seeds before the Pis spend hours on it.")
@option("--seed", type=Whole(), default=None, show_default="1", help="Initialisation, dropout, input order and augmentation seed.")
@option("--evaluator", type=click.Choice(["auto", "coordinator", "chief"]), default=None,
        show_default="auto: here when this machine holds the data set", help="Where validation runs: beside this command (workers never wait for it), "
                                                                             "or on worker 0 between epochs.")
@option("--select", type=click.Choice(["best", "last"]), default=None, show_default="best", help="The model kept: the best epoch on validation, or the last.")
@option("--deterministic/--no-deterministic", default=None,
        show_default="no-deterministic", help="Op determinism (TF_DETERMINISTIC_OPS); sync and standalone runs repeat exactly without it.")
@option("--threads", type=Whole(), default=None, show_default="0", help="standalone: intra- and inter-op threads; 0 = every core.")
@option("--target-val-accuracy", type=Real(), default=None, help="Stop once validation accuracy reaches this.")
@option("--checkpoint-epochs", type=Whole(), default=None, show_default="1", help="Epochs between checkpoints.")
@option("--data-dir", type=click.Path(file_okay=False, path_type=Path), default=None, show_default="picluster data har's, prepared on first use", help="Prepared HAR folder.")
@option("--val-volunteers", type=str, default=None, metavar="LIST",
        help="Training volunteers that validate instead of the data's own, e.g. 5,14,21,27 (cross-validation folds); never test volunteers.")
@option("--eval-test-every-epoch", is_flag=True, default=None,
        help="For study only: also score the test volunteers every epoch (metrics.csv test columns); "
                   "by default the test set is scored once, at the end, for the model chosen on validation.")
@option("--run-dir", type=click.Path(file_okay=False, path_type=Path), default=None, show_default="<state>/runs/<time>", help="Where the run keeps its files.")
@option("--resume", type=click.Path(file_okay=False, path_type=Path), default=None, help="Continue the run in this directory from its last checkpoint.")
@option("--json", "as_json", is_flag=True, help="Print result.json at the end instead of a summary.")
@option("--live/--no-live", default=True, show_default=True, help="Live node panel and progress (on a terminal; else log lines).")
@option("--worker-runtime", type=click.Choice(["auto", "resident", "shared", "separate"]), default="auto", show_default=True,
        help="resident: each worker node's client runs inside the node's running server (no TensorFlow import, one runtime per node, fits a 1 GB Pi); "
                   "shared: a client process serves the task in place of the node's server; separate: a client process beside it; auto: resident on inventory nodes.")
@option("--max-restarts", type=Whole(), default=None, show_default="3",
        help="sync: times a run that loses a worker, the ps or the chief starts again from its last checkpoint with the workers that answer; 0 = stop.")
@option("--worker-deadline", type=Real(), default=None, show_default="0: 3 of the slowest epochs, at least 30 s", metavar="SECONDS",
        help="sync: seconds without a step after which the run counts as stalled and starts again.")
@other_spelling("--nodes", "train har counts worker tasks: give --workers {value} (with an inventory, one per worker node; --ps for the ps tasks)")
def har(inventory, resume, run_dir, as_json, live, data_dir, worker_runtime, **options) -> None:
    """Train a HAR classifier on UCI HAR windows, between-graph replicated.

    \b
    Two models (--model): convlstm, the default, with the recipe chosen on the validation
    volunteers (standardised inputs, L2 0.0005, augmentation, 60 epochs); resbidir, the
    thesis' deep residual bidirectional LSTM, with its former defaults (raw inputs, L2 0.005,
    no augmentation, 40 epochs).  --layers sets the depth of either (3 by default, so
    `picluster train har --layers 3` trains the recipe); an option of the other model is refused.  Standalone and
    sync runs are reproducible: the same config and --seed give the same metrics.csv.
    """
    from dataclasses import replace
    from datetime import datetime
    from functools import partial

    from picluster.cluster import attach
    from picluster.data.har import har_dir
    from picluster.data.har.dataset import HAR_SUBDIR
    from picluster.jobs import controller
    from picluster.jobs.har import coordinator, progress
    from picluster.jobs.har.config import TrainConfig
    from picluster.jobs.har.job import HarJob
    from picluster.jobs.har.resume import resume_config, run_inventory
    from picluster.jobs.har.rundir import RunDir
    from picluster.views.live import JobDisplay

    if (options.get("worker_deadline") or 0) < 0:
        raise UsageError(f"--worker-deadline {options['worker_deadline']:g} must be 0 (adaptive) or more seconds")
    given = {k: v for k, v in options.items() if v is not None}
    if given.get("emulate"):
        given.setdefault("standalone", True)  # one process on this machine, whatever cluster there is
    before = None  # the job's work once its cluster answers
    chosen_data = data_dir is not None  # a folder named by hand is never filled here: a typo must not pass
    if resume is not None:
        if run_dir is not None:
            raise UsageError("give --resume or --run-dir, not both")
        run = RunDir(resume)
        config = resume_config(run)
        if given.get("model", config.model) != config.model:
            raise UsageError(f"--resume {resume} trained --model {config.model}; it cannot continue as --model {given['model']}: start a new run")
        if given:
            # The model and its data stream must stay as checkpointed; only the length may grow, and
            # the rules for losses may change (a run that stopped past its restarts may get more).
            if set(given) - set(RESUME_MAY_CHANGE):
                raise UsageError(f"--resume keeps the run's config; only --epochs, --max-restarts and --worker-deadline may change "
                                 f"(got --{sorted(set(given) - set(RESUME_MAY_CHANGE))[0].replace('_', '-')})")
            config = replace(config, **given)
        if inventory is None:
            inventory = run_inventory(run)  # the run's record is read, and checked, either way
        if config.standalone:
            inventory = None  # it ran here, and runs here again, whatever inventory is given or recorded
        where = attach.place(inventory)
    else:
        if inventory is not None:
            _check_inventory(inventory, given)
        where = attach.place(inventory)
        if not given.get("standalone"):
            # Every worker and ps task of the cluster (a Slurm job's: a worker on each node without a
            # ps), the data on the share every node mounts, and a Slurm job's runs there too.
            given = {k: v for k, v in (("workers", where.workers), ("ps", where.ps)) if v is not None} | given
            if where.runs is not None:
                run_dir = run_dir or where.runs / f"{datetime.now():%Y%m%d-%H%M%S}{where.run_suffix}"
        data_dir = data_dir or (where.share / HAR_SUBDIR if where.share is not None else har_dir())
        config = TrainConfig.for_model(**given, data_dir=str(data_dir))
        run = None
        if not chosen_data and not where.queued:
            # Not inside Slurm: the job runs on a node whose runtime lacks the offline source.
            if not where.data_on_nodes:
                _prepare_on_first_use(Path(config.data_dir))
            elif not config.standalone:
                before = partial(_put_on_share_on_first_use, inventory)
    # Bad choices fail before anything starts; the cluster's own answer comes once it is attached.
    coordinator.worker_runtime(worker_runtime, coordinator.ALONE if config.standalone else where.worker_runtimes)
    if not where.data_on_nodes:
        coordinator.check_data(config)  # before a run directory or a server exists; nodes check their own copy
    run = run or coordinator.new_run_dir(run_dir)
    display = JobDisplay("train har", "epochs", live=live and not as_json)
    printer = progress.Printer(config, run, quiet=as_json or verbosity.quiet(), console=display.console if display.live else None)
    job = HarJob(config, run, worker_runtime, quiet=as_json, before=before)
    try:
        result = controller.run(job, inventory, display=display, where=where)  # placed once, here
    except BaseException:
        if resume is None:
            coordinator.discard_unused(run)
        raise
    if as_json:
        import json

        click.echo(json.dumps(result))
    else:
        printer.summary(result)


def _prepare_on_first_use(folder: Path) -> None:
    """The default data folder without a prepared set: prepared now from the offline HAPT
    recordings, as `picluster data har` would (seconds), said on stderr (--json keeps stdout)."""
    import time

    from picluster.data.har.dataset import HAPT, cache_path, ensure_cache

    if cache_path(folder).exists():
        return  # whatever is there, load_data checks it and says what is wrong
    verbosity.say(f"picluster: no HAR data set in {folder} yet: preparing it from the offline HAPT recordings "
                  "(once, as 'picluster data har' does)...")
    started = time.perf_counter()
    ensure_cache(folder, HAPT)
    verbosity.say(f"picluster: prepared in {time.perf_counter() - started:.1f} s: {cache_path(folder)}")


def _put_on_share_on_first_use(inv) -> None:
    """The cluster's share without the data set: prepared here and copied to the NFS master's
    share, which every node mounts, as `picluster data har` does (seconds), said on stderr."""
    import time

    from picluster.cluster.share import where
    from picluster.jobs.har import shared_data

    if shared_data.on_share(inv):
        return
    verbosity.say(f"picluster: no HAR data set on the cluster's share yet: preparing it from the offline HAPT recordings for "
                  f"{where(inv, shared_data.RELATIVE)} (once, as 'picluster data har' does)...")
    started = time.perf_counter()
    placed = shared_data.prepare(inv, known_missing=True)  # on_share just said so: not asked again
    verbosity.say(f"picluster: prepared in {time.perf_counter() - started:.1f} s: {placed.copied_to or placed.local}, "
                  f"which every node reads at {shared_data.seen_by_nodes(inv)}")


def _check_inventory(inv, given: dict) -> None:
    """A training on an inventory's cluster keeps its variables on ps tasks, and is not standalone."""
    if given.get("standalone"):
        raise UsageError("--standalone trains in one local process; drop --inventory (or --standalone)")
    if not inv.ps and "ps" not in given:
        raise UsageError(f"{inv.source}: no node has the ps role; training keeps its variables on ps tasks, so give one node that role")
