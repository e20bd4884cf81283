"""HAR start-up on Pi-shaped test hosts: from `picluster train har`'s start to the first training
step, for one or more revisions of picluster side by side on one lab.

Run as root, on a quiet machine (16 workers, 2 revisions, 2 rounds of 4 runs: about 15 minutes):
    .venv/bin/python benchmarks/har_startup.py --workers 16 --revision before=1133e55 --revision after=HEAD
    .venv/bin/python benchmarks/har_startup.py --report

The lab is har_wall.py's: 1 + --workers hosts (node01 the ps), each an equal share of this
machine's cores and the pi3b profile's 1 GiB, links shaped to --link.  Each revision is exported
(`git archive`) under benchmarks/results/startup-src/ and run through a python that puts it first
on the path: the coordinator, its evaluator and, through the inventory's venv, every node's
servers.  Round by round, each revision in turn: `cluster up`, --runs runs of

    picluster train har -i INVENTORY --workers N --epochs 1

(the defaults otherwise: the data set in the share, validation beside the coordinator), then
`cluster down`.  A row per run: the start-up (the command's start to state.json's start, which
the chief writes as its first step begins), the whole command, and the chief's own start-up line
(process, data, graph, session, barrier).  The first run after `cluster up` (``first`` = yes)
starts as soon as `cluster up` has returned (its time, ``up_s``, on that row): a node's server
reads the data set from the share once it serves, and a run finds it held (``held``) or waits for
that read (since 2026-12, before: the first run read it); later runs find it held, as a user's next run does.
Each row also has the end (``end_s``): from the time of metrics.csv's last row (the last epoch's,
or with --args' --target-val-accuracy the target's) to the command's end.
"""

import argparse
import csv
import json
import os
import re
import shlex
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from har_wall import prepared_har, stage_har
from labcluster import lab_cluster, pi_shaped

from picluster.jobs.har.metrics import read_rows

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results"
TABLE = RESULTS / "har_startup.csv"
FIELDS = ["revision", "commit", "round", "run", "first", "workers", "startup_s", "wall_s", "process_s", "data_s", "graph_s",
          "session_s", "barrier_s", "ok", "cpu_per_host", "link", "up_s", "held", "end_s", "args"]
PARTS = re.compile(r"replica 0: start-up: process ([\d.]+) s, data ([\d.]+) s( \(held\))?, graph ([\d.]+) s, session ([\d.]+) s, barrier ([\d.]+) s")


def export(name: str, rev: str) -> tuple[str, Path]:
    """(commit, a python that runs revision ``rev`` of picluster): the revision's tree under
    results/startup-src/NAME and, beside it, a venv-shaped folder whose bin/python puts that tree
    first on the path (the nodes run ``{venv}/bin/python``)."""
    commit = subprocess.run(["git", "-C", str(ROOT), "rev-parse", rev], capture_output=True, text=True, check=True).stdout.strip()
    home = RESULTS / "startup-src" / name
    shutil.rmtree(home, ignore_errors=True)
    (home / "src").mkdir(parents=True)
    archive = subprocess.run(["git", "-C", str(ROOT), "archive", commit, "picluster"], capture_output=True, check=True).stdout
    subprocess.run(["tar", "-x", "-C", str(home / "src")], input=archive, check=True)
    (home / "venv" / "bin").mkdir(parents=True)
    python = home / "venv" / "bin" / "python"
    python.write_text(f'#!/bin/sh\nPYTHONPATH={home / "src"} exec {sys.executable} "$@"\n')
    python.chmod(0o755)
    found = subprocess.run([str(python), "-c", "import picluster; print(picluster.__file__)"], capture_output=True, text=True,
                           cwd=home, check=True).stdout.strip()
    if not found.startswith(str(home / "src")):
        raise SystemExit(f"{name}: the exported python imports picluster from {found}, not from {home / 'src'}")
    return commit, home / "venv"


def picluster(venv: Path, *args: str, timeout: float = 900) -> subprocess.CompletedProcess:
    # Run from the revision's own folder: `python -m` puts the working directory first on the
    # path, and from the repository the coordinator would run the checkout's picluster instead.
    return subprocess.run([str(venv / "bin" / "python"), "-m", "picluster", *args], capture_output=True, text=True,
                          timeout=timeout, cwd=venv.parent)


def must(proc: subprocess.CompletedProcess, what: str) -> None:
    if proc.returncode != 0:
        raise SystemExit(f"{what} failed ({proc.returncode}): {proc.stderr.strip()[-1500:]}")


def one_run(venv: Path, inventory: Path, workers: int, run_dir: Path, extra: list[str]) -> dict:
    shutil.rmtree(run_dir, ignore_errors=True)
    started = time.time()
    proc = picluster(venv, "train", "har", "-i", str(inventory), "--workers", str(workers), "--epochs", "1", "--no-live", "--json",
                     "--run-dir", str(run_dir), *extra)
    ended = time.time()
    row: dict = {"wall_s": f"{ended - started:.1f}", "ok": "yes" if proc.returncode == 0 else f"exit {proc.returncode}"}
    last = (read_rows(run_dir / "metrics.csv") or [{}])[-1].get("time")
    if last:  # the row that ended the run (the last epoch's, or the target's) to the command's end
        row["end_s"] = f"{ended - float(last):.2f}"
    try:
        row["startup_s"] = f"{json.loads((run_dir / 'state.json').read_text())['started'] - started:.1f}"
    except (OSError, ValueError, KeyError):
        row["ok"] = f"{row['ok']}; no start in state.json"
    parts = PARTS.search((run_dir / "worker-0.log").read_text()) if (run_dir / "worker-0.log").exists() else None
    if parts:
        process, data, held, graph, session, barrier = parts.groups()
        row |= {"process_s": process, "data_s": data, "graph_s": graph, "session_s": session, "barrier_s": barrier,
                "held": "yes" if held else "no"}
    return row


def load(path: Path) -> list[dict]:
    return list(csv.DictReader(path.open())) if path.exists() else []


def report(rows: list[dict]) -> None:
    names = list(dict.fromkeys(r["revision"] for r in rows))
    print("| revision | commit | runs | start-up, s: median (range) | first run after cluster up, s | cluster up, s "
          "| chief: graph / session / barrier, s (medians) | whole command, s | the last row to the command's end, s: median (range), every run |")
    print("|---|---|---|---|---|---|---|---|---|")
    for name in names:
        mine = [r for r in rows if r["revision"] == name and r["ok"] == "yes"]
        later = [r for r in mine if r["first"] == "no"]
        first = [r for r in mine if r["first"] == "yes"]
        if not later:
            continue
        start = [float(r["startup_s"]) for r in later]
        ends = [float(r["end_s"]) for r in mine if r.get("end_s")]
        print(f"| {name} | {later[0]['commit'][:7]} | {len(later)} | {statistics.median(start):.1f} ({min(start):.1f}-{max(start):.1f}) | "
              f"{', '.join(r['startup_s'] for r in first)} | {', '.join(r.get('up_s') or '-' for r in first)} | {_median(later, 'graph_s')} / {_median(later, 'session_s')} / "
              f"{_median(later, 'barrier_s')} | {_median(later, 'wall_s')} | "
              + (f"{statistics.median(ends):.2f} ({min(ends):.2f}-{max(ends):.2f})" if ends else "-") + " |")
    if len(names) == 2:
        for first, what in (("no", "later runs"), ("yes", "first runs after cluster up")):
            pairs = list(zip(*([r for r in rows if r["revision"] == n and r["ok"] == "yes" and r["first"] == first] for n in names)))
            if pairs:
                saved = [float(a["startup_s"]) - float(b["startup_s"]) for a, b in pairs]
                print(f"\n{names[0]} minus {names[1]}, {what}, run by run ({len(saved)} pairs): median {statistics.median(saved):.1f} s "
                      f"({min(saved):.1f} to {max(saved):.1f})")


def _median(rows: list[dict], key: str) -> str:
    return f"{statistics.median(float(r[key]) for r in rows if r.get(key)):.1f}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workers", type=int, default=16)
    parser.add_argument("--revision", action="append", default=[], metavar="NAME=REV",
                        help="a git revision to measure, named (repeat; default: HEAD as 'head')")
    parser.add_argument("--runs", type=int, default=4, help="runs per revision and round (the first after cluster up is marked) [4]")
    parser.add_argument("--rounds", type=int, default=2, help="rounds of every revision in turn [2]")
    parser.add_argument("--link", default="300mbit")
    parser.add_argument("--args", default="", help="more `train har` options, e.g. '--epochs 6 --target-val-accuracy 0.85' (a run that ends at a target)")
    parser.add_argument("--rows", type=Path, default=TABLE)
    parser.add_argument("--report", action="store_true", help="only print the table of the rows kept")
    args = parser.parse_args()
    rows = load(args.rows)
    if args.report:
        report(rows)
        return
    prepared_har()
    revisions = [r.partition("=")[::2] for r in args.revision] or [("head", "HEAD")]
    exported = {name: export(name, rev) for name, rev in revisions}
    hosts = 1 + args.workers
    limits = pi_shaped(hosts)
    cpu = limits.cpu
    with lab_cluster(hosts, limits, rate=args.link, start=False) as (lab, inventory, inv):
        stage_har(lab.hosts[1:], inv, lab.host(inv.nfs_master))
        text = inventory.read_text()
        for round_ in range(1, args.rounds + 1):
            for name, (commit, venv) in exported.items():
                mine = inventory.with_name(f"startup-{name}.toml")
                mine.write_text(text.replace(f'venv = "{sys.prefix}"', f'venv = "{venv}"', 1))
                began = time.time()
                must(picluster(venv, "cluster", "up", "-i", str(mine)), f"{name}: cluster up")
                up_s = f"{time.time() - began:.1f}"
                try:
                    for run in range(1, args.runs + 1):
                        row = {"revision": name, "commit": commit, "round": round_, "run": run, "first": "yes" if run == 1 else "no",
                               "workers": args.workers, "cpu_per_host": f"{cpu:.3f}", "link": args.link,
                               "up_s": up_s if run == 1 else "", "args": args.args}
                        row |= one_run(venv, mine, args.workers, RESULTS / "startup-runs" / f"{name}-{round_}-{run}", shlex.split(args.args))
                        print(f"{name} round {round_} run {run}: {json.dumps(row)}", flush=True)
                        rows.append(row)
                        args.rows.parent.mkdir(parents=True, exist_ok=True)
                        with args.rows.open("w", newline="") as out:
                            writer = csv.DictWriter(out, FIELDS, extrasaction="ignore")
                            writer.writeheader()
                            writer.writerows(rows)
                finally:
                    must(picluster(venv, "cluster", "down", "-i", str(mine)), f"{name}: cluster down")
    report(rows)


if __name__ == "__main__":
    os.umask(0o022)
    main()
