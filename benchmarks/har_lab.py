"""HAR training on Pi-shaped test hosts: seconds per epoch, time to validation >= 90 %, speedup and
efficiency for 1, 2, 4 and 8 workers, sync and async.

Run as root, on a quiet machine (one configuration per run keeps each run short; results merge):
    .venv/bin/python benchmarks/har_lab.py --workers 1 --modes sync
    .venv/bin/python benchmarks/har_lab.py --workers 2,4,8 --modes sync,async
    .venv/bin/python benchmarks/har_lab.py --report        # table and figures from what was measured

1 + max(--hosts-for) test hosts (node01 ps, the rest workers), every host limited to the same CPU
share, this machine's cores / hosts (0.22 of a core for 1 ps + 8 workers: N·C at most the cores,
so the hosts compute side by side), and the pi3b profile's 1 GiB.  A run with fewer workers
leaves the other hosts idle, so each configuration gets the same per-host CPU: a worker is the
same "board" in every row, as in a cluster that grows by adding Pis.  (At the pi3b profile's
calibrated 5 % of a core one epoch would take minutes; a share four times larger keeps each
configuration to minutes while keeping the boards equal.)

Each configuration is `picluster train har -i ... --workers N --mode M --target-val-accuracy 0.9
--epochs E` with the defaults otherwise (one TensorFlow runtime per worker node).  Seconds per
epoch is the mean over the epochs after the first; time to 90 % counts from the command's start
(cluster attach, clients starting, TensorFlow imports on 0.22-core hosts, graph building) to the
epoch whose validation accuracy first reached 0.9.  Speedup is 1 worker's seconds per epoch over
N's, efficiency speedup / N, per mode.  The chief's agents record every host's CPU and memory.
"""

import argparse
import csv
import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from labcluster import lab_cluster

from picluster.data.har import har_dir
from picluster.data.har.dataset import CACHE_NAME
from picluster.lab.limits import Limits, fair_share, machine, resolve
from picluster.plots import plot

RESULTS = Path(__file__).resolve().parent / "results"
TABLE = RESULTS / "har_lab.csv"
COLUMNS = ("mode", "workers", "s_per_epoch", "time_to_90_s", "best_val_acc", "epochs", "cpu_per_host", "ok")


def load() -> dict[tuple[str, int], dict]:
    if not TABLE.exists():
        return {}
    with open(TABLE, newline="") as f:
        return {(r["mode"], int(r["workers"])): r for r in csv.DictReader(f)}


def save(rows: dict[tuple[str, int], dict]) -> None:
    RESULTS.mkdir(parents=True, exist_ok=True)
    with open(TABLE, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=COLUMNS)
        writer.writeheader()
        for key in sorted(rows):
            writer.writerow({c: rows[key].get(c, "") for c in COLUMNS})


def one(inventory: Path, mode: str, workers: int, epochs: int, run_dir: Path) -> dict:
    started = time.time()
    proc = subprocess.run([sys.executable, "-m", "picluster", "train", "har", "-i", str(inventory), "--workers", str(workers),
                           "--mode", mode, "--epochs", str(epochs), "--target-val-accuracy", "0.9", "--run-dir", str(run_dir),
                           "--no-live", "--json"], capture_output=True, text=True, timeout=3 * 3600)
    with open(run_dir / "metrics.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    later = [float(r["epoch_s"]) for r in rows[1:]] or [float(r["epoch_s"]) for r in rows]
    reached = next((float(r["time"]) - started for r in rows if float(r["val_acc"]) >= 0.9), None)
    return {"mode": mode, "workers": workers, "s_per_epoch": f"{sum(later) / len(later):.2f}",
            "time_to_90_s": f"{reached:.0f}" if reached is not None else "",
            "best_val_acc": f"{max(float(r['val_acc']) for r in rows):.4f}", "epochs": len(rows),
            "ok": "yes" if proc.returncode == 0 else proc.stderr.strip().splitlines()[-1][:200]}


def report(rows: dict[tuple[str, int], dict], figures: Path) -> None:
    print("| mode | workers | s/epoch | time to val >= 90 % | best val acc (epochs) | speedup | efficiency |")
    print("|---|---|---|---|---|---|---|")
    for (mode, workers), r in sorted(rows.items()):
        base = rows.get((mode, 1))
        speedup = float(base["s_per_epoch"]) / float(r["s_per_epoch"]) if base else None
        reached = f"{float(r['time_to_90_s']):.0f} s" if r["time_to_90_s"] else f"not in {r['epochs']} epochs"
        print(f"| {mode} | {workers} | {float(r['s_per_epoch']):.1f} | {reached} | {float(r['best_val_acc']):.1%} ({r['epochs']}) | "
              + (f"{speedup:.2f} | {speedup / workers:.0%} |" if speedup else "- | - |"))
    cpu = {r["cpu_per_host"] for r in rows.values()}
    print(f"\nper host: {', '.join(sorted(cpu))} CPU and 1 GiB; failed runs: "
          + (", ".join(f"{m} x{w}: {r['ok']}" for (m, w), r in rows.items() if r["ok"] != "yes") or "none"))
    for path in plot(TABLE, figures, ("png",), title="HAR on Pi-shaped test hosts: scaling by workers"):
        print(f"figure: {path}")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--workers", default="1,2,4,8")
    parser.add_argument("--modes", default="sync,async")
    parser.add_argument("--hosts-for", type=int, default=8, help="workers the lab is sized for (fixes the CPU share)")
    parser.add_argument("--epochs", type=int, default=30, help="at most this many (a run stops at validation >= 90 %%)")
    parser.add_argument("--report", action="store_true", help="only print the table and draw the figures")
    parser.add_argument("--figures", type=Path, default=Path(__file__).resolve().parent.parent / "docs" / "images")
    args = parser.parse_args()
    rows = load()
    if args.report:
        report(rows, args.figures)
        return
    har = har_dir() / CACHE_NAME
    if not har.exists():
        raise SystemExit(f"no prepared HAR data at {har}: run 'picluster data har' first")
    hosts = 1 + args.hosts_for
    cpu = fair_share(machine()[0], hosts)
    limits = Limits(cpu=cpu, memory=resolve(hosts, profile="pi3b").memory)
    wanted = [(m, int(w)) for m in args.modes.split(",") for w in args.workers.split(",")]
    with lab_cluster(hosts, limits) as (lab, inventory, inv):
        for host in lab.hosts[1:]:
            target = host.path(f"{inv.data_dir}/har")
            target.mkdir(parents=True, exist_ok=True)
            shutil.copy2(har, target / CACHE_NAME)
        for mode, workers in wanted:
            run_dir = RESULTS / "har_lab" / f"{mode}-{workers}"
            shutil.rmtree(run_dir, ignore_errors=True)
            run_dir.parent.mkdir(parents=True, exist_ok=True)
            t0 = time.perf_counter()
            row = one(inventory, mode, workers, args.epochs, run_dir)
            row["cpu_per_host"] = f"{cpu:g}"
            rows[(mode, workers)] = row
            save(rows)
            print(f"{mode} x{workers}: {json.dumps(row)} ({time.perf_counter() - t0:.0f} s)", flush=True)
    report(rows, args.figures)


if __name__ == "__main__":
    main()
