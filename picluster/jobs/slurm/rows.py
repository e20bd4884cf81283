"""A job as Slurm's queue and its accounting show it: squeue's and sacct's lines in the forms
picluster asks for, read back as untrusted text.

A job id must be digits; fields are split into at most the columns asked for (a job's name, last,
may hold anything, '|' included); times come as seconds since the epoch (SLURM_TIME_FORMAT=%s),
so no time zone is guessed; a value that is not what Slurm writes is read as unknown (None).
The formats were recorded from Slurm 22.05.8 (Debian 12's): tests/test_slurm_rows.py.
"""

import re
from dataclasses import dataclass

# squeue's fields, the name last so that a '|' in it cannot shift the others: id, user, state,
# reason, nodes, node list, time used, limit, submitted, started, ended (or expected to), batch host.
FORMAT = "%i|%u|%T|%r|%D|%N|%M|%l|%V|%S|%e|%B|%j"
# Times as seconds since the epoch (strftime's %s): no time zone to guess, the controller's or ours.
EPOCH = "SLURM_TIME_FORMAT=%s"
ENDED = {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "PREEMPTED", "OUT_OF_MEMORY", "BOOT_FAIL", "DEADLINE"}
ID = re.compile(r"\d{1,12}")
# sacct's fields in squeue's order, the name last; its states read "CANCELLED by 1000".
SACCT = "JobID,User,State,NNodes,NodeList,Elapsed,Timelimit,Submit,Start,End,ExitCode,JobName"
_HOST = re.compile(r"[A-Za-z0-9][A-Za-z0-9.-]{0,62}")  # a batch host's name; squeue writes "n/a" for none


@dataclass(frozen=True)
class SlurmJob:
    """One job as squeue shows it (ended jobs stay for slurm.conf's MinJobAge, 10 minutes)."""

    id: str
    user: str
    state: str  # PENDING, RUNNING, COMPLETED, TIMEOUT, CANCELLED, ...
    reason: str  # "Resources", "Priority", "None"
    nodes: int
    nodelist: str
    used: str  # squeue's TIME
    limit: str  # squeue's TIME_LIMIT
    name: str
    submitted: float | None = None  # seconds since the epoch
    started: float | None = None  # None while pending
    ended: float | None = None  # None while active
    batch_host: str = ""  # the node that runs (ran) the batch script
    exit_code: int | None = None  # the batch script's (128 + N when signal N ended it); known from sacct only

    @property
    def ref(self) -> str:
        return f"slurm:{self.id}"

    @property
    def elapsed_s(self) -> int | None:
        return duration_s(self.used)

    @property
    def limit_s(self) -> int | None:
        return duration_s(self.limit)

    @property
    def active(self) -> bool:
        return self.state not in ENDED


def parse(text: str) -> list[SlurmJob]:
    """squeue's lines in FORMAT (SLURM_TIME_FORMAT=%s); a line that is not one is left out."""
    rows = []
    for line in text.splitlines():
        parts = line.split("|", 12)
        if len(parts) != 13 or not ID.fullmatch(parts[0]) or not parts[4].isdigit():
            continue
        jid, user, state, reason, nodes, nodelist, used, limit, submitted, started, ended, host, name = parts
        rows.append(SlurmJob(jid, user, state, reason, int(nodes), nodelist, used, limit, name, moment(submitted),
                             None if state == "PENDING" else moment(started), None if state not in ENDED else moment(ended),
                             host if _HOST.fullmatch(host) and host != "n/a" else ""))
    return rows


def parse_sacct(text: str) -> list[SlurmJob]:
    """sacct's lines in SACCT (--parsable2, SLURM_TIME_FORMAT=%s); its states read "CANCELLED by 1000"."""
    rows = []
    for line in text.splitlines():
        parts = line.split("|", 11)
        if len(parts) != 12 or not ID.fullmatch(parts[0]) or not parts[3].isdigit():
            continue
        jid, user, state, nodes, nodelist, used, limit, submitted, started, ended, code, name = parts
        state = state.split(" ", 1)[0]
        active = state not in ENDED
        rows.append(SlurmJob(jid, user, state, "None", int(nodes), nodelist, used, limit, name, moment(submitted),
                             None if state == "PENDING" else moment(started), None if active else moment(ended),
                             exit_code=None if active else exit_code(code)))
    return rows


def moment(text: str) -> float | None:
    """A time Slurm printed as %s; "Unknown", "N/A", "None" (no such time yet) are None."""
    return float(text) if text.isdigit() and len(text) <= 12 else None


def duration_s(text: str) -> int | None:
    """squeue's and sacct's durations (``0:05``, ``1:02:03``, ``00:01:00``, ``2-03:04:05``) in
    seconds; None for ``UNLIMITED`` and anything else that is not one."""
    m = _DURATION.fullmatch(text)
    if m is None:
        return None
    days, first, second, third = m.groups()
    hours, minutes, seconds = (int(first), int(second), int(third)) if third is not None else (0, int(first), int(second))
    return int(days or 0) * 86400 + hours * 3600 + minutes * 60 + seconds


_DURATION = re.compile(r"(?:(\d{1,4})-)?(\d{1,6}):(\d{2})(?::(\d{2}))?")


def exit_code(text: str) -> int | None:
    """sacct's ExitCode ``code:signal`` as a shell reports it: the code, or 128 + the signal."""
    m = re.fullmatch(r"(\d{1,3}):(\d{1,3})", text)
    if m is None:
        return None
    code, signal = int(m.group(1)), int(m.group(2))
    return 128 + signal if signal and not code else code




def scontrol_exit(text: str, job: SlurmJob) -> int | None:
    """The job's ExitCode in ``scontrol -o show job``'s line, as a shell reports it.  Read after
    the job's name, which squeue gave whole: a name holding "ExitCode=" cannot pass for the field."""
    head = f"JobId={job.id} JobName={job.name} "
    for line in text.splitlines():
        if line.startswith(head):
            m = re.search(r"(?:^|\s)ExitCode=(\d{1,3}:\d{1,3})(?:\s|$)", line[len(head):])
            return exit_code(m.group(1)) if m else None
    return None


def stdout_path(text: str) -> str | None:
    """Where ``scontrol -o show job`` says the job writes its output: the last StdOut field (the
    fields before it, a job's name or folder, may hold anything); a path with spaces is not read."""
    found = re.findall(r"(?:^|\s)StdOut=(/\S+)", text)
    return found[-1] if found else None
