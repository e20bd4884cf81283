"""Sun Grid Engine's ``#$`` lines as sbatch's options, each translation said.

What Slurm here can do as SGE would becomes sbatch's options; what it cannot honour (a soft
request, a CPU-time limit, a project, a suspension mail) is one line naming the directive and the
nearest equivalent, and the job runs without it; what would run the job wrongly (GPUs it does not
have, a host that is not a node, a time over max_time, an option picluster does not know) is
refused, naming the line, and nothing is queued.
"""

import re
from collections.abc import Callable
from dataclasses import dataclass

from picluster.jobs.slurm import origin as origins
from picluster.jobs.slurm import sge_values as values
from picluster.jobs.slurm.options import JobScript, check_value
from picluster.model import tokens
from picluster.model.inventory import Inventory
from picluster.util.errors import UsageError

# SGE parallel environments by what they mean: threads on one node, or processes anywhere.
_THREADS_PE = {"smp", "threads", "openmp", "omp", "shared", "shm"}
_PROCESSES_PE = {"mpi", "orte", "mpich", "openmpi", "ompi"}
_ID = re.compile(r"\d{1,12}")
_STREAMS = {"-o": "output", "-e": "error", "-i": "input"}
_ADDRESS = re.compile(r"[A-Za-z0-9._%+-]{1,64}(?:@[A-Za-z0-9.-]{1,253})?", re.ASCII)
# Options without an equivalent here, the value they take (or not), and the nearest one, said.
_UNHONOURED = {
    "-A": (True, "every job is accounted to Slurm's one account here (sacct tells people apart by user); "
                 "the nearest: #SBATCH --comment=TEXT"),
    "-P": (True, "Slurm here has no projects (sacct tells people apart by user); the nearest: #SBATCH --comment=TEXT"),
    "-js": (True, "Slurm shares the cluster by each person's fair share, not by job share"),
    "-ckpt": (True, "Slurm checkpoints no job here; the nearest: picluster train's own checkpoints (train har --resume)"),
    "-c": (True, "Slurm checkpoints no job here; the nearest: picluster train's own checkpoints (train har --resume)"),
    "-ar": (True, "the cluster has no advance reservations; the nearest: -l h=NODE, or -a DATE to start later"),
    "-dl": (True, "Slurm starts no job earlier for a deadline; the nearest: -a DATE"),
    "-ac": (True, "Slurm keeps no job context; the nearest: -v NAME=value (in the job's environment)"),
    "-dc": (True, "Slurm keeps no job context; the nearest: -v NAME=value (in the job's environment)"),
    "-sc": (True, "Slurm keeps no job context; the nearest: -v NAME=value (in the job's environment)"),
    "-now": (True, "Slurm queues the job and starts it when nodes are free; 'picluster jobs' shows whether it waits"),
    "-sync": (True, "submit returns once the job is queued; the nearest: 'picluster jobs slurm:ID', 'picluster logs slurm:ID'"),
    "-w": (True, "submit has sbatch check every request (--test-only) before it queues"),
    "-shell": (True, "Slurm runs the script with its #! line's interpreter"),
    "-jsv": (True, "the cluster runs no job submission verifier; submit checks the script itself"),
    "-terse": (False, "submit prints the job's id alone on its standard output (slurm:ID)"),
    "-noshell": (False, "Slurm runs the script with its #! line's interpreter"),
    "-masterq": (True, "the cluster has one queue, Slurm's partition"),
    "-pty": (True, "a batch job has no terminal; the nearest: srun --pty on the controller"),
}


@dataclass
class _Line:
    """One #$ line as its handlers read it: its words, the one being read, and the -S shell it names."""

    inv: Inventory
    job: JobScript
    where: str
    words: list[str]
    origin: origins.Origin
    i: int = 0
    shell: str | None = None

    def value(self, option: str) -> str:
        words, i = self.words, self.i
        if i + 1 >= len(words) or (words[i + 1].startswith("-") and not (option == "-p" and words[i + 1][1:].isdigit())):
            raise UsageError(f"{self.where}: #$ {option} needs a value")
        self.i += 1
        return words[self.i]

    def note(self, source: str, why: str) -> None:
        self.job.said.append(f"{self.where}: #$ {source} -> nothing: {why}")


# What a handler gives: the directive as said, the sbatch options it became, and why (said after them).
_Said = tuple[str, list[str], str]


def line(inv: Inventory, job: JobScript, where: str, words: list[str], origin: origins.Origin) -> str | None:
    """Translate one #$ line's options into job.options; the -S shell, when it names one."""
    at = _Line(inv, job, where, words, origin)
    while at.i < len(words):
        option = words[at.i]
        handler = _HANDLERS.get(option) or (_unhonoured if option in _UNHONOURED else None)
        if handler is None:
            raise UsageError(f"{where}: #$ {tokens.show(option)}: not an SGE option picluster translates "
                             "(docs/slurm.md lists them); write it as #SBATCH, or remove it")
        source, became, why = handler(at, option)
        if became:
            for option_word in became:
                long, _, val = option_word[2:].partition("=")
                if long != "export":
                    check_value(inv, where, long, val)
            job.options += became
            job.said.append(f"{where}: #$ {source} -> {' '.join(became)}" + (f" ({why})" if why else ""))
        at.i += 1
    return at.shell


def _name(at: _Line, option: str) -> _Said:
    name = at.value(option)
    if not re.fullmatch(r"[A-Za-z0-9._+-]{1,200}", name):
        raise UsageError(f"{at.where}: #$ -N {tokens.show(name)}: a job name of letters, digits and '._+-'")
    return f"-N {name}", [f"--job-name={name}"], ""


def _resources(at: _Line, option: str) -> _Said:
    resources = at.value(option)
    source = f"-l {resources}"
    became: list[str] = []
    why = ""
    if at.job.soft:
        at.note(source, "a soft request (after -soft), which Slurm has not: the job may run anywhere, as SGE may run it")
    else:
        for item in resources.split(","):
            got, remark = values.resource(at.inv, at.where, item)
            became += got
            why = "; ".join(w for w in (why, remark) if w)
        if not became:
            at.note(source, why)
            why = ""
    return source, became, why


def _stream(at: _Line, option: str) -> _Said:
    path = values.output_path(at.where, option, at.value(option))
    source = f"{option} {at.words[at.i]}"
    became = [f"--{_STREAMS[option]}={path}"]
    if option == "-e" and at.job.merged:
        became = []
        at.job.said.append(f"{at.where}: #$ -e {at.words[at.i]} -> nothing: -j y puts stderr with stdout")
    return source, became, ""


def _join(at: _Line, option: str) -> _Said:
    merge = at.value(option).lower()
    if merge in ("y", "yes", "true"):
        at.job.said.append(f"{at.where}: #$ -j {merge} -> stdout and stderr in one file (sbatch's default without --error)")
        at.job.options = [o for o in at.job.options if not o.startswith("--error=")]
        at.job.merged = True
    elif merge not in ("n", "no", "false"):
        raise UsageError(f"{at.where}: #$ -j {merge}: give y or n")
    return f"-j {merge}", [], ""


def _cwd(at: _Line, option: str) -> _Said:
    folder = origins.for_cwd(at.inv, at.origin)
    at.job.placed = True
    if not folder.option:
        at.job.said.append(f"{at.where}: #$ -cwd -> {folder.shown} ({folder.why})")
    return option, folder.option, folder.why


def _wd(at: _Line, option: str) -> _Said:
    path = at.value(option)
    if not path.startswith("/") or "$" in path:
        raise UsageError(f"{at.where}: #$ -wd {tokens.show(path)}: give an absolute path without variables")
    at.job.placed = True
    return f"-wd {path}", [f"--chdir={path}"], ""


def _environment(at: _Line, option: str) -> _Said:
    at.job.said.append(f"{at.where}: #$ -V -> --export=ALL (sbatch's default: the environment of the session that "
                       "submits, on the controller)")
    return option, [], ""


def _variables(at: _Line, option: str) -> _Said:
    pairs = at.value(option)
    for pair in pairs.split(","):
        key, eq, val = pair.partition("=")
        if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", key) or not eq or any(c in val for c in ",'\"\\$`"):
            raise UsageError(f"{at.where}: #$ -v {tokens.show(pair)}: give NAME=value (no commas, quotes or $ in the value)")
        at.job.exports.append(pair)
    at.job.said.append(f"{at.where}: #$ -v {pairs} -> --export=ALL,{pairs}")
    return f"-v {pairs}", [], ""


def _parallel(at: _Line, option: str) -> _Said:
    pe = at.value(option)
    slots = at.value(option)
    source = f"-pe {pe} {slots}"
    if not slots.isdigit() or int(slots) < 1:
        raise UsageError(f"{at.where}: #$ -pe {pe} {slots}: give a number of slots (a range is not taken)")
    if pe.lower() in _THREADS_PE or pe.lower().startswith("smp"):
        return source, ["--ntasks=1", f"--cpus-per-task={slots}"], ""
    if pe.lower() in _PROCESSES_PE or pe.lower().startswith(("mpi", "orte")):
        return source, [f"--ntasks={slots}"], ""
    raise UsageError(f"{at.where}: #$ -pe {pe}: not a parallel environment picluster knows "
                     f"(threads: {', '.join(sorted(_THREADS_PE))}; processes: {', '.join(sorted(_PROCESSES_PE))})")


def _array(at: _Line, option: str) -> _Said:
    spec = at.value(option)
    if re.fullmatch(r"(\d+)(?:-(\d+)(?::(\d+))?)?", spec) is None:
        raise UsageError(f"{at.where}: #$ -t {tokens.show(spec)}: give N, N-M or N-M:STEP")
    return f"-t {spec}", [f"--array={spec}"], ""  # SGE's N-M:STEP is sbatch's too


def _array_limit(at: _Line, option: str) -> _Said:
    limit = at.value(option)
    if not limit.isdigit() or int(limit) < 1:
        raise UsageError(f"{at.where}: #$ -tc {tokens.show(limit)}: give how many array tasks may run at once")
    at.job.array_limit = int(limit)
    at.job.said.append(f"{at.where}: #$ -tc {limit} -> --array=...%{limit} (at most {limit} of its tasks at once)")
    return f"-tc {limit}", [], ""


def _queues(at: _Line, option: str) -> _Said:
    queues = at.value(option)
    source = f"-q {queues}"
    assert at.inv.slurm is not None
    if at.job.soft:
        at.note(source, "a soft request (after -soft), which Slurm has not")
        return source, [], ""
    return (source, *values.queue(at.inv, at.where, queues))


def _shell(at: _Line, option: str) -> _Said:
    at.shell = at.value(option)
    if not re.fullmatch(r"/[A-Za-z0-9._/+-]+", at.shell):
        raise UsageError(f"{at.where}: #$ -S {tokens.show(at.shell)}: give the interpreter's absolute path")
    return f"-S {at.shell}", [], ""


def _rerun(at: _Line, option: str) -> _Said:
    answer = at.value(option).lower()
    return f"-r {answer}", ["--requeue"] if answer in ("y", "yes", "true") else ["--no-requeue"], ""


def _hold(at: _Line, option: str) -> _Said:
    return option, ["--hold"], ""


def _hold_for(at: _Line, option: str) -> _Said:
    ids = at.value(option)
    parts = ids.split(",")
    if not all(_ID.fullmatch(p) for p in parts):
        raise UsageError(f"{at.where}: #$ {option} {tokens.show(ids)}: give Slurm job ids (digits), not names")
    kind = "afterany" if option == "-hold_jid" else "aftercorr"  # _ad: task by task of two arrays
    return f"{option} {ids}", [f"--dependency={kind}:{':'.join(parts)}"], ""


def _start(at: _Line, option: str) -> _Said:
    when = at.value(option)
    return f"-a {when}", [f"--begin={values.begin(at.where, when)}"], ""


def _priority(at: _Line, option: str) -> _Said:
    number = at.value(option)
    source = f"-p {number}"
    if not re.fullmatch(r"-?\d{1,4}", number) or not -1023 <= int(number) <= 1024:
        raise UsageError(f"{at.where}: #$ -p {tokens.show(number)}: give a priority from -1023 to 1024")
    if int(number) < 0:
        return source, [f"--nice={-int(number)}"], "lower than other jobs of the same fair share"
    at.note(source, "only an operator raises a job's priority in Slurm ('scontrol top ID', or 'picluster jobs' to see it wait)")
    return source, [], ""


def _mail_when(at: _Line, option: str) -> _Said:
    when = at.value(option)
    source = f"-m {when}"
    became, why = values.mail(at.where, when)
    at.job.mail = at.job.mail or bool(became)
    if not became and why:
        at.note(source, why)
        why = ""
    return source, became, why


def _mail_to(at: _Line, option: str) -> _Said:
    addresses = at.value(option)
    if not all(_ADDRESS.fullmatch(a) for a in addresses.split(",")):
        raise UsageError(f"{at.where}: #$ -M {tokens.show(addresses)}: give mail addresses (user@host), separated by commas")
    at.job.mail = True
    return f"-M {addresses}", [f"--mail-user={addresses}"], ""


def _notify(at: _Line, option: str) -> _Said:
    return option, ["--signal=B:USR2@60"], "SGE warns a job with SIGUSR2 before it kills it; Slurm sends it 60 s before the time limit"


def _reserve(at: _Line, option: str) -> _Said:
    source = f"-R {at.value(option)}"
    at.note(source, "Slurm's backfill plans a start for every pending job")
    return source, [], ""


def _hard(at: _Line, option: str) -> _Said:
    at.job.soft = False
    at.note(option, "every Slurm request is a hard one")
    return option, [], ""


def _soft(at: _Line, option: str) -> _Said:
    at.job.soft = True
    at.note(option, "Slurm has no soft requests: the -l and -q requests after it are left out, as SGE may leave them")
    return option, [], ""


def _binding(at: _Line, option: str) -> _Said:
    strategy = at.value(option)
    if strategy in ("set", "env", "pe"):
        strategy += " " + at.value(option)
    at.note(f"-binding {strategy}", "Slurm holds a job to its cores where jobs are confined (docs/slurm.md)")
    return option, [], ""


def _binary(at: _Line, option: str) -> _Said:
    answer = at.value(option)
    if answer.lower() in ("y", "yes", "true"):
        raise UsageError(f"{at.where}: #$ -b y: a binary cannot carry directives; use 'picluster submit -- COMMAND'")
    at.note(f"-b {answer}", "a script, as sbatch takes it")
    return option, [], ""


def _verify(at: _Line, option: str) -> _Said:
    raise UsageError(f"{at.where}: #$ -verify: SGE would only check the job, not queue it; the nearest: remove the line "
                     "(submit has sbatch check the job before it queues it)")


def _unhonoured(at: _Line, option: str) -> _Said:
    takes, reason = _UNHONOURED[option]
    source = f"{option} {at.value(option)}" if takes else option
    at.note(source, reason)
    return source, [], ""


_HANDLERS: dict[str, Callable[[_Line, str], _Said]] = {
    "-N": _name, "-l": _resources, "-o": _stream, "-e": _stream, "-i": _stream, "-j": _join, "-cwd": _cwd, "-wd": _wd,
    "-V": _environment, "-v": _variables, "-pe": _parallel, "-t": _array, "-tc": _array_limit, "-q": _queues, "-S": _shell,
    "-r": _rerun, "-h": _hold, "-hold_jid": _hold_for, "-hold_jid_ad": _hold_for, "-a": _start, "-p": _priority,
    "-m": _mail_when, "-M": _mail_to, "-notify": _notify, "-R": _reserve, "-hard": _hard, "-soft": _soft,
    "-binding": _binding, "-b": _binary, "-verify": _verify,
}  # then _UNHONOURED's, said with their nearest equivalent; any other option is refused
