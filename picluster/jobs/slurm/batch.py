"""What ``picluster submit`` asks Slurm for, checked before anything connects, and the batch script:
picluster's own around a command, or the user's job script (script.py) with sbatch's options.

Every value is checked here against what Slurm accepts, so that a request Slurm would refuse is
one line and exit 2 with nothing queued; the command is quoted word by word, and the script
travels to the controller base64-encoded, so no value of the request ever reaches a shell as code.
"""

import os
import re
import shlex
from dataclasses import dataclass

from picluster.cluster.allocation import PS_ENV, SHARE_ENV, START_ENV
from picluster.jobs.slurm import origin as origins
from picluster.jobs.slurm.options import JobScript
from picluster.model import nodegroups, nodeset, tokens
from picluster.model.inventory import Inventory
from picluster.util.errors import UsageError

OUTPUT = "picluster-slurm-%j.out"  # in the job's working directory: the user's home on the batch node


def output_file(inv: Inventory) -> str:
    """Where a job queued through picluster writes its output.  With [users]: the submitter's work
    folder on the share (%u, their name), which every node mounts and no one else may read, so
    'picluster logs' on the controller finds it without logging in to the batch node.  Else the
    job's working directory, the user's home on the batch node."""
    return f"{inv.data_dir}/users/%u/{OUTPUT}" if inv.users else OUTPUT


@dataclass(frozen=True)
class Request:
    command: tuple[str, ...]
    nodes: int
    ps: int
    name: str
    time: str | None = None
    mem: str | None = None
    nodelist: tuple[str, ...] = ()
    cpus: int | None = None  # CPUs per node; None: whole nodes (--exclusive)
    job_script: JobScript | None = None  # a job script, instead of a command
    given_nodes: bool = False  # --nodes was given (a script's own count stands otherwise)
    exclude: tuple[str, ...] = ()  # nodes Slurm must not give the job (sbatch -x)
    chdir: str | None = None  # the folder a command runs in, when not where sbatch starts (origin.py)
    start_timeout: str | None = None  # START_ENV from the submitting session, carried to the job over SSH too
    said: tuple[str, ...] = ()  # what submit says of the request once it is queued: each translation, the folder


def seconds(value: str) -> int:
    return tokens.slurm_seconds(value, "--time")


def megabytes(value: str) -> int:
    return tokens.slurm_megabytes(value, "--mem")


@dataclass(frozen=True)
class Asked:
    """submit's options as given (None: not given), before check reads them against the inventory.
    ``nodelist`` and each of ``exclude`` are node sets (ClusterShell's, with the inventory's groups)."""

    nodes: int | None = None
    ps: int | None = None
    time: str | None = None
    mem: str | None = None
    nodelist: str | None = None
    name: str | None = None
    cpus: int | None = None
    exclude: tuple[str, ...] = ()


def check(inv: Inventory, command: tuple[str, ...], asked: Asked, job_script: JobScript | None = None,
          origin: origins.Origin | None = None) -> Request:
    """The request, or UsageError for the first thing Slurm (or the inventory) would refuse.
    asked's node sets reach Slurm as the names of their nodes."""
    nodes, ps, time, mem, nodelist, name, exclude = asked.nodes, asked.ps, asked.time, asked.mem, asked.nodelist, asked.name, asked.exclude
    if inv.slurm is None:
        raise UsageError(f"inventory {inv.source or inv.name} has no [slurm] table: add one and run 'picluster provision' (see docs/slurm.md)")
    if not command and job_script is None:
        raise UsageError("give the command after '--', e.g. picluster submit -- picluster run montecarlo --samples 1e8")
    if any("\0" in word for word in command):
        raise UsageError("the command holds a NUL character")
    names = [n.name for n in inv.nodes]
    chosen: tuple[str, ...] = ()
    if nodelist is not None:
        try:
            chosen = tuple(nodegroups.select(inv, nodelist, exclude))
        except UsageError as exc:
            raise UsageError(f"--nodelist: {exc}") from None
    left_out = nodegroups.excluded(inv, exclude)
    left = [n for n in names if n not in left_out]  # what -x leaves Slurm
    if not left:
        raise UsageError(f"-x {','.join(exclude)} leaves no node for the job")
    count = nodes if nodes is not None else (len(chosen) or 1)
    if count > len(names):
        raise UsageError(f"--nodes {count} is more than the {len(names)} nodes of the inventory")
    if count > len(left):
        raise UsageError(f"--nodes {count} is more than the {len(left)} nodes -x leaves ({nodeset.fold(left)})")
    if chosen and len(chosen) > count:
        raise UsageError(f"--nodelist names {len(chosen)} nodes but --nodes is {count}")
    if ps is not None and ps > count:
        raise UsageError(f"--ps {ps} is more than the job's {count} node(s)")
    if time is not None:
        limit = tokens.slurm_seconds(inv.slurm.max_time, "slurm.max_time")
        if seconds(time) > limit:
            raise UsageError(f"--time {time} is over the cluster's longest, {inv.slurm.max_time} (slurm.max_time): "
                             "Slurm would hold the job forever; ask for less")
    if mem is not None:
        megabytes(mem)
    if name is not None:
        job_name = tokens.label(name, "--name")
    elif job_script is not None:
        job_name = job_script.sbatch.get("job-name") or _script_name(job_script)
    else:
        job_name = _default_name(command)
    wait = os.environ.get(START_ENV) or None
    if wait is not None and (not wait.isdigit() or not 1 <= int(wait) <= 86400):
        raise UsageError(f"{START_ENV}={tokens.show(wait)}: give the seconds the job's servers may take to start (1 to 86400)")
    chdir, said = None, list(job_script.said) if job_script is not None else []
    folder = origins.default(inv, origin, sge=False) if origin is not None and job_script is None else None
    if folder is not None and folder.path is not None:
        chdir = folder.path
        said.append(f"the job runs in {folder.path} ({folder.why})")
    return Request(tuple(command), count, ps if ps is not None else -1, job_name, time, mem, chosen, asked.cpus, job_script,
                   nodes is not None, tuple(n for n in names if n in left_out), chdir=chdir, start_timeout=wait, said=tuple(said))


def _script_name(job: JobScript) -> str:
    """A script's own -N, else its file name (sbatch reading stdin would call it "sbatch")."""
    for option in job.options:
        if option.startswith("--job-name="):
            return option.split("=", 1)[1]
    stem = job.name.rsplit("/", 1)[-1].rsplit(".", 1)[0]
    return re.sub(r"[^A-Za-z0-9-]+", "-", stem).strip("-")[:63] or "job"


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
    """The batch script: its #SBATCH lines, the job's environment for picluster, the command; or
    the user's job script as it is (its options go on sbatch's command line: sbatch_args)."""
    assert inv.slurm is not None
    if req.job_script is not None:
        return req.job_script.text
    lines = ["#!/bin/sh",
             f"#SBATCH --job-name={req.name}",
             f"#SBATCH --partition={inv.slurm.partition}",
             f"#SBATCH --nodes={req.nodes}",
             *_cpus_lines(req),
             f"#SBATCH --output={output_file(inv)}"]
    if req.chdir is not None:
        lines.append(f"#SBATCH --chdir={req.chdir}")
    if req.time is not None:
        lines.append(f"#SBATCH --time={req.time}")
    if req.mem is not None:
        lines.append(f"#SBATCH --mem={req.mem}")
    if req.nodelist:
        lines.append(f"#SBATCH --nodelist={','.join(req.nodelist)}")
    if req.exclude:
        lines.append(f"#SBATCH --exclude={','.join(req.exclude)}")
    # The nodes' picluster first on PATH, so `picluster ...` is the one provisioning installed.
    venv = inv.venv if inv.venv.startswith("/") else f"$HOME/{inv.venv.removeprefix('~/')}"
    venv_bin = f'"{venv}/bin"'  # inventory.venv holds no shell metacharacters (tokens.node_path)
    lines += [f"export {SHARE_ENV}={shlex.quote(str(inv.data_dir))}"]
    if req.ps >= 0:
        lines.append(f"export {PS_ENV}={req.ps}")
    if req.start_timeout is not None:
        lines.append(f"export {START_ENV}={req.start_timeout}")
    lines += [f"PATH={venv_bin}:$PATH; export PATH",
              f"exec {shlex.join(req.command)}", ""]
    return "\n".join(lines)


def _cpus_lines(req: Request) -> list[str]:
    if req.cpus is None:
        # Whole nodes: the job's servers and clients use every core of them.
        return ["#SBATCH --exclusive"]
    # One task per node with its CPUs: the rest of each node stays free for other jobs.
    return ["#SBATCH --ntasks-per-node=1", f"#SBATCH --cpus-per-task={req.cpus}"]


def sbatch_args(inv: Inventory, req: Request) -> str:
    """sbatch's command-line options for a job script, as shell words (they win over the script's
    own lines, as in sbatch), or "" for picluster's own script, which carries its options."""
    assert inv.slurm is not None
    job = req.job_script
    if job is None:
        return ""
    given = []
    if req.given_nodes:
        given.append(f"--nodes={req.nodes}")
    if req.nodelist:
        given.append(f"--nodelist={','.join(req.nodelist)}")
    if req.exclude:
        given.append(f"--exclude={','.join(req.exclude)}")
    if req.time is not None:
        given.append(f"--time={req.time}")
    if req.mem is not None:
        given.append(f"--mem={req.mem}")
    if req.cpus is not None:
        given.append(f"--cpus-per-task={req.cpus}")
    options = [o for o in job.options if not o.startswith("--job-name=")] + given + [f"--job-name={req.name}"]
    if not job.has("partition"):
        options.append(f"--partition={inv.slurm.partition}")
    if not job.has("output"):
        options.append(f"--output={output_file(inv)}")
    words = [shlex.quote(o) for o in options]
    own = job.sbatch.get("export")
    if own is None or own.startswith("ALL"):
        # The job's environment for picluster: its virtualenv first on PATH (as the controller's
        # shell sees $HOME and $PATH), the share, and the script's own -v pairs.
        pairs = [*(own.split(",")[1:] if own else []), *job.exports, f"{SHARE_ENV}={inv.data_dir}"]
        if req.ps >= 0:
            pairs.append(f"{PS_ENV}={req.ps}")
        if req.start_timeout is not None:
            pairs.append(f"{START_ENV}={req.start_timeout}")
        venv = inv.venv if inv.venv.startswith("/") else f"$HOME/{inv.venv.removeprefix('~/')}"
        words.append(shlex.quote("--export=ALL," + ",".join(pairs) + ",") + f'"PATH={venv}/bin:$PATH"')
    return " ".join(words)
