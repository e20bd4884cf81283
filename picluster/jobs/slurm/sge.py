"""Sun Grid Engine's ``#$`` lines as sbatch's options, each translation said.

What Slurm here can do as SGE would becomes sbatch's options; what it cannot honour (a soft
request, a CPU-time limit, a project, a suspension mail) is one line naming the directive and the
nearest equivalent, and the job runs without it; what would run the job wrongly (GPUs it does not
have, a host that is not a node, a time over max_time, an option picluster does not know) is
refused, naming the line, and nothing is queued.
"""

import datetime
import math
import re

from picluster.jobs.slurm import origin as origins
from picluster.jobs.slurm.options import JobScript, check_value, nodes, within_max_time
from picluster.model import tokens
from picluster.model.inventory import Inventory
from picluster.util.errors import UsageError

# SGE parallel environments by what they mean: threads on one node, or processes anywhere.
_THREADS_PE = {"smp", "threads", "openmp", "omp", "shared", "shm"}
_PROCESSES_PE = {"mpi", "orte", "mpich", "openmpi", "ompi"}
_SGE_VARIABLES = {"$JOB_ID": "%j", "$JOB_NAME": "%x", "$USER": "%u", "$TASK_ID": "%a", "$HOSTNAME": "%N"}
_SGE_MEM = re.compile(r"(\d+(?:\.\d+)?)([KkMmGg]?)", re.ASCII)  # K = 1024, k = 1000 (sge_types(1))
_SGE_TIME = re.compile(r"(?:(?:(\d+):)?(\d+):)?(\d+)", re.ASCII)  # [[hours:]minutes:]seconds
_SGE_DATE = re.compile(r"(\d{2})?(\d{2})?(\d{2})(\d{2})(\d{2})(\d{2})(?:\.(\d{2}))?", re.ASCII)  # [[CC]YY]MMDDhhmm[.SS]
_ID = re.compile(r"\d{1,12}")
_STREAMS = {"-o": "output", "-e": "error", "-i": "input"}
_ADDRESS = re.compile(r"[A-Za-z0-9._%+-]{1,64}(?:@[A-Za-z0-9.-]{1,253})?", re.ASCII)
# -m's letters: begin, end, aborted (or rescheduled), suspended, none.
_MAIL = {"b": ["BEGIN"], "e": ["END"], "a": ["FAIL", "REQUEUE"], "s": []}
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
# -l resources without an equivalent: per-process limits Slurm does not set, and the nearest.
_ULIMITS = {"h_stack": "ulimit -s", "s_stack": "ulimit -s", "h_fsize": "ulimit -f", "s_fsize": "ulimit -f",
            "h_core": "ulimit -c", "s_core": "ulimit -c"}


def line(inv: Inventory, job: JobScript, where: str, words: list[str], origin: origins.Origin) -> str | None:
    """Translate one #$ line's options into job.options; the -S shell, when it names one."""
    shell = None
    i = 0

    def value(option: str) -> str:
        nonlocal i
        if i + 1 >= len(words) or (words[i + 1].startswith("-") and not (option == "-p" and words[i + 1][1:].isdigit())):
            raise UsageError(f"{where}: #$ {option} needs a value")
        i += 1
        return words[i]

    def note(source: str, why: str) -> None:
        job.said.append(f"{where}: #$ {source} -> nothing: {why}")

    while i < len(words):
        option = words[i]
        source = option
        became: list[str] = []
        why = ""  # said after what it became
        if option == "-N":
            name = value(option)
            source = f"-N {name}"
            if not re.fullmatch(r"[A-Za-z0-9._+-]{1,200}", name):
                raise UsageError(f"{where}: #$ -N {tokens.show(name)}: a job name of letters, digits and '._+-'")
            became = [f"--job-name={name}"]
        elif option == "-l":
            resources = value(option)
            source = f"-l {resources}"
            if job.soft:
                note(source, "a soft request (after -soft), which Slurm has not: the job may run anywhere, as SGE may run it")
            else:
                for item in resources.split(","):
                    got, remark = _resource(inv, where, item)
                    became += got
                    why = "; ".join(w for w in (why, remark) if w)
                if not became:
                    note(source, why)
                    why = ""
        elif option in ("-o", "-e", "-i"):
            path = _path(where, option, value(option))
            source = f"{option} {words[i]}"
            became = [f"--{_STREAMS[option]}={path}"]
            if option == "-e" and job.merged:
                became = []
                job.said.append(f"{where}: #$ -e {words[i]} -> nothing: -j y puts stderr with stdout")
        elif option == "-j":
            merge = value(option).lower()
            source = f"-j {merge}"
            if merge in ("y", "yes", "true"):
                job.said.append(f"{where}: #$ -j {merge} -> stdout and stderr in one file (sbatch's default without --error)")
                job.options = [o for o in job.options if not o.startswith("--error=")]
                job.merged = True
            elif merge not in ("n", "no", "false"):
                raise UsageError(f"{where}: #$ -j {merge}: give y or n")
        elif option == "-cwd":
            folder = origins.for_cwd(inv, origin)
            job.placed = True
            became = folder.option
            why = folder.why
            if not became:
                job.said.append(f"{where}: #$ -cwd -> {folder.shown} ({folder.why})")
        elif option == "-wd":
            path = value(option)
            source = f"-wd {path}"
            if not path.startswith("/") or "$" in path:
                raise UsageError(f"{where}: #$ -wd {tokens.show(path)}: give an absolute path without variables")
            job.placed = True
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
            if re.fullmatch(r"(\d+)(?:-(\d+)(?::(\d+))?)?", spec) is None:
                raise UsageError(f"{where}: #$ -t {tokens.show(spec)}: give N, N-M or N-M:STEP")
            became = [f"--array={spec}"]  # SGE's N-M:STEP is sbatch's too
        elif option == "-tc":
            limit = value(option)
            source = f"-tc {limit}"
            if not limit.isdigit() or int(limit) < 1:
                raise UsageError(f"{where}: #$ -tc {tokens.show(limit)}: give how many array tasks may run at once")
            job.array_limit = int(limit)
            job.said.append(f"{where}: #$ -tc {limit} -> --array=...%{limit} (at most {limit} of its tasks at once)")
        elif option == "-q":
            queues = value(option)
            source = f"-q {queues}"
            assert inv.slurm is not None
            if job.soft:
                note(source, "a soft request (after -soft), which Slurm has not")
            else:
                became, why = _queue(inv, where, queues)
        elif option == "-S":
            shell = value(option)
            source = f"-S {shell}"
            if not re.fullmatch(r"/[A-Za-z0-9._/+-]+", shell):
                raise UsageError(f"{where}: #$ -S {tokens.show(shell)}: give the interpreter's absolute path")
        elif option == "-r":
            answer = value(option).lower()
            source = f"-r {answer}"
            became = ["--requeue"] if answer in ("y", "yes", "true") else ["--no-requeue"]
        elif option == "-h":
            became = ["--hold"]
        elif option in ("-hold_jid", "-hold_jid_ad"):
            ids = value(option)
            source = f"{option} {ids}"
            parts = ids.split(",")
            if not all(_ID.fullmatch(p) for p in parts):
                raise UsageError(f"{where}: #$ {option} {tokens.show(ids)}: give Slurm job ids (digits), not names")
            kind = "afterany" if option == "-hold_jid" else "aftercorr"  # _ad: task by task of two arrays
            became = [f"--dependency={kind}:{':'.join(parts)}"]
        elif option == "-a":
            when = value(option)
            source = f"-a {when}"
            became = [f"--begin={_begin(where, when)}"]
        elif option == "-p":
            number = value(option)
            source = f"-p {number}"
            if not re.fullmatch(r"-?\d{1,4}", number) or not -1023 <= int(number) <= 1024:
                raise UsageError(f"{where}: #$ -p {tokens.show(number)}: give a priority from -1023 to 1024")
            if int(number) < 0:
                became, why = [f"--nice={-int(number)}"], "lower than other jobs of the same fair share"
            else:
                note(source, "only an operator raises a job's priority in Slurm ('scontrol top ID', or 'picluster jobs' to see it wait)")
        elif option == "-m":
            when = value(option)
            source = f"-m {when}"
            became, why = _mail(where, when)
            job.mail = job.mail or bool(became)
            if not became and why:
                note(source, why)
                why = ""
        elif option == "-M":
            addresses = value(option)
            source = f"-M {addresses}"
            if not all(_ADDRESS.fullmatch(a) for a in addresses.split(",")):
                raise UsageError(f"{where}: #$ -M {tokens.show(addresses)}: give mail addresses (user@host), separated by commas")
            became = [f"--mail-user={addresses}"]
            job.mail = True
        elif option == "-notify":
            became = ["--signal=B:USR2@60"]
            why = "SGE warns a job with SIGUSR2 before it kills it; Slurm sends it 60 s before the time limit"
        elif option == "-R":
            answer = value(option)
            source = f"-R {answer}"
            note(source, "Slurm's backfill plans a start for every pending job")
        elif option == "-hard":
            job.soft = False
            note(source, "every Slurm request is a hard one")
        elif option == "-soft":
            job.soft = True
            note(source, "Slurm has no soft requests: the -l and -q requests after it are left out, as SGE may leave them")
        elif option == "-binding":
            strategy = value(option)
            if strategy in ("set", "env", "pe"):
                strategy += " " + value(option)
            note(f"-binding {strategy}", "Slurm holds a job to its cores where jobs are confined (docs/slurm.md)")
        elif option == "-b":
            answer = value(option)
            if answer.lower() in ("y", "yes", "true"):
                raise UsageError(f"{where}: #$ -b y: a binary cannot carry directives; use 'picluster submit -- COMMAND'")
            note(f"-b {answer}", "a script, as sbatch takes it")
        elif option == "-verify":
            raise UsageError(f"{where}: #$ -verify: SGE would only check the job, not queue it; the nearest: remove the line "
                             "(submit has sbatch check the job before it queues it)")
        elif option in _UNHONOURED:
            takes, reason = _UNHONOURED[option]
            if takes:
                source = f"{option} {value(option)}"
            note(source, reason)
        else:
            raise UsageError(f"{where}: #$ {tokens.show(option)}: not an SGE option picluster translates "
                             "(docs/slurm.md lists them); write it as #SBATCH, or remove it")
        if became:
            for option_word in became:
                long, _, val = option_word[2:].partition("=")
                if long != "export":
                    check_value(inv, where, long, val)
            job.options += became
            job.said.append(f"{where}: #$ {source} -> {' '.join(became)}" + (f" ({why})" if why else ""))
        i += 1
    return shell


def _resource(inv: Inventory, where: str, item: str) -> tuple[list[str], str]:
    """One -l resource: the options it becomes, and what to say beside them (or instead, when none)."""
    key, eq, val = item.partition("=")
    key = key.strip().lower()
    if not eq or not val:
        raise UsageError(f"{where}: #$ -l {tokens.show(item)}: give resource=value")
    if key in ("h", "hostname"):
        if any(c in val for c in "*?[]|!"):
            raise UsageError(f"{where}: #$ -l {key}={val}: a pattern of hosts is not taken; name the nodes")
        names = nodes(inv, where, val, f"-l {key}={val}")
        return [f"--nodelist={','.join(names)}"], ""
    if key in ("mem_free", "virtual_free", "mem", "s_vmem"):
        return [f"--mem={_megabytes(where, item, val)}M"], ""
    if key in ("h_vmem", "vf", "h_data", "s_data", "h_rss", "s_rss"):
        return [f"--mem-per-cpu={_megabytes(where, item, val)}M"], ""
    if key in ("h_rt", "s_rt"):
        seconds = _seconds(where, item, val)
        shown = _slurm_time(seconds)
        within_max_time(inv, where, f"-l {item} ({shown})", seconds)
        return [f"--time={shown}"], ""
    if key in ("exclusive", "excl"):
        if val.lower() in ("true", "1", "yes", "y"):
            return ["--exclusive"], ""
        return [], f"{key}={val}: a job shares its nodes unless it asks for them whole"
    if key in ("h_cpu", "s_cpu"):
        return [], f"{key}={val}: Slurm limits a job's wall-clock time, not its CPU time; the nearest: -l h_rt"
    if key in _ULIMITS:
        return [], f"{key}={val}: a per-process limit Slurm does not set; the nearest: '{_ULIMITS[key]}' in the script"
    if key == "arch":
        return [], f"arch={val}: Slurm places jobs by node, not by architecture; the nearest: -l h=NODE"
    if key in ("gpu", "gpus", "ngpus", "gpu_card", "cuda", "gres"):
        raise UsageError(f"{where}: #$ -l {item}: the cluster has no GPUs; remove the request")
    raise UsageError(f"{where}: #$ -l {key}: not a resource picluster translates (h, hostname, mem_free, "
                     "virtual_free, h_vmem, h_rt, s_rt, exclusive; docs/slurm.md lists them); write it as #SBATCH, or remove it")


def _queue(inv: Inventory, where: str, queues: str) -> tuple[list[str], str]:
    """-q QUEUE[@HOST],...: the cluster's one partition, and the hosts the request names."""
    assert inv.slurm is not None
    partition = inv.slurm.partition
    names, hosts = [], []
    for queue in queues.split(","):
        name, _, host = queue.partition("@")
        names.append(name)
        if host:
            hosts += nodes(inv, where, host, f"-q {queue}")
    became = [f"--partition={partition}"] + ([f"--nodelist={','.join(dict.fromkeys(hosts))}"] if hosts else [])
    others = sorted({n for n in names if n != partition and n != "*"})
    why = f"the cluster's one queue; {', '.join(others)} {'is' if len(others) == 1 else 'are'} not one of its" if others else ""
    return became, why


def _mail(where: str, when: str) -> tuple[list[str], str]:
    """-m's letters as --mail-type, and what Slurm cannot mail."""
    letters = when.lower()
    if not letters or any(c not in "beasn" for c in letters) or ("n" in letters and letters != "n"):
        raise UsageError(f"{where}: #$ -m {tokens.show(when)}: give letters of b, e, a and s (begin, end, aborted, "
                         "suspended), or n")
    if letters == "n":
        return ["--mail-type=NONE"], ""
    types = [t for c in dict.fromkeys(letters) for t in _MAIL[c]]
    why = "s: Slurm mails no suspension, and picluster suspends no job" if "s" in letters else ""
    return ([f"--mail-type={','.join(types)}"] if types else []), why


def _begin(where: str, when: str) -> str:
    """SGE's [[CC]YY]MMDDhhmm[.SS] as sbatch's --begin=YYYY-MM-DDThh:mm:ss (this year when it gives none)."""
    m = _SGE_DATE.fullmatch(when)
    if m is None:
        raise UsageError(f"{where}: #$ -a {tokens.show(when)}: give [[CC]YY]MMDDhhmm[.SS], e.g. 202612242300")
    century, year, month, day, hour, minute, second = m.groups()
    if century and not year:  # ten digits: YYMMDDhhmm
        century, year = None, century
    now = datetime.date.today()
    full = int(f"{century or str(now.year)[:2]}{year}") if year else now.year
    try:
        start = datetime.datetime(full, int(month), int(day), int(hour), int(minute), int(second or 0))
    except ValueError as exc:
        raise UsageError(f"{where}: #$ -a {when}: {exc}") from None
    return start.strftime("%Y-%m-%dT%H:%M:%S")


def _megabytes(where: str, item: str, value: str) -> int:
    m = _SGE_MEM.fullmatch(value)
    if m is None:
        raise UsageError(f"{where}: #$ -l {item}: give a size such as 512M or 5G")
    number, unit = float(m.group(1)), m.group(2)
    scale = {"": 1, "k": 1e3, "K": 1024, "m": 1e6, "M": 2**20, "g": 1e9, "G": 2**30}[unit]
    mb = math.ceil(number * scale / 2**20)
    if mb < 1:
        raise UsageError(f"{where}: #$ -l {item}: at least 1 megabyte")
    return mb


def _seconds(where: str, item: str, value: str) -> int:
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


def _path(where: str, option: str, path: str) -> str:
    """An SGE output path as sbatch's: its pseudo variables as sbatch's replacement symbols."""
    path = path.split(":", 1)[1] if ":" in path and not path.startswith("/") else path  # [host]:path
    for sge, slurm in _SGE_VARIABLES.items():
        path = path.replace(sge, slurm)
    if "$" in path or not path or path.endswith("/") or any(c.isspace() for c in path):
        raise UsageError(f"{where}: #$ {option} {tokens.show(path)}: give a file name; of SGE's variables "
                         f"{', '.join(_SGE_VARIABLES)} are translated")
    return path
