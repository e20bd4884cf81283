"""SGE's values as sbatch's: an -l resource, a -q queue list, -m's letters, -a's date, sizes,
times and output paths, each refused in one line naming the directive when it is not one."""

import datetime
import math
import re

from picluster.jobs.slurm.options import nodes, within_max_time
from picluster.model import tokens
from picluster.model.inventory import Inventory
from picluster.util.errors import UsageError

_SGE_VARIABLES = {"$JOB_ID": "%j", "$JOB_NAME": "%x", "$USER": "%u", "$TASK_ID": "%a", "$HOSTNAME": "%N"}
_SGE_MEM = re.compile(r"(\d+(?:\.\d+)?)([KkMmGg]?)", re.ASCII)  # K = 1024, k = 1000 (sge_types(1))
_SGE_TIME = re.compile(r"(?:(?:(\d+):)?(\d+):)?(\d+)", re.ASCII)  # [[hours:]minutes:]seconds
_SGE_DATE = re.compile(r"(\d{2})?(\d{2})?(\d{2})(\d{2})(\d{2})(\d{2})(?:\.(\d{2}))?", re.ASCII)  # [[CC]YY]MMDDhhmm[.SS]
# -m's letters: begin, end, aborted (or rescheduled), suspended, none.
_MAIL = {"b": ["BEGIN"], "e": ["END"], "a": ["FAIL", "REQUEUE"], "s": []}
# -l resources without an equivalent: per-process limits Slurm does not set, and the nearest.
_ULIMITS = {"h_stack": "ulimit -s", "s_stack": "ulimit -s", "h_fsize": "ulimit -f", "s_fsize": "ulimit -f",
            "h_core": "ulimit -c", "s_core": "ulimit -c"}


def resource(inv: Inventory, where: str, item: str) -> tuple[list[str], str]:
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
        return [f"--mem={megabytes(where, item, val)}M"], ""
    if key in ("h_vmem", "vf", "h_data", "s_data", "h_rss", "s_rss"):
        return [f"--mem-per-cpu={megabytes(where, item, val)}M"], ""
    if key in ("h_rt", "s_rt"):
        seconds = seconds_of(where, item, val)
        shown = slurm_time(seconds)
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


def queue(inv: Inventory, where: str, queues: str) -> tuple[list[str], str]:
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


def mail(where: str, when: str) -> tuple[list[str], str]:
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


def begin(where: str, when: str) -> str:
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


def megabytes(where: str, item: str, value: str) -> int:
    m = _SGE_MEM.fullmatch(value)
    if m is None:
        raise UsageError(f"{where}: #$ -l {item}: give a size such as 512M or 5G")
    number, unit = float(m.group(1)), m.group(2)
    scale = {"": 1, "k": 1e3, "K": 1024, "m": 1e6, "M": 2**20, "g": 1e9, "G": 2**30}[unit]
    mb = math.ceil(number * scale / 2**20)
    if mb < 1:
        raise UsageError(f"{where}: #$ -l {item}: at least 1 megabyte")
    return mb


def seconds_of(where: str, item: str, value: str) -> int:
    m = _SGE_TIME.fullmatch(value)
    if m is None:
        raise UsageError(f"{where}: #$ -l {item}: give seconds or hours:minutes:seconds")
    hours, minutes, seconds = (int(g or 0) for g in m.groups())
    total = hours * 3600 + minutes * 60 + seconds
    if total <= 0:
        raise UsageError(f"{where}: #$ -l {item}: give a limit above zero")
    return total


def slurm_time(seconds: int) -> str:
    """Seconds in sbatch's D-HH:MM:SS, rounded up to the minute Slurm counts in."""
    minutes = math.ceil(seconds / 60)
    days, rest = divmod(minutes, 24 * 60)
    hours, mins = divmod(rest, 60)
    return f"{days}-{hours:02d}:{mins:02d}:00" if days else f"{hours:02d}:{mins:02d}:00"


def output_path(where: str, option: str, path: str) -> str:
    """An SGE output path as sbatch's: its pseudo variables as sbatch's replacement symbols."""
    path = path.split(":", 1)[1] if ":" in path and not path.startswith("/") else path  # [host]:path
    for sge, slurm in _SGE_VARIABLES.items():
        path = path.replace(sge, slurm)
    if "$" in path or not path or path.endswith("/") or any(c.isspace() for c in path):
        raise UsageError(f"{where}: #$ {option} {tokens.show(path)}: give a file name; of SGE's variables "
                         f"{', '.join(_SGE_VARIABLES)} are translated")
    return path
