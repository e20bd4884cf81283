"""How much a command says on stderr, the same for every command (-q, -v, --debug), through
Python's logging: one logger hierarchy, ``picluster.*``.

- ``-q`` (QUIET): errors and the command's result only; progress lines and notes are dropped.
- the default (NORMAL): progress lines and notes, as each command prints them.
- ``-v`` (VERBOSE): every command picluster runs, logged where it runs: over SSH on a node
  (``[node01] sudo: systemctl ...``, Fabric's own form), Slurm's, the lab's system tools,
  provisioning's and the wheelhouse's ``pip``, each on its own line on stderr.
- ``--debug`` (``-vv``): that, with each command's exit status and time, the other libraries'
  logging (paramiko, Fabric, Invoke...), and an error's traceback above its one line.

The level lives in this process; the CLI sets it once per command (cli/options.py).  A library
use of picluster (no CLI) is NORMAL and logs nothing: no handler is installed until it is set.
"""

import logging
import shlex
import sys
import time
from collections.abc import Sequence
from typing import TextIO

QUIET, NORMAL, VERBOSE, DEBUG = -1, 0, 1, 2
NAMES = {QUIET: "-q", VERBOSE: "-v", DEBUG: "--debug"}
ROOT = "picluster"

_level = NORMAL
_handler: logging.Handler | None = None


class _Stderr(logging.Handler):
    """stderr as it is when a line is written, not when the handler was made: a live panel
    (rich's Live) swaps sys.stderr for a proxy that prints above it, and tests capture it."""

    def emit(self, record: logging.LogRecord) -> None:
        try:
            stream = sys.stderr
            stream.write(self.format(record) + "\n")
            stream.flush()
        except Exception:
            self.handleError(record)


class _Format(logging.Formatter):
    """``-v``: the line as logged.  ``--debug``: its time and logger first.  A warning or error of
    a logger's (a library's at --debug) is marked as one."""

    def __init__(self, debug: bool) -> None:
        super().__init__("%(asctime)s.%(msecs)03d %(name)s: %(message)s" if debug else "%(message)s", datefmt="%H:%M:%S")

    def format(self, record: logging.LogRecord) -> str:
        text = super().format(record)
        if record.levelno >= logging.WARNING and not record.name.startswith(ROOT):
            return f"{record.levelname.lower()}: {text}"
        return text


def set_level(level: int) -> None:
    """Set this process's level and its logging to match (called again: the newest wins)."""
    global _level, _handler
    _level = level
    ours, root = logging.getLogger(ROOT), logging.getLogger()
    if _handler is not None:
        ours.removeHandler(_handler)
        root.removeHandler(_handler)
        _handler = None
    if level < VERBOSE:
        ours.setLevel(logging.ERROR if level == QUIET else logging.WARNING)
        ours.propagate = True
        return
    _handler = _Stderr()
    _handler.setFormatter(_Format(level >= DEBUG))
    if level >= DEBUG:
        # Everyone's logging through one handler: picluster's records propagate to the root's.
        root.addHandler(_handler)
        root.setLevel(logging.DEBUG)
        # Invoke's DEBUG is every config file it looked for and the merged config, twice a connection.
        logging.getLogger("invoke").setLevel(logging.INFO)
        ours.setLevel(logging.DEBUG)
        ours.propagate = True
    else:
        ours.addHandler(_handler)
        ours.setLevel(logging.INFO)
        ours.propagate = False  # libraries stay silent at -v: their WARNINGs are Python's last-resort's as before


def level() -> int:
    return _level


def quiet() -> bool:
    """-q: progress lines and notes are not printed."""
    return _level <= QUIET


def verbose() -> bool:
    """-v or --debug: the commands run are logged."""
    return _level >= VERBOSE


def debugging() -> bool:
    """--debug: libraries' logging and an error's traceback too."""
    return _level >= DEBUG


def say(line: str, stream: TextIO | None = None) -> None:
    """A progress line or a note on stderr (or ``stream``), flushed; nothing under -q."""
    if not quiet():
        print(line, file=stream or sys.stderr, flush=True)


def clip(text: str, limit: int = 1000) -> str:
    """A command line for the log: whole at --debug, else cut at ``limit`` characters (a batch script
    sent base64-encoded is kilobytes of letters nobody reads), saying how much was left out."""
    if debugging() or len(text) <= limit:
        return text
    return f"{text[:limit]}... ({len(text) - limit} more characters; --debug shows them)"


def command(logger: logging.Logger, where: str, what: str | Sequence[str], verb: str = "run") -> float:
    """Log (-v) a command about to run, as Fabric 1 echoed them: ``[node01] sudo: systemctl ...``,
    ``[local] run: ip netns add ...`` (``what``: a shell line, or words, shown quoted); the time
    it starts, for ``ended``."""
    if logger.isEnabledFor(logging.INFO):
        logger.info("[%s] %s: %s", where, verb, clip(what if isinstance(what, str) else shlex.join(what)))
    return time.monotonic()


def ended(logger: logging.Logger, where: str, started: float, exited: int | None, why: str = "") -> None:
    """Log (--debug) how a command ended: its exit status, its time, its last words when it failed."""
    if logger.isEnabledFor(logging.DEBUG):
        last = [line.strip() for line in why.splitlines() if line.strip()]
        said = f": {last[-1]}" if last and exited else ""
        logger.debug("[%s] exit %s in %.2f s%s", where, exited, time.monotonic() - started, said)
