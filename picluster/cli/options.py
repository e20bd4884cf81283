"""Options and parameter types shared by several commands.

Numbers from the command line go through these types: written plainly (no spaces, no inf or
nan), finite, and within the option's range where the range belongs to the option.  Options
that become a TrainConfig field are only parsed here: their ranges live beside the field
(jobs/har/config.py), so the command line and a resumed run's config.json are held to the same.
"""

import math
import re
from decimal import Decimal
from pathlib import Path

import click

INT64_MAX = 2**63 - 1

INVENTORY_HERE = Path("picluster.toml")


class Option(click.Option):
    """Every option of picluster's, so its help reads one way: a sentence, then ``[default: X]``.
    A default given in words (``show_default="from the command"``) is shown as written; click
    would put it in parentheses, unlike a literal default."""

    def get_help_extra(self, ctx: click.Context):
        extra = super().get_help_extra(ctx)
        if isinstance(self.show_default, str):
            extra["default"] = self.show_default
        return extra


def option(*decls: str, **attrs):
    """``click.option`` with picluster's Option."""
    return click.option(*decls, cls=Option, **attrs)


def other_spelling(wrong: str, answer: str):
    """A hidden option answering the spelling another command uses: everywhere --workers counts
    worker tasks and --nodes counts machines (Monte-Carlo's nodes each run one worker), so
    `train har --nodes 4` is told to write --workers 4.  ``answer`` may hold ``{value}``."""

    def refuse(ctx: click.Context, param: click.Parameter, value: str | None) -> None:
        if value is not None and not ctx.resilient_parsing:
            raise click.UsageError(answer.format(value=value), ctx)

    return click.option(wrong, hidden=True, default=None, expose_value=False, callback=refuse, metavar="N")


def _inventory_here(ctx: click.Context, param: click.Parameter, value: Path | None):
    """The parsed inventory (``picluster.model.inventory.Inventory``; None: this machine's cluster), read
    once per command: --inventory, else PICLUSTER_INVENTORY (click reads it), else picluster.toml
    in this folder, as Fabric finds its fabfile and Compose its compose.yaml.  A file found here is
    said in one line: a command that would have run on the local cluster now runs on its nodes."""
    if ctx.resilient_parsing:
        return value
    if value is None and INVENTORY_HERE.is_file():
        from picluster.util import verbosity

        verbosity.say(f"picluster: using the inventory ./{INVENTORY_HERE} in this folder (--inventory or PICLUSTER_INVENTORY chooses another)")
        value = INVENTORY_HERE
    if value is None:
        return None
    from picluster.cluster import hostkeys
    from picluster.model.inventory import load_inventory
    from picluster.util.errors import UsageError

    if ctx.get_parameter_source(param.name or "") is click.core.ParameterSource.ENVIRONMENT and not value.exists():
        # Set once in a shell profile and forgotten: name the variable, not only the file.
        raise UsageError(f"PICLUSTER_INVENTORY names {value}: no such file (point it at your picluster.toml, or unset it)")
    inventory = load_inventory(value)
    # A command given nodes may connect to them: the known_hosts files it trusts are read now, so a
    # damaged one is one line (exit 2) before any connection, not a failure on every node.
    hostkeys.current().check_files()
    return inventory


def _inventory(help_text: str):
    return option("--inventory", "-i", type=click.Path(dir_okay=False, path_type=Path), envvar="PICLUSTER_INVENTORY",
                        default=None, callback=_inventory_here, help=help_text)


_WHERE = "Inventory file [--inventory, else env PICLUSTER_INVENTORY, else ./picluster.toml]."
inventory_option = _inventory(f"{_WHERE}  Without one, the embedded local cluster is used.")
# Commands for which the inventory means something else than where jobs run.
data_inventory_option = _inventory(f"{_WHERE}  Its share holds the data set, which every node reads at data_dir: copied to the NFS master unless "
                                   "data_dir is a folder on this machine; without one, this machine's data directory.")
jobs_inventory_option = _inventory(f"{_WHERE}  With a [slurm] table, its queue's jobs (slurm:ID) too; without one, the jobs run from this machine.")
# Commands that act on real nodes only: they say so in one line when it is missing.
node_inventory_option = _inventory(f"{_WHERE}  Required.")

# Beside every NODESET argument, as clush -x: the nodes it leaves out (picluster.model.nodegroups.select).
exclude_option = option("--exclude", "-x", "exclude", multiple=True, metavar="NODESET",
                        help="Leave these nodes out (a node set or @group, as clush -x); may be given more than once.")

# What a number on the command line may look like: digits, a decimal point, an exponent; no
# spaces, no "inf" or "nan", nothing after it ("1e8 " is refused, not trimmed).
_COUNT = re.compile(r"[+-]?\d+(_\d+)*(\.\d+)?([eE][+-]?\d+)?", re.ASCII)
_REAL = re.compile(r"[+-]?(\d+(\.\d*)?|\.\d+)([eE][+-]?\d+)?", re.ASCII)
_WHOLE = re.compile(r"[+-]?\d{1,30}", re.ASCII)  # int() refuses more than 4300 digits with a ValueError


class Count(click.ParamType):
    """A positive whole number that fits int64; accepts 1e8, 100000000 and 100_000_000."""

    name = "COUNT"

    def __init__(self, minimum: int = 1, maximum: int = INT64_MAX) -> None:
        self.minimum = minimum
        self.maximum = maximum

    def convert(self, value, param, ctx):
        if isinstance(value, bool):
            self.fail(f"{value!r} is not a number", param, ctx)
        if isinstance(value, int):
            number = Decimal(value)
        else:
            text = str(value)
            if not _COUNT.fullmatch(text):
                self.fail(f"{text!r} is not a number (write e.g. 1e8 or 100000000)", param, ctx)
            number = Decimal(text.replace("_", ""))
        if number != number.to_integral_value():
            self.fail(f"{value!r} is not a whole number", param, ctx)
        if number < self.minimum:
            self.fail(f"{value!r} is below the minimum {self.minimum}", param, ctx)
        if number > self.maximum:
            self.fail(f"{value!r} is above the maximum {self.maximum:,}", param, ctx)
        return int(number)


class _Bounded(click.ParamType):
    """Shows its range in --help the one way every option does: ``INTEGER 1-64``, ``NUMBER 0-3600``,
    ``INTEGER >=1`` (a bound only a machine word sets is not shown)."""

    minimum: float | None
    maximum: float | None

    def get_metavar(self, *args, **kwargs) -> str | None:
        low = None if self.minimum is None else _plain(self.minimum)
        high = None if self.maximum is None or self.maximum >= INT64_MAX else _plain(self.maximum)
        if low is not None and high is not None:
            return f"{self.name} {low}-{high}"
        if low is not None:
            return f"{self.name} >={low}"
        if high is not None:
            return f"{self.name} <={high}"
        return None


class Whole(_Bounded):
    """A whole number written as digits; ``minimum``/``maximum`` bound it when given (else the
    command's own validation does, e.g. TrainConfig for the training options)."""

    name = "INTEGER"

    def __init__(self, minimum: int | None = None, maximum: int | None = None) -> None:
        self.minimum, self.maximum = minimum, maximum

    def convert(self, value, param, ctx):
        if isinstance(value, int) and not isinstance(value, bool):
            number = value
        elif isinstance(value, str) and _WHOLE.fullmatch(value):
            number = int(value)
        else:
            self.fail(f"{value!r} is not a whole number", param, ctx)
        _bounded(self, number, param, ctx)
        return number


class Real(_Bounded):
    """A finite decimal number (1, 0.001, 1e-3); ``minimum``/``maximum`` bound it when given."""

    name = "NUMBER"

    def __init__(self, minimum: float | None = None, maximum: float | None = None) -> None:
        self.minimum, self.maximum = minimum, maximum

    def convert(self, value, param, ctx):
        if (isinstance(value, (int, float)) and not isinstance(value, bool)) or (isinstance(value, str) and _REAL.fullmatch(value)):
            number = float(value)
        else:
            self.fail(f"{value!r} is not a finite decimal number (write e.g. 0.001 or 1e-3)", param, ctx)
        if not math.isfinite(number):
            self.fail(f"{value!r} is not a finite number", param, ctx)
        _bounded(self, number, param, ctx)
        return number


def _plain(number: float) -> str:
    """1 for 1.0, 0.5 for 0.5: no exponent and no trailing zeros."""
    return str(int(number)) if float(number).is_integer() else f"{number:f}".rstrip("0")


def _bounded(kind, number, param, ctx) -> None:
    if kind.minimum is not None and number < kind.minimum:
        kind.fail(f"{number} is below the minimum {kind.minimum}", param, ctx)
    if kind.maximum is not None and number > kind.maximum:
        kind.fail(f"{number} is above the maximum {kind.maximum}", param, ctx)


class CountList(click.ParamType):
    """A comma-separated list of Counts, e.g. 1e7,2e7 or 1,2,4,8."""

    name = "LIST"

    def __init__(self, item: Count) -> None:
        self.item = item

    def convert(self, value, param, ctx):
        if isinstance(value, list):
            return value
        parts = [p for p in str(value).split(",")]
        if not parts or any(not p.strip() for p in parts):
            self.fail(f"{value!r} is not a comma-separated list of numbers", param, ctx)
        return [self.item.convert(p, param, ctx) for p in parts]


class JobRef(click.ParamType):
    """A job: a record's number (``12``), or a Slurm job as ``slurm:123``."""

    name = "JOB"
    _SLURM = re.compile(r"slurm:(\d{1,12})", re.ASCII)

    def convert(self, value, param, ctx):
        if isinstance(value, (int, str)) and not isinstance(value, bool):
            m = self._SLURM.fullmatch(str(value))
            if m is not None:
                return f"slurm:{int(m.group(1))}"
            if _WHOLE.fullmatch(str(value)):
                if int(value) < 1:
                    self.fail(f"{value} is below the minimum 1", param, ctx)
                if int(value) > INT64_MAX:
                    self.fail(f"{value} is above the maximum {INT64_MAX}", param, ctx)
                return int(value)
        self.fail(f"{value!r} is not a job: give a record's number (picluster jobs) or slurm:ID", param, ctx)

    def shell_complete(self, ctx, param, incomplete):
        """The jobs in this machine's records, newest first, each with its name and state (zsh and
        fish show them); Slurm's queue is not asked (an SSH round trip at every Tab)."""
        from click.shell_completion import CompletionItem

        return [CompletionItem(str(job_id), help=about) for job_id, about in recorded_jobs() if str(job_id).startswith(incomplete)]


COMPLETED_JOBS = 50  # the newest jobs offered at a Tab


def recorded_jobs() -> list[tuple[int, str]]:
    """(id, "name STATE") of the newest recorded jobs, newest first; none when there are no
    records or they cannot be read (a completion never fails, and never creates the records)."""
    try:
        from picluster.jobs.records import JobStore, database

        if not database().is_file():
            return []
        return [(job.id, f"{job.name} {job.state}") for job in reversed(JobStore().list(COMPLETED_JOBS))]
    except Exception:  # a damaged or locked store: no suggestions, as for no store
        return []


def complete_nodes(ctx: click.Context, param: click.Parameter, incomplete: str):
    """A node set's next name, for shell completion: the inventory's node names and ``all``
    (the inventory as the command would find it: --inventory typed before, PICLUSTER_INVENTORY,
    ./picluster.toml).  After a comma, the names go on from it: ``node01,no`` -> ``node01,node02``."""
    from click.shell_completion import CompletionItem

    head, _, tail = incomplete.rpartition(",")
    head = f"{head}," if head or incomplete.startswith(",") else ""
    names = [*inventory_nodes(ctx), "all"] if not head else inventory_nodes(ctx)
    return [CompletionItem(head + name) for name in names if name.startswith(tail)]


def inventory_nodes(ctx: click.Context) -> list[str]:
    """The node names of the inventory a command would read, [] when there is none or it is bad."""
    import os

    given = ctx.params.get("inventory") or os.environ.get("PICLUSTER_INVENTORY") or (INVENTORY_HERE if INVENTORY_HERE.is_file() else None)
    if given is None:
        return []
    if hasattr(given, "nodes"):  # parsed already
        return [node.name for node in given.nodes]
    try:
        from picluster.model.inventory import load_inventory

        return [node.name for node in load_inventory(Path(given)).nodes]
    except Exception:  # an inventory with a mistake: no suggestions; the command itself will say what is wrong
        return []


# -- how much a command says: -q, -v, --debug (picluster/util/verbosity.py) ----------------------

_VERBOSITY_KEY = "picluster.verbosity"


def _set_verbosity(ctx: click.Context, param: click.Parameter, value) -> None:
    """Each of -q, -v, --debug sets the process's level as it is parsed (they are eager, so the
    level holds before any other option's callback prints a note).  Typed on the group and on the
    command (`picluster -v jobs -v`), they agree or are refused: -q with -v or --debug is."""
    from picluster.util import verbosity

    if ctx.resilient_parsing or not value:
        return
    if param.name == "quiet":
        flag, level = "-q", verbosity.QUIET
    elif param.name == "debug":
        flag, level = "--debug", verbosity.DEBUG
    else:
        flag, level = ("-v", verbosity.VERBOSE) if value == 1 else ("-vv", verbosity.DEBUG)
    before = ctx.meta.get(_VERBOSITY_KEY)  # shared by the group's context and its command's
    if before is not None:
        said, was = before
        if (was == verbosity.QUIET) != (level == verbosity.QUIET):
            raise click.UsageError(f"{said} and {flag} contradict each other: give -q (errors and the result only) or -v/--debug (more)", ctx)
        level = max(level, was)
        flag = said if was >= level else flag
    ctx.meta[_VERBOSITY_KEY] = (flag, level)
    verbosity.set_level(level)


def verbosity_options() -> list[click.Parameter]:
    """-v/--verbose, --debug and -q/--quiet, one set for each command and group (cli/group.py
    gives them to every one), so they work where they are typed: `picluster -v jobs`, `picluster jobs -v`."""
    def make(decls: list[str], help: str, **kind) -> Option:
        return Option(decls, expose_value=False, is_eager=True, callback=_set_verbosity, help=help, **kind)

    return [
        make(["-v", "--verbose"], "Show every command run: over SSH on the nodes, Slurm's, the lab's and provisioning's tools (-vv: --debug).", count=True),
        make(["--debug"], "As -v, with each command's exit status and time, the libraries' logging, and an error's traceback.", is_flag=True),
        make(["-q", "--quiet"], "Only errors and the result: no progress lines or notes.", is_flag=True),
    ]
