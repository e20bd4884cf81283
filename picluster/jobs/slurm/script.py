"""A job script as users bring it: its ``#SBATCH`` lines, and its Sun Grid Engine ``#$`` lines
translated into sbatch's options, each translation said, anything Slurm here cannot honour refused.

The script itself travels unchanged: Slurm reads its ``#SBATCH`` lines, the ``#$`` lines stay
comments, and the translations go on sbatch's command line, which wins over the script's own
lines (as in sbatch).  Like sbatch, only the comment block at the top is read: a directive after
the first command is refused rather than silently ignored.  Every check here runs before anything
connects, so a refused script queues nothing.
"""

import math
import re
import shlex
from dataclasses import dataclass, field

from picluster.model import nodeset, tokens
from picluster.model.inventory import Inventory
from picluster.util.errors import UsageError

MAX_BYTES = 1024 * 1024  # sbatch's own limit on a script is 4 MB; a job script is kilobytes
SHELLS = ("sh", "bash", "dash", "ksh", "zsh", "csh", "tcsh")

# sbatch 22.05's options (sbatch(1)): long name -> whether it takes a value.  A #SBATCH line
# naming another is refused with its line number (sbatch would only say "unrecognized option").
_SBATCH_LONG = {
    "account": True, "acctg-freq": True, "array": True, "batch": True, "bb": True, "bbf": True, "begin": True,
    "chdir": True, "cluster-constraint": True, "clusters": True, "comment": True, "constraint": True,
    "container": True, "contiguous": False, "core-spec": True, "cores-per-socket": True, "cpu-freq": True,
    "cpus-per-gpu": True, "cpus-per-task": True, "deadline": True, "delay-boot": True, "dependency": True,
    "distribution": True, "error": True, "exclude": True, "exclusive": False, "export": True, "export-file": True,
    "extra-node-info": True, "get-user-env": False, "gid": True, "gpu-bind": True, "gpu-freq": True, "gpus": True,
    "gpus-per-node": True, "gpus-per-socket": True, "gpus-per-task": True, "gres": True, "gres-flags": True,
    "hint": True, "hold": False, "ignore-pbs": False, "input": True, "job-name": True, "kill-on-invalid-dep": True,
    "licenses": True, "mail-type": True, "mail-user": True, "mcs-label": True, "mem": True, "mem-bind": True,
    "mem-per-cpu": True, "mem-per-gpu": True, "mincpus": True, "network": True, "nice": True, "no-kill": False,
    "no-requeue": False, "nodefile": True, "nodelist": True, "nodes": True, "ntasks": True, "ntasks-per-core": True,
    "ntasks-per-gpu": True, "ntasks-per-node": True, "ntasks-per-socket": True, "open-mode": True, "output": True,
    "overcommit": False, "oversubscribe": False, "parsable": False, "partition": True, "power": True, "priority": True,
    "profile": True, "propagate": True, "qos": True, "quiet": False, "reboot": False, "requeue": False,
    "reservation": True, "signal": True, "sockets-per-node": True, "spread-job": False, "switches": True,
    "thread-spec": True, "threads-per-core": True, "time": True, "time-min": True, "tmp": True, "uid": True,
    "use-min-nodes": False, "verbose": False, "wait": False, "wait-all-nodes": True, "wckey": True, "wrap": True,
}
_SBATCH_SHORT = {
    "A": "account", "a": "array", "b": "begin", "D": "chdir", "M": "clusters", "C": "constraint", "S": "core-spec",
    "d": "dependency", "m": "distribution", "e": "error", "x": "exclude", "B": "extra-node-info", "G": "gpus",
    "H": "hold", "i": "input", "J": "job-name", "L": "licenses", "k": "no-kill", "F": "nodefile", "w": "nodelist",
    "N": "nodes", "n": "ntasks", "o": "output", "O": "overcommit", "s": "oversubscribe", "p": "partition",
    "q": "qos", "Q": "quiet", "t": "time", "v": "verbose", "W": "wait", "c": "cpus-per-task",
}
# SGE parallel environments by what they mean: threads on one node, or processes anywhere.
_THREADS_PE = {"smp", "threads", "openmp", "omp", "shared", "shm"}
_PROCESSES_PE = {"mpi", "orte", "mpich", "openmpi", "ompi"}
_SGE_VARIABLES = {"$JOB_ID": "%j", "$JOB_NAME": "%x", "$USER": "%u", "$TASK_ID": "%a", "$HOSTNAME": "%N"}
_SGE_MEM = re.compile(r"(\d+(?:\.\d+)?)([KkMmGg]?)", re.ASCII)  # K = 1024, k = 1000 (sge_types(1))
_SGE_TIME = re.compile(r"(?:(?:(\d+):)?(\d+):)?(\d+)", re.ASCII)  # [[hours:]minutes:]seconds
_ID = re.compile(r"\d{1,12}")


@dataclass
class JobScript:
    """A script's text, the sbatch options its directives became, and what each became (said)."""

    name: str  # the file, for messages
    text: str
    options: list[str] = field(default_factory=list)  # for sbatch's command line
    said: list[str] = field(default_factory=list)  # "job.sh:3: #$ -N tf -> --job-name=tf"
    sbatch: dict[str, str] = field(default_factory=dict)  # the script's own #SBATCH options, long name -> value
    exports: list[str] = field(default_factory=list)  # VAR=value for --export, beside picluster's own
    merged: bool = False  # SGE's -j y: stdout and stderr in one file

    def has(self, option: str) -> bool:
        """Whether the script asks for ``option`` (long name), in either kind of line."""
        return option in self.sbatch or any(o == f"--{option}" or o.startswith(f"--{option}=") for o in self.options)


def read(inv: Inventory, name: str, data: bytes, cwd: str) -> JobScript:
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
    shell = None  # SGE's -S, for a script without a #! line
    body_started = False
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
            _sbatch_line(inv, job, where, words)
        else:
            shell = _sge_line(inv, job, where, words, cwd) or shell
    if not lines or not lines[0].startswith("#!"):
        if shell is None:
            raise UsageError(f"{name}:1: no #! line: Slurm runs a script with the interpreter its first line names, "
                             "e.g. #!/bin/bash (SGE took its -S or the queue's shell)")
        job.text = f"#!{shell}\n{text}"
        job.said.append(f"{name}: #$ -S {shell} -> first line #!{shell} (Slurm takes the interpreter from it)")
    return job


def _sbatch_line(inv: Inventory, job: JobScript, where: str, words: list[str]) -> None:
    """Check the options of one #SBATCH line (Slurm reads the line itself)."""
    i = 0
    while i < len(words):
        word = words[i]
        if word.startswith("--"):
            long, eq, value = word[2:].partition("=")
            if long not in _SBATCH_LONG:
                raise UsageError(f"{where}: #SBATCH {word.split('=')[0]}: not an option of sbatch")
            if _SBATCH_LONG[long] and not eq:
                if i + 1 >= len(words):
                    raise UsageError(f"{where}: #SBATCH --{long} needs a value")
                i += 1
                value = words[i]
        elif word.startswith("-") and len(word) >= 2 and word[1] in _SBATCH_SHORT:
            long = _SBATCH_SHORT[word[1]]
            value = word[2:]
            if _SBATCH_LONG[long] and not value:
                if i + 1 >= len(words):
                    raise UsageError(f"{where}: #SBATCH {word} needs a value")
                i += 1
                value = words[i]
        else:
            raise UsageError(f"{where}: #SBATCH {tokens.show(word)}: not an option of sbatch")
        _check_value(inv, where, long, value)
        job.sbatch[long] = value
        i += 1


def _check_value(inv: Inventory, where: str, long: str, value: str) -> None:
    """What this cluster would refuse, for the options picluster can judge."""
    assert inv.slurm is not None
    if long == "time":
        _within_max_time(inv, where, f"--time={value}", tokens.slurm_seconds(value, f"{where}: --time"))
    elif long in ("mem", "mem-per-cpu"):
        tokens.slurm_megabytes(value, f"{where}: --{long}")
    elif long == "nodes":
        if not value.isdigit() or not 1 <= int(value) <= len(inv.nodes):
            raise UsageError(f"{where}: --nodes={value}: the cluster has {len(inv.nodes)} nodes")
    elif long == "nodelist":
        if any(c in value for c in "!&^@*?"):
            # sbatch reads the script's own lines: Slurm's node lists have brackets and commas only.
            raise UsageError(f"{where}: --nodelist={value}: Slurm reads this line, and its node lists take no operators or groups: "
                             "list the nodes (node[01-04],node07), or give them to picluster submit (--nodelist, -x)")
        _nodes(inv, where, value, f"--nodelist={value}")
    elif long == "partition" and value != inv.slurm.partition:
        raise UsageError(f"{where}: --partition={value}: the cluster's partition is {inv.slurm.partition}")
    elif long in ("gpus", "gpus-per-node", "gpus-per-task", "gpus-per-socket", "cpus-per-gpu", "mem-per-gpu", "gres"):
        raise UsageError(f"{where}: --{long}={value}: the cluster has no GPUs or other generic resources")


def _within_max_time(inv: Inventory, where: str, shown: str, seconds: int) -> None:
    assert inv.slurm is not None
    limit = tokens.slurm_seconds(inv.slurm.max_time, "slurm.max_time")
    if seconds > limit:
        raise UsageError(f"{where}: {shown} is over the cluster's longest, {inv.slurm.max_time} "
                         "(slurm.max_time): Slurm would hold the job forever")


def _nodes(inv: Inventory, where: str, value: str, shown: str) -> list[str]:
    try:
        names = nodeset.expand(value)
    except UsageError as exc:  # a malformed set
        raise UsageError(f"{where}: {shown}: {exc}") from None
    unknown = [n for n in names if n not in {node.name for node in inv.nodes}]
    if unknown:
        raise UsageError(f"{where}: {shown}: {nodeset.fold(unknown)} not a node of the cluster ({nodeset.fold(n.name for n in inv.nodes)})")
    return names


def _sge_line(inv: Inventory, job: JobScript, where: str, words: list[str], cwd: str) -> str | None:
    """Translate one #$ line's options into job.options; the -S shell, when it names one."""
    shell = None
    i = 0

    def value(option: str) -> str:
        nonlocal i
        if i + 1 >= len(words) or words[i + 1].startswith("-"):
            raise UsageError(f"{where}: #$ {option} needs a value")
        i += 1
        return words[i]

    while i < len(words):
        option = words[i]
        source = option
        became: list[str] = []
        if option == "-N":
            name = value(option)
            source = f"-N {name}"
            if not re.fullmatch(r"[A-Za-z0-9._+-]{1,200}", name):
                raise UsageError(f"{where}: #$ -N {tokens.show(name)}: a job name of letters, digits and '._+-'")
            became = [f"--job-name={name}"]
        elif option == "-l":
            resources = value(option)
            source = f"-l {resources}"
            for item in resources.split(","):
                became += _sge_resource(inv, where, item)
        elif option in ("-o", "-e"):
            path = _sge_path(where, option, value(option))
            source = f"{option} {words[i]}"
            became = [f"--{'output' if option == '-o' else 'error'}={path}"]
            if option == "-e" and job.merged:
                became = []
                job.said.append(f"{where}: #$ -e {words[i]} -> nothing: -j y puts stderr with stdout")
        elif option == "-j":
            merge = value(option).lower()
            source = f"-j {merge}"
            if merge in ("y", "yes", "true"):
                became = []  # sbatch writes both streams to --output unless --error is given
                job.said.append(f"{where}: #$ -j {merge} -> stdout and stderr in one file (sbatch's default without --error)")
                job.options = [o for o in job.options if not o.startswith("--error=")]
                job.merged = True
            elif merge not in ("n", "no", "false"):
                raise UsageError(f"{where}: #$ -j {merge}: give y or n")
        elif option == "-cwd":
            became = [f"--chdir={cwd}"]
        elif option == "-wd":
            path = value(option)
            source = f"-wd {path}"
            if not path.startswith("/") or "$" in path:
                raise UsageError(f"{where}: #$ -wd {tokens.show(path)}: give an absolute path without variables")
            became = [f"--chdir={path}"]
        elif option == "-V":
            job.said.append(f"{where}: #$ -V -> --export=ALL (sbatch's default: the environment of the session that "
                            "submits, on the controller)")
        elif option == "-v":
            pairs = value(option)
            source = f"-v {pairs}"
            for pair in pairs.split(","):
                key, eq, val = pair.partition("=")
                if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", key) or not eq or any(c in val for c in ",'\"\\$`"):
                    raise UsageError(f"{where}: #$ -v {tokens.show(pair)}: give NAME=value (no commas, quotes or $ in the value)")
                job.exports.append(pair)
            job.said.append(f"{where}: #$ -v {pairs} -> --export=ALL,{pairs}")
        elif option == "-pe":
            pe = value(option)
            slots = value(option)
            source = f"-pe {pe} {slots}"
            if not slots.isdigit() or int(slots) < 1:
                raise UsageError(f"{where}: #$ -pe {pe} {slots}: give a number of slots (a range is not taken)")
            if pe.lower() in _THREADS_PE or pe.lower().startswith("smp"):
                became = ["--ntasks=1", f"--cpus-per-task={slots}"]
            elif pe.lower() in _PROCESSES_PE or pe.lower().startswith(("mpi", "orte")):
                became = [f"--ntasks={slots}"]
            else:
                raise UsageError(f"{where}: #$ -pe {pe}: not a parallel environment picluster knows "
                                 f"(threads: {', '.join(sorted(_THREADS_PE))}; processes: {', '.join(sorted(_PROCESSES_PE))})")
        elif option == "-t":
            spec = value(option)
            source = f"-t {spec}"
            m = re.fullmatch(r"(\d+)(?:-(\d+)(?::(\d+))?)?", spec)
            if m is None:
                raise UsageError(f"{where}: #$ -t {tokens.show(spec)}: give N, N-M or N-M:STEP")
            became = [f"--array={spec}"]  # SGE's N-M:STEP is sbatch's too
        elif option == "-q":
            queue = value(option)
            source = f"-q {queue}"
            assert inv.slurm is not None
            if queue.split("@")[0] != inv.slurm.partition:
                raise UsageError(f"{where}: #$ -q {queue}: the cluster's one queue is the partition {inv.slurm.partition}")
            became = [f"--partition={inv.slurm.partition}"]
        elif option == "-S":
            shell = value(option)
            source = f"-S {shell}"
            if not re.fullmatch(r"/[A-Za-z0-9._/+-]+", shell):
                raise UsageError(f"{where}: #$ -S {tokens.show(shell)}: give the interpreter's absolute path")
            job.said.append(f"{where}: #$ -S {shell} -> the script's #! line chooses the interpreter in Slurm")
        elif option == "-r":
            answer = value(option).lower()
            source = f"-r {answer}"
            became = ["--requeue"] if answer in ("y", "yes", "true") else ["--no-requeue"]
        elif option == "-h":
            became = ["--hold"]
        elif option == "-hold_jid":
            ids = value(option)
            source = f"-hold_jid {ids}"
            parts = ids.split(",")
            if not all(_ID.fullmatch(p) for p in parts):
                raise UsageError(f"{where}: #$ -hold_jid {tokens.show(ids)}: give Slurm job ids (digits), not names")
            became = [f"--dependency=afterany:{':'.join(parts)}"]
        elif option == "-m":
            when = value(option)
            source = f"-m {when}"
            if when != "n":
                raise UsageError(f"{where}: #$ -m {when}: the cluster sends no mail (no mail program on its nodes); "
                                 "remove the line and follow the job with 'picluster jobs'")
        elif option == "-M":
            address = value(option)
            raise UsageError(f"{where}: #$ -M {tokens.show(address)}: the cluster sends no mail (no mail program on its nodes); "
                             "remove the line and follow the job with 'picluster jobs'")
        elif option == "-R":
            answer = value(option)
            source = f"-R {answer}"
            job.said.append(f"{where}: #$ -R {answer} -> nothing: Slurm's backfill plans a start for every pending job")
        elif option == "-b":
            answer = value(option)
            if answer.lower() in ("y", "yes", "true"):
                raise UsageError(f"{where}: #$ -b y: a binary cannot carry directives; use 'picluster submit -- COMMAND'")
            source = f"-b {answer}"
        else:
            raise UsageError(f"{where}: #$ {tokens.show(option)}: not an SGE option picluster translates "
                             "(docs/slurm.md lists them); write it as #SBATCH, or remove it")
        if became:
            for option_word in became:
                long, _, val = option_word[2:].partition("=")
                if long != "export":
                    _check_value(inv, where, long, val)
            job.options += became
            job.said.append(f"{where}: #$ {source} -> {' '.join(became)}")
        i += 1
    return shell


def _sge_resource(inv: Inventory, where: str, item: str) -> list[str]:
    key, eq, val = item.partition("=")
    key = key.strip().lower()
    if not eq or not val:
        raise UsageError(f"{where}: #$ -l {tokens.show(item)}: give resource=value")
    if key in ("h", "hostname"):
        if any(c in val for c in "*?[]|!"):
            raise UsageError(f"{where}: #$ -l {key}={val}: a pattern of hosts is not taken; name the nodes")
        names = _nodes(inv, where, val, f"-l {key}={val}")
        return [f"--nodelist={','.join(names)}"]
    if key in ("mem_free", "virtual_free", "mem", "s_vmem"):
        return [f"--mem={_sge_megabytes(where, item, val)}M"]
    if key in ("h_vmem", "vf"):
        return [f"--mem-per-cpu={_sge_megabytes(where, item, val)}M"]
    if key in ("h_rt", "s_rt"):
        seconds = _sge_seconds(where, item, val)
        shown = _slurm_time(seconds)
        _within_max_time(inv, where, f"-l {item} ({shown})", seconds)
        return [f"--time={shown}"]
    if key in ("gpu", "gpus", "ngpus", "gpu_card", "cuda", "gres"):
        raise UsageError(f"{where}: #$ -l {item}: the cluster has no GPUs; remove the request")
    raise UsageError(f"{where}: #$ -l {key}: not a resource picluster translates (h, hostname, mem_free, "
                     "virtual_free, h_vmem, h_rt, s_rt); write it as #SBATCH, or remove it")


def _sge_megabytes(where: str, item: str, value: str) -> int:
    m = _SGE_MEM.fullmatch(value)
    if m is None:
        raise UsageError(f"{where}: #$ -l {item}: give a size such as 512M or 5G")
    number, unit = float(m.group(1)), m.group(2)
    scale = {"": 1, "k": 1e3, "K": 1024, "m": 1e6, "M": 2**20, "g": 1e9, "G": 2**30}[unit]
    mb = math.ceil(number * scale / 2**20)
    if mb < 1:
        raise UsageError(f"{where}: #$ -l {item}: at least 1 megabyte")
    return mb


def _sge_seconds(where: str, item: str, value: str) -> int:
    m = _SGE_TIME.fullmatch(value)
    if m is None:
        raise UsageError(f"{where}: #$ -l {item}: give seconds or hours:minutes:seconds")
    hours, minutes, seconds = (int(g or 0) for g in m.groups())
    total = hours * 3600 + minutes * 60 + seconds
    if total <= 0:
        raise UsageError(f"{where}: #$ -l {item}: give a limit above zero")
    return total


def _slurm_time(seconds: int) -> str:
    """Seconds in sbatch's D-HH:MM:SS, rounded up to the minute Slurm counts in."""
    minutes = math.ceil(seconds / 60)
    days, rest = divmod(minutes, 24 * 60)
    hours, mins = divmod(rest, 60)
    return f"{days}-{hours:02d}:{mins:02d}:00" if days else f"{hours:02d}:{mins:02d}:00"


def _sge_path(where: str, option: str, path: str) -> str:
    """An SGE output path as sbatch's: its pseudo variables as sbatch's replacement symbols."""
    path = path.split(":", 1)[1] if ":" in path and not path.startswith("/") else path  # [host]:path
    for sge, slurm in _SGE_VARIABLES.items():
        path = path.replace(sge, slurm)
    if "$" in path or not path or path.endswith("/") or any(c.isspace() for c in path):
        raise UsageError(f"{where}: #$ {option} {tokens.show(path)}: give a file name; of SGE's variables "
                         f"{', '.join(_SGE_VARIABLES)} are translated")
    return path
