"""What ``picluster submit`` asks Slurm for, checked before anything connects, and the batch script.

Every value is checked here against what Slurm accepts, so that a request Slurm would refuse is
one line and exit 2 with nothing queued; the command is quoted word by word, and the script
travels to the controller base64-encoded, so no value of the request ever reaches a shell as code.
"""

import re
import shlex
from dataclasses import dataclass

from picluster import nodeset, tokens
from picluster.cluster.allocation import PORT_ENV, PS_ENV, SHARE_ENV
from picluster.errors import UsageError
from picluster.inventory import Inventory

# sbatch --time: minutes, minutes:seconds, hours:minutes:seconds, days-hours,
# days-hours:minutes, days-hours:minutes:seconds (sbatch(1)).
_TIME = re.compile(r"(?:(\d{1,3})-(\d{1,2})(?::(\d{1,2})(?::(\d{1,2}))?)?|(\d{1,6})(?::(\d{1,2})(?::(\d{1,2}))?)?)", re.ASCII)
_MEM = re.compile(r"(\d{1,9})([KMGT]?)", re.ASCII)  # sbatch --mem: megabytes unless K, M, G or T follows
MAX_TIME_S = 365 * 24 * 3600
OUTPUT = "picluster-slurm-%j.out"  # in the job's working directory: the user's home on the batch node


@dataclass(frozen=True)
class Request:
    command: tuple[str, ...]
    nodes: int
    ps: int
    name: str
    time: str | None = None
    mem: str | None = None
    nodelist: tuple[str, ...] = ()


def seconds(value: str) -> int:
    """--time in seconds, or UsageError naming the forms Slurm takes."""
    m = _TIME.fullmatch(value)
    if m is None:
        raise UsageError(f"--time {tokens.show(value)}: use minutes, MM:SS, HH:MM:SS, D-HH, D-HH:MM or D-HH:MM:SS (as sbatch)")
    days, dh, dm, ds, mins, ms, ss = m.groups()
    if days is not None:
        total = int(days) * 86400 + int(dh) * 3600 + int(dm or 0) * 60 + int(ds or 0)
        parts = [int(dh), int(dm or 0), int(ds or 0)]
        limits = [23, 59, 59]
    elif ss is not None:  # HH:MM:SS
        total, parts, limits = int(mins) * 3600 + int(ms) * 60 + int(ss), [int(ms), int(ss)], [59, 59]
    else:  # minutes[:seconds]
        total, parts, limits = int(mins) * 60 + int(ms or 0), [int(ms or 0)], [59]
    if any(p > lim for p, lim in zip(parts, limits)):
        raise UsageError(f"--time {value}: hours go to 23, minutes and seconds to 59")
    if total <= 0:
        raise UsageError(f"--time {value}: give a limit above zero (without --time the partition's applies)")
    if total > MAX_TIME_S:
        raise UsageError(f"--time {value}: more than 365 days")
    return total


def megabytes(value: str) -> int:
    m = _MEM.fullmatch(value)
    if m is None:
        raise UsageError(f"--mem {tokens.show(value)}: give a whole number of megabytes, or with K, M, G or T (e.g. 512M, 2G)")
    number, unit = int(m.group(1)), m.group(2) or "M"
    mb = {"K": number / 1024, "M": number, "G": number * 1024, "T": number * 1024 * 1024}[unit]
    if mb < 1:
        raise UsageError(f"--mem {value}: at least 1 megabyte")
    return int(mb)


def check(inv: Inventory, command: tuple[str, ...], nodes: int | None, ps: int | None, time: str | None,
          mem: str | None, nodelist: str | None, name: str | None) -> Request:
    """The request, or UsageError for the first thing Slurm (or the inventory) would refuse."""
    if inv.slurm is None:
        raise UsageError(f"inventory {inv.source or inv.name} has no [slurm] table: add one and run 'picluster provision' (see docs/slurm.md)")
    if not command:
        raise UsageError("give the command after '--', e.g. picluster submit -- picluster run montecarlo --samples 1e8")
    if any("\0" in word for word in command):
        raise UsageError("the command holds a NUL character")
    names = [n.name for n in inv.nodes]
    chosen: tuple[str, ...] = ()
    if nodelist is not None:
        chosen = tuple(nodeset.expand(nodelist))
        unknown = [n for n in chosen if n not in names]
        if unknown:
            raise UsageError(f"--nodelist: {nodeset.fold(unknown)} not in the inventory (it has {nodeset.fold(names)})")
        if len(set(chosen)) != len(chosen):
            raise UsageError(f"--nodelist {nodelist} names a node twice")
    count = nodes if nodes is not None else (len(chosen) or 1)
    if count > len(names):
        raise UsageError(f"--nodes {count} is more than the {len(names)} nodes of the inventory")
    if chosen and len(chosen) > count:
        raise UsageError(f"--nodelist names {len(chosen)} nodes but --nodes is {count}")
    if ps is not None and ps > count:
        raise UsageError(f"--ps {ps} is more than the job's {count} node(s)")
    if time is not None:
        seconds(time)
    if mem is not None:
        megabytes(mem)
    job_name = tokens.label(name, "--name") if name is not None else _default_name(command)
    return Request(tuple(command), count, ps if ps is not None else -1, job_name, time, mem, chosen)


def _default_name(command: tuple[str, ...]) -> str:
    """The job's name in squeue: the picluster subcommand (run-montecarlo, train-har), else the program."""
    words = [w for w in command if not w.startswith("-")]
    if words and words[0].rsplit("/", 1)[-1] == "picluster" and len(words) >= 3:
        candidate = f"{words[1]}-{words[2]}"
    else:
        candidate = words[0].rsplit("/", 1)[-1] if words else "job"
    cleaned = re.sub(r"[^A-Za-z0-9-]+", "-", candidate).strip("-")[:63]
    return cleaned or "job"


def script(inv: Inventory, req: Request) -> str:
    """The batch script: its #SBATCH lines, the job's environment for picluster, the command."""
    assert inv.slurm is not None
    lines = ["#!/bin/sh",
             f"#SBATCH --job-name={req.name}",
             f"#SBATCH --partition={inv.slurm.partition}",
             f"#SBATCH --nodes={req.nodes}",
             # Whole nodes: a job's servers take every core, and their ports are the node's.
             "#SBATCH --exclusive",
             f"#SBATCH --output={OUTPUT}"]
    if req.time is not None:
        lines.append(f"#SBATCH --time={req.time}")
    if req.mem is not None:
        lines.append(f"#SBATCH --mem={req.mem}")
    if req.nodelist:
        lines.append(f"#SBATCH --nodelist={','.join(req.nodelist)}")
    # The nodes' picluster first on PATH, so `picluster ...` is the one provisioning installed.
    venv = inv.venv if inv.venv.startswith("/") else f"$HOME/{inv.venv.removeprefix('~/')}"
    venv_bin = f'"{venv}/bin"'  # inventory.venv holds no shell metacharacters (tokens.node_path)
    lines += [f"export {PORT_ENV}={inv.tf_port + 2}",
              f"export {SHARE_ENV}={shlex.quote(str(inv.data_dir))}"]
    if req.ps >= 0:
        lines.append(f"export {PS_ENV}={req.ps}")
    lines += [f"PATH={venv_bin}:$PATH; export PATH",
              f"exec {shlex.join(req.command)}", ""]
    return "\n".join(lines)
