"""The embedded default against TensorFlow's own start-up, side by side in one run.

    .venv/bin/python benchmarks/embedded.py [--rounds 5]

Times, alternating round by round so a drift of the machine hits all alike: a bare
``python -c "import tensorflow"``; ``picluster run montecarlo --samples 1e8 --nodes 8`` on the
temporary local cluster (every task's server in one process); and the same with one process per
task (PICLUSTER_TEMPORARY_SERVERS=per-task, as before).  Prints each one's median wall time, its
ratio to the bare import, and where the job's time went (its own ``cluster start + graph build +
compute`` line, medians).  Needs the machine to itself.
"""

import argparse
import os
import re
import statistics
import subprocess
import sys
import time

CARD = ["run", "montecarlo", "--samples", "1e8", "--nodes", "8"]
PARTS = re.compile(r"cluster start ([\d.]+) s \+ graph build ([\d.]+) s \+ compute ([\d.]+) s")


def timed(argv: list[str], env: dict) -> tuple[float, tuple[float, ...] | None]:
    start = time.perf_counter()
    proc = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=600)
    wall = time.perf_counter() - start
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(argv)} failed ({proc.returncode}): {proc.stderr.strip()[-500:]}")
    found = PARTS.search(proc.stdout)
    return wall, tuple(float(x) for x in found.groups()) if found else None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--no-per-task", action="store_true", help="leave out the one-process-per-task cluster")
    args = parser.parse_args()
    env = dict(os.environ)
    env.pop("PICLUSTER_TEMPORARY_SERVERS", None)
    cases = {
        "import tensorflow": ([sys.executable, "-c", "import tensorflow"], env),
        "montecarlo, servers in one process": ([sys.executable, "-m", "picluster", *CARD], env),
    }
    if not args.no_per_task:
        cases["montecarlo, one process per task"] = ([sys.executable, "-m", "picluster", *CARD],
                                                     env | {"PICLUSTER_TEMPORARY_SERVERS": "per-task"})
    walls: dict[str, list[float]] = {name: [] for name in cases}
    parts: dict[str, list[tuple[float, ...]]] = {name: [] for name in cases}
    for r in range(args.rounds):
        for name, (argv, case_env) in cases.items():
            wall, split = timed(argv, case_env)
            walls[name].append(wall)
            if split:
                parts[name].append(split)
            print(f"round {r + 1}: {name}: {wall:.2f} s", file=sys.stderr, flush=True)
    bare = statistics.median(walls["import tensorflow"])
    print(f"picluster {' '.join(CARD)} against a bare import of TensorFlow, medians of {args.rounds} rounds")
    print("| case | wall | ratio to the import | cluster start + graph build + compute |")
    print("|---|---|---|---|")
    for name, values in walls.items():
        split = parts[name]
        where = " + ".join(f"{statistics.median(p[i] for p in split):.2f} s" for i in range(3)) if split else "-"
        print(f"| {name} | {statistics.median(values):.2f} s | {statistics.median(values) / bare:.2f}x | {where} |")


if __name__ == "__main__":
    main()
