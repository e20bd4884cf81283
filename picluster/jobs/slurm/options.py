"""sbatch's options in a job script: the ``#SBATCH`` lines checked (sbatch would only say
"unrecognized option"), and what this cluster would refuse of any option, checked before anything
connects; the JobScript that carries a script's options to sbatch's command line.
"""

from dataclasses import dataclass, field

from picluster.model import nodeset, tokens
from picluster.model.inventory import Inventory
from picluster.util.errors import UsageError

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
    placed: bool = False  # the script names the folder it runs in (SGE's -cwd or -wd)
    soft: bool = False  # after SGE's -soft: requests Slurm may leave out (it has no soft ones)
    array_limit: int | None = None  # SGE's -tc: at most this many array tasks at once
    mail: bool = False  # SGE's -m or -M asks for mail

    def has(self, option: str) -> bool:
        """Whether the script asks for ``option`` (long name), in either kind of line."""
        return option in self.sbatch or any(o == f"--{option}" or o.startswith(f"--{option}=") for o in self.options)


def sbatch_line(inv: Inventory, job: JobScript, where: str, words: list[str]) -> None:
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
        check_value(inv, where, long, value)
        job.sbatch[long] = value
        i += 1


def check_value(inv: Inventory, where: str, long: str, value: str) -> None:
    """What this cluster would refuse, for the options picluster can judge."""
    assert inv.slurm is not None
    if long == "time":
        within_max_time(inv, where, f"--time={value}", tokens.slurm_seconds(value, f"{where}: --time"))
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
        nodes(inv, where, value, f"--nodelist={value}")
    elif long == "partition" and value != inv.slurm.partition:
        raise UsageError(f"{where}: --partition={value}: the cluster's partition is {inv.slurm.partition}")
    elif long in ("gpus", "gpus-per-node", "gpus-per-task", "gpus-per-socket", "cpus-per-gpu", "mem-per-gpu", "gres"):
        raise UsageError(f"{where}: --{long}={value}: the cluster has no GPUs or other generic resources")


def within_max_time(inv: Inventory, where: str, shown: str, seconds: int) -> None:
    assert inv.slurm is not None
    limit = tokens.slurm_seconds(inv.slurm.max_time, "slurm.max_time")
    if seconds > limit:
        raise UsageError(f"{where}: {shown} is over the cluster's longest, {inv.slurm.max_time} "
                         "(slurm.max_time): Slurm would hold the job forever")


def nodes(inv: Inventory, where: str, value: str, shown: str) -> list[str]:
    try:
        names = nodeset.expand(value)
    except UsageError as exc:  # a malformed set
        raise UsageError(f"{where}: {shown}: {exc}") from None
    unknown = [n for n in names if n not in {node.name for node in inv.nodes}]
    if unknown:
        raise UsageError(f"{where}: {shown}: {nodeset.fold(unknown)} not a node of the cluster ({nodeset.fold(n.name for n in inv.nodes)})")
    return names
