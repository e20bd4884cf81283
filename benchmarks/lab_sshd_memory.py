"""How much memory a test host's sshd and one SSH login need: the floor behind `lab up --memory`.

Run as root: .venv/bin/python benchmarks/lab_sshd_memory.py   (no TensorFlow; under a minute)

One test host limited to 64 MiB.  After one login has run `true`, its cgroup's peak
(memory.max_usage_in_bytes, or memory.peak on cgroup v2: kernel memory included) is what sshd and
a login need.  Then the live host's limit is lowered step by step, written straight to the cgroup
(below the 16 MiB that `--memory` accepts), and a fresh login is tried at each step: the table
says whether it ran and how many processes the host's OOM killer took.
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from picluster.lab import Lab
from picluster.lab.cgroups import Cgroup
from picluster.lab.limits import MIN_MEMORY, Limits

MiB = 2**20
STEPS_MIB = (16, 8, 6, 4, 3)


def login(lab: Lab) -> str:
    try:
        with lab.connect(lab.hosts[0], timeout=20) as conn:
            result = conn.run("true", hide=True, warn=True, timeout=30)
        return "ran" if result.exited == 0 else f"exit {result.exited}"
    except Exception as exc:  # (any failure to log in is the answer, shown as it came)
        return f"failed: {type(exc).__name__}"


def set_limit(group: Cgroup, limit: int) -> None:
    dirs = group.dirs()
    if group.version == 2:
        (dirs["unified"] / "memory.max").write_text(str(limit))
        return
    (dirs["memory"] / "memory.limit_in_bytes").write_text(str(limit))
    memsw = dirs["memory"] / "memory.memsw.limit_in_bytes"
    if memsw.exists():
        memsw.write_text(str(limit))


def main() -> None:
    with Lab(nodes=1, limits=Limits(memory=64 * MiB)) as lab:
        group = Cgroup(lab.hosts[0].cgroup)
        first = login(lab)
        peak = group.usage()["memory_peak"]
        print(f"one host, 64 MiB: first login {first}; sshd + one login peaked at {peak / MiB:.1f} MiB "
              f"(lab up refuses --memory under {MIN_MEMORY // MiB} MiB)\n")
        print("| limit MiB | a fresh login | OOM kills so far |")
        print("|---|---|---|")
        for mib in STEPS_MIB:
            try:
                set_limit(group, mib * MiB)
            except OSError as exc:  # the kernel refuses a limit below what it cannot reclaim
                print(f"| {mib} | limit refused by the kernel ({exc.strerror}) | {group.usage()['oom_kills']} |")
                continue
            print(f"| {mib} | {login(lab)} | {group.usage()['oom_kills']} |", flush=True)


if __name__ == "__main__":
    main()
