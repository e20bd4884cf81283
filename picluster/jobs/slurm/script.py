"""A job script as users bring it: its ``#SBATCH`` lines checked (options.py), its Sun Grid
Engine ``#$`` lines translated into sbatch's options (sge.py), each translation said, the folder
it runs in chosen where its nodes see it (origin.py), and anything Slurm here cannot honour said
or refused.

The script itself travels unchanged but for SGE's -S, which names its interpreter as SGE runs it
(the first line): Slurm reads its ``#SBATCH`` lines, the ``#$`` lines stay comments, and the
translations go on sbatch's command line, which wins over the script's own lines (as in sbatch).
Like sbatch, only the comment block at the top is read: a directive after the first command is
refused rather than silently ignored.  Every check here runs before anything connects, so a
refused script queues nothing.
"""

import re
import shlex

from picluster.jobs.slurm import origin as origins
from picluster.jobs.slurm import sge
from picluster.jobs.slurm.options import JobScript, sbatch_line
from picluster.model import tokens
from picluster.model.inventory import Inventory
from picluster.util.errors import UsageError

MAX_BYTES = 1024 * 1024  # sbatch's own limit on a script is 4 MB; a job script is kilobytes
_SOURCE = re.compile(r"^\s*source\s+(\S.*)$")  # bash's, not POSIX sh's (dash: "source: not found")

__all__ = ["MAX_BYTES", "JobScript", "read"]


def read(inv: Inventory, name: str, data: bytes, origin: origins.Origin) -> JobScript:
    """The script checked and translated, or UsageError naming the line (nothing is queued)."""
    if len(data) > MAX_BYTES:
        raise UsageError(f"{name}: {len(data)} bytes; a job script is at most {MAX_BYTES} bytes")
    try:
        text = data.decode()
    except UnicodeDecodeError:
        raise UsageError(f"{name}: not a text file (not UTF-8): give a shell script") from None
    if "\0" in text:
        raise UsageError(f"{name}: holds a NUL character: give a shell script")
    job = JobScript(name, text)
    lines = text.splitlines()
    shell = None  # SGE's -S
    body_started = False
    sge_lines = False
    for number, line in enumerate(lines, 1):
        stripped = line.strip()
        where = f"{name}:{number}"
        if number == 1 and line.startswith("#!"):
            continue
        kind = "#SBATCH" if line.startswith("#SBATCH") else "#$" if line.startswith("#$") else None
        if kind is None:
            if stripped and not stripped.startswith("#"):
                body_started = True
            continue
        if body_started:
            raise UsageError(f"{where}: {kind} after the first command: Slurm reads directives only above it; move the line up")
        rest = line[len(kind):]
        if rest and not rest[0].isspace():
            raise UsageError(f"{where}: {tokens.show(line[:40])}: a directive is {kind} then a space then options")
        try:
            words = shlex.split(rest, comments=True)
        except ValueError as exc:
            raise UsageError(f"{where}: {exc} in {tokens.show(line.strip()[:60])}") from None
        if kind == "#SBATCH":
            sbatch_line(inv, job, where, words)
        else:
            sge_lines = True
            shell = sge.line(inv, job, where, words, origin) or shell
    _interpreter(job, lines, shell)
    _folder(inv, job, origin, sge_lines)
    _array_limit(job)
    _mail(inv, job)
    _sources(job, lines)
    return job


def _interpreter(job: JobScript, lines: list[str], shell: str | None) -> None:
    """The #! line Slurm runs the script with: SGE's -S names it, as SGE runs a script with it."""
    first = lines[0] if lines else ""
    if not first.startswith("#!"):
        if shell is None:
            raise UsageError(f"{job.name}:1: no #! line: Slurm runs a script with the interpreter its first line names, "
                             "e.g. #!/bin/bash (SGE took its -S or the queue's shell)")
        job.text = f"#!{shell}\n{job.text}"
        job.said.append(f"{job.name}: #$ -S {shell} -> first line #!{shell} (Slurm takes the interpreter from it)")
    elif shell is not None and first[2:].strip().split()[:1] != [shell]:
        job.text = f"#!{shell}\n" + job.text.split("\n", 1)[1] if "\n" in job.text else f"#!{shell}\n"
        job.said.append(f"{job.name}: #$ -S {shell} -> first line #!{shell}, in place of {first.strip()} "
                        "(SGE runs the script with -S's shell; Slurm with the first line's)")
    elif shell is not None:
        job.said.append(f"{job.name}: #$ -S {shell} -> nothing: the first line names it already")


def _folder(inv: Inventory, job: JobScript, origin: origins.Origin, sge_lines: bool) -> None:
    """Where a script that names no folder runs, when sbatch alone would start it where its nodes
    have no such folder (or, for an SGE script, elsewhere than SGE would)."""
    if job.placed or job.has("chdir"):
        return
    folder = origins.default(inv, origin, sge_lines)
    if folder is not None and folder.path is not None:
        job.options += folder.option
        job.said.append(f"{job.name}: runs in {folder.path} ({folder.why})")


def _array_limit(job: JobScript) -> None:
    """SGE's -tc: sbatch's %N after the array's indices."""
    if job.array_limit is None:
        return
    arrays = [i for i, o in enumerate(job.options) if o.startswith("--array=")]
    if not arrays:
        job.said.append(f"{job.name}: #$ -tc {job.array_limit} -> nothing: the script is no array job (-t)")
        return
    job.options[arrays[-1]] += f"%{job.array_limit}"


def _mail(inv: Inventory, job: JobScript) -> None:
    """One line: whether the mail the script asks for will come.  The job runs either way."""
    if not (job.mail or job.has("mail-type") or job.has("mail-user")):
        return
    assert inv.slurm is not None
    if inv.slurm.mail_prog:
        job.said.append(f"{job.name}: mail: sent through {inv.slurm.mail_prog} on {inv.slurm.controller} ([slurm] mail_prog)")
    else:
        job.said.append(f"{job.name}: mail: none will come: the cluster sends no mail ([slurm] has no mail_prog); "
                        "the job runs all the same: follow it with 'picluster jobs'")


def _sources(job: JobScript, lines: list[str]) -> None:
    """`source FILE` under /bin/sh: Debian's sh (dash) has no `source`, only `.`; bash has both."""
    program = job.text.split("\n", 1)[0][2:].strip().split()[:1]  # the #! line Slurm will read
    interpreter = program[0].rsplit("/", 1)[-1] if program else ""
    if interpreter not in ("sh", "dash"):
        return
    for number, line in enumerate(lines, 1):
        m = _SOURCE.match(line)
        if m:
            job.said.append(f"{job.name}:{number}: source {m.group(1)} -> fails under {program[0]} (Debian's sh, dash, has no "
                            f"'source'): write '. {m.group(1)}', or make the first line #!/bin/bash")
