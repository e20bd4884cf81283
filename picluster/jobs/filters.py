"""Which jobs ``jobs`` lists and ``cancel`` stops: ``--state``, ``--user``, ``--name``, ``--since``,
as squeue and sacct take them.

States are Slurm's names (picluster's own records use five of them), given in either of
squeue's forms, case-insensitively: ``running`` or ``R``, ``PENDING`` or ``pd``.  A name is a
shell pattern (``har*``).  ``--since`` keeps the jobs that were queued or ran at some moment
since then (sacct's ``--starttime``): ended since, or not ended.  Every value given is checked
here, once, and a wrong one is one line naming the values that would do.
"""

import re
import time
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from fnmatch import fnmatchcase

from picluster.util.errors import UsageError

# squeue's JOB STATE CODES (Slurm 22.05): the long name, and its compact form.
STATES = {
    "BOOT_FAIL": "BF", "CANCELLED": "CA", "COMPLETED": "CD", "CONFIGURING": "CF", "COMPLETING": "CG",
    "DEADLINE": "DL", "FAILED": "F", "NODE_FAIL": "NF", "OUT_OF_MEMORY": "OOM", "PENDING": "PD",
    "PREEMPTED": "PR", "RUNNING": "R", "RESV_DEL_HOLD": "RD", "REQUEUE_FED": "RF", "REQUEUE_HOLD": "RH",
    "REQUEUED": "RQ", "RESIZING": "RS", "REVOKED": "RV", "SIGNALING": "SI", "SPECIAL_EXIT": "SE",
    "STAGE_OUT": "SO", "STOPPED": "ST", "SUSPENDED": "S", "TIMEOUT": "TO",
}
_BY_CODE = {code: name for name, code in STATES.items()}
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}
_AGO = re.compile(r"(?:now-)?(\d{1,6})\s?(s|sec|secs|seconds?|m|min|mins|minutes?|h|hours?|d|days?|w|weeks?)", re.ASCII)


@dataclass(frozen=True)
class Filter:
    """What a job must be to be taken; an empty filter takes every job."""

    states: frozenset[str] = frozenset()
    users: frozenset[str] = frozenset()
    names: tuple[str, ...] = ()
    since: float | None = None  # seconds since the epoch

    def __bool__(self) -> bool:
        return bool(self.states or self.users or self.names or self.since is not None)

    def takes(self, state: str, user: str, name: str, ended: float | None) -> bool:
        if self.states and state not in self.states:
            return False
        if self.users and user not in self.users:
            return False
        if self.names and not any(fnmatchcase(name, pattern) for pattern in self.names):
            return False
        return self.since is None or ended is None or ended >= self.since

    def describe(self) -> str:
        """The filter in words, for "no job ..." lines: ``state RUNNING, user alice``."""
        said = []
        if self.states:
            said.append("state " + ",".join(sorted(self.states)))
        if self.users:
            said.append("user " + ",".join(sorted(self.users)))
        if self.names:
            said.append("name " + ",".join(self.names))
        if self.since is not None:
            said.append("since " + time.strftime("%Y-%m-%dT%H:%M:%S", time.localtime(self.since)))
        return ", ".join(said)


def chosen(states: Iterable[str] = (), users: Iterable[str] = (), names: Iterable[str] = (), since: str | None = None,
           now: float | None = None) -> Filter:
    """The filter the options ask for; each value checked (a usage error names the wrong one)."""
    return Filter(frozenset(state_names(states)), frozenset(_users(users)), tuple(_names(names)),
                  None if since is None else since_moment(since, now))


def state_names(values: Iterable[str]) -> list[str]:
    """``running,PD`` and ``R`` -> the long names; several values or comma-separated lists, any case."""
    found = []
    for value in values:
        for word in value.split(","):
            key = word.strip().upper()
            name = key if key in STATES else _BY_CODE.get(key)
            if name is None:
                raise UsageError(f"--state {word.strip() or repr(word)}: not a job state; give one of "
                                 f"{', '.join(_COMMON)} (or squeue's forms: R, PD, CD, F, CA, TO...), several comma-separated")
            found.append(name)
    return found


_COMMON = ("PENDING", "RUNNING", "COMPLETED", "FAILED", "CANCELLED", "TIMEOUT")


def _users(values: Iterable[str]) -> list[str]:
    found = []
    for value in values:
        for word in value.split(","):
            word = word.strip()
            # POSIX account names (and Slurm's): no spaces, no control characters, not empty.
            if not word or not re.fullmatch(r"[A-Za-z0-9._][A-Za-z0-9._@-]{0,63}\$?", word):
                raise UsageError(f"--user {word!r}: not a user name (letters, digits, '.', '_', '-'; several comma-separated)")
            found.append(word)
    return found


def _names(values: Iterable[str]) -> list[str]:
    found = []
    for value in values:
        if not value or any(ord(c) < 32 for c in value):
            raise UsageError(f"--name {value!r}: give a job's name, or a pattern such as 'har*'")
        found.append(value)
    return found


def since_moment(text: str, now: float | None = None) -> float:
    """``2h``, ``30m``, ``3d``, ``1w`` (or sacct's ``now-2hours``) ago, or an ISO 8601 date or
    time (``2026-12-01``, ``2026-12-01T14:00``, this machine's zone unless it gives its own)."""
    now = time.time() if now is None else now
    ago = _AGO.fullmatch(text.strip().lower())
    if ago:
        return now - int(ago.group(1)) * _UNITS[ago.group(2)[0]]
    try:
        return datetime.fromisoformat(text.strip()).timestamp()  # a naive one is this machine's local time
    except (ValueError, OverflowError, OSError):
        raise UsageError(f"--since {text!r}: give a time ago (30m, 2h, 3d, 1w) or a date or time in ISO 8601 "
                         "(2026-12-01, 2026-12-01T14:00)") from None
