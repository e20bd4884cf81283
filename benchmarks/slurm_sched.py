"""What a scheduling discipline buys: the same jobs of known length under Slurm's FIFO and backfill.

    .venv/bin/python benchmarks/slurm_sched.py [--rounds 2] [--out benchmarks/results/slurm_sched.csv]

A lab of 3 Pi-shaped hosts gets Slurm from `picluster provision` (the [slurm] table), once with
`scheduler = "builtin"` (first in, first out) and once with "backfill" (the default), in
alternation, `--rounds` times each.  Each time the same five `sleep` jobs are queued at once with
`picluster submit` (name: nodes x seconds, run-time limit):

    long   2 x 100 s, limit 2 min     wide  3 x 30 s, limit 1 min    short1  1 x 30 s, limit 1 min
    short2 1 x 30 s, limit 1 min      tail  1 x 90 s, limit 2 min

Each job's submit, start and end times come from Slurm (squeue).  Printed per discipline: each
job's wait, the makespan (first submit to last end), the mean wait, and utilisation (node-seconds
busy / node-seconds of the 3 nodes over the makespan).  The jobs only sleep: what differs is
where Slurm puts them in time, not how fast the hosts compute.
"""

import argparse
import csv
import shutil
import statistics
import sys
import time
from datetime import datetime
from pathlib import Path
from types import SimpleNamespace

from labcluster import ROOT, cli, lab_inventory

from picluster.lab import Lab
from picluster.lab.limits import Limits
from picluster.provision.steps.munge import key_path

JOBS = [("long", 2, 100, "2"), ("wide", 3, 30, "1"), ("short1", 1, 30, "1"), ("short2", 1, 30, "1"), ("tail", 1, 90, "2")]
NODES = 3
ENDED = {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT"}


def with_scheduler(path: Path, scheduler: str) -> Path:
    text = path.read_text().split("\n[slurm]")[0]
    path.write_text(text + f'\n[slurm]\nscheduler = "{scheduler}"\n')
    return path


def squeue(host, ids: list[str]) -> dict[str, dict[str, str]]:
    out = host.run(["squeue", "--noheader", "--states=all", f"--jobs={','.join(ids)}", "--format=%i|%T|%V|%S|%e"]).stdout
    rows = {}
    for line in out.splitlines():
        jid, state, submit, start, end = line.split("|")
        rows[jid] = {"state": state, "submit": submit, "start": start, "end": end}
    return rows


def seconds(stamp: str) -> float:
    return datetime.fromisoformat(stamp).timestamp()


def one_round(lab: Lab, path: Path, scheduler: str, known_hosts: Path) -> list[dict]:
    inv = str(with_scheduler(path, scheduler))
    cli("provision", "-i", inv, "--only", "slurm,queue", "--known-hosts", str(known_hosts), "--venv", sys.prefix)
    controller = lab.host("node01")
    conf = controller.read_file("/etc/slurm/slurm.conf")
    assert f"SchedulerType=sched/{scheduler}\n" in conf, "slurm.conf does not name the scheduler"
    ids = {}
    for name, nodes, length, limit in JOBS:
        ids[cli("submit", "-i", inv, "--nodes", str(nodes), "--time", limit, "--name", name, "--", "sleep", str(length)).strip().split(":")[1]] = name
    while True:
        rows = squeue(controller, list(ids))
        if len(rows) == len(ids) and all(r["state"] in ENDED for r in rows.values()):
            break
        time.sleep(2)
    out = []
    for jid, name in ids.items():
        r = rows[jid]
        nodes, length = next((n, s) for j, n, s, _ in JOBS if j == name)
        out.append({"scheduler": scheduler, "job": name, "nodes": nodes, "length_s": length, "state": r["state"],
                    "submit": seconds(r["submit"]), "start": seconds(r["start"]), "end": seconds(r["end"])})
    first = min(r["submit"] for r in out)
    for r in out:
        r["wait_s"] = r["start"] - r["submit"]
        r["start_s"], r["end_s"] = r["start"] - first, r["end"] - first
    return out


def summary(rows: list[dict]) -> dict:
    makespan = max(r["end_s"] for r in rows)
    busy = sum(r["nodes"] * (r["end"] - r["start"]) for r in rows)
    return {"makespan_s": makespan, "mean_wait_s": statistics.mean(r["wait_s"] for r in rows),
            "utilisation": busy / (NODES * makespan)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "slurm_sched.csv")
    args = parser.parse_args()
    all_rows: list[dict] = []
    with Lab(nodes=NODES, limits=Limits(cpu=0.3, memory=2**30)) as lab:
        try:
            path = lab_inventory(lab)
            for rnd in range(1, args.rounds + 1):
                for scheduler in ("builtin", "backfill"):
                    rows = one_round(lab, path, scheduler, lab.known_hosts_path)
                    for r in rows:
                        r["round"] = rnd
                    all_rows += rows
                    s = summary(rows)
                    waits = ", ".join(f"{r['job']} {r['wait_s']:.0f}" for r in rows)
                    print(f"round {rnd} {scheduler:8}: makespan {s['makespan_s']:.0f} s, mean wait {s['mean_wait_s']:.0f} s, "
                          f"utilisation {s['utilisation']:.2f}; waits (s): {waits}", flush=True)
        finally:  # the munge key provisioning kept on this machine for the lab's cluster
            shutil.rmtree(key_path(SimpleNamespace(name=f"lab-{lab.id}")).parent, ignore_errors=True)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    with open(args.out, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(all_rows[0]))
        writer.writeheader()
        writer.writerows(all_rows)
    for scheduler in ("builtin", "backfill"):
        per_round = [summary([r for r in all_rows if r["scheduler"] == scheduler and r["round"] == n])
                     for n in range(1, args.rounds + 1)]
        waits = {j: statistics.median(r["wait_s"] for r in all_rows if r["scheduler"] == scheduler and r["job"] == j)
                 for j, *_ in JOBS}
        print(f"{scheduler:8} (median of {args.rounds}): makespan {statistics.median(p['makespan_s'] for p in per_round):.0f} s, "
              f"mean wait {statistics.median(p['mean_wait_s'] for p in per_round):.0f} s, "
              f"utilisation {statistics.median(p['utilisation'] for p in per_round):.2f}; "
              + ", ".join(f"{j} waits {w:.0f} s" for j, w in waits.items()))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
