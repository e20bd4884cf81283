"""HAR training on Pi-shaped test hosts: seconds per epoch, time to validation >= 90 %, speedup and
efficiency for 1, 2, 4 and 8 workers, sync and async.

Run as root, on a quiet machine (one configuration per run keeps each run short; results merge):
    .venv/bin/python benchmarks/har_lab.py --workers 1 --modes sync
    .venv/bin/python benchmarks/har_lab.py --workers 2,4,8 --modes sync,async
    .venv/bin/python benchmarks/har_lab.py --report        # table and figures from what was measured
    # 1 to 16 workers on 17 hosts at the fair share (2 cores / 17), a figure of their own
    .venv/bin/python benchmarks/har_lab.py --workers 1,2,4,8,16 --modes sync --hosts-for 16 --epochs 60 \
        --variants 'h17=' --draw h17
    # the exchange side by side: the thesis' fixed global batch against the defaults
    .venv/bin/python benchmarks/har_lab.py --workers 1,8 --modes sync --epochs 4 --no-target \
        --variants 'global=--global-batch --lr-scaling none --warmup-epochs 0;default='
    # 1, 2 and 3 ps tasks side by side: node01 a ps only, node02 and node03 a ps beside their worker
    .venv/bin/python benchmarks/har_lab.py --workers 8 --modes sync --epochs 6 --no-target --ps-hosts 3 \
        --variants '1ps=--ps 1;2ps=--ps 2;3ps=--ps 3'
    # the same with every ps on a host of its own (3 + 8 hosts, so a smaller share each)
    .venv/bin/python benchmarks/har_lab.py --workers 8 --modes sync --epochs 6 --no-target --ps-hosts 3 --ps-apart \
        --variants 'a1ps=--ps 1;a3ps=--ps 3'

Each row also says where a step's time goes (``--breakdown``): per worker step, the windows fed,
the input pipeline, the session call (compute, exchange with the ps and waiting for the others),
the measured cost of moving the weights and gradients once, and each host's CPU (ps and workers)
while training, from the run's nodes.csv.

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
import itertools
import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from labcluster import lab_cluster, pi_shaped

from picluster.data.har import har_dir
from picluster.data.har.dataset import CACHE_NAME
from picluster.plots import plot

RESULTS = Path(__file__).resolve().parent / "results"
TABLE = RESULTS / "har_lab.csv"
COLUMNS = ("variant", "mode", "workers", "s_per_epoch", "time_to_90_s", "start_s", "best_val_acc", "epochs", "cpu_per_host",
           "steps_per_epoch", "input_ms", "session_ms", "exchange_ms", "ps_cpu", "worker_cpu", "busiest_cpu", "ps_hosts", "ok")


def load() -> dict[tuple[str, str, int], dict]:
    if not TABLE.exists():
        return {}
    with open(TABLE, newline="") as f:
        return {(r.get("variant") or "default", r["mode"], int(r["workers"])): r for r in csv.DictReader(f)}


def save(rows: dict[tuple[str, str, int], dict]) -> None:
    RESULTS.mkdir(parents=True, exist_ok=True)
    with open(TABLE, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=COLUMNS)
        writer.writeheader()
        for key in sorted(rows):
            writer.writerow({c: rows[key].get(c, "") for c in COLUMNS})


def one(inventory: Path, mode: str, workers: int, epochs: int, run_dir: Path, extra: list[str], target: bool) -> dict:
    started = time.time()
    proc = subprocess.run([sys.executable, "-m", "picluster", "train", "har", "-i", str(inventory), "--workers", str(workers),
                           "--mode", mode, "--epochs", str(epochs), *(["--target-val-accuracy", "0.9"] if target else []),
                           "--run-dir", str(run_dir), "--no-live", "--json", *extra], capture_output=True, text=True, timeout=3 * 3600)
    with open(run_dir / "metrics.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    later = rows[1:] or rows
    mean = lambda key: sum(float(r[key] or 0) for r in later) / len(later)
    reached = next((float(r["time"]) - started for r in rows if float(r["val_acc"]) >= 0.9), None)
    steps = _steps_per_epoch(rows) // (workers if mode == "async" else 1)  # async: every worker's step counts
    ps_cpu, worker_cpu, busiest = _cpu(run_dir, float(rows[0]["time"]) - float(rows[0]["epoch_s"]), float(rows[-1]["time"]))
    return {"mode": mode, "workers": workers, "s_per_epoch": f"{mean('epoch_s'):.2f}",
            "time_to_90_s": f"{reached:.0f}" if reached is not None else "",
            "start_s": f"{float(rows[0]['time']) - float(rows[0]['epoch_s']) - started:.0f}",
            "best_val_acc": f"{max(float(r['val_acc']) for r in rows):.4f}", "epochs": len(rows),
            "steps_per_epoch": steps,
            "input_ms": f"{1000 * mean('input_s') / max(steps, 1):.0f}",
            # The chief's session calls; replica.py books the probed exchange apart from compute_s.
            "session_ms": f"{1000 * (mean('compute_s') + mean('exchange_s')) / max(steps, 1):.0f}",
            "exchange_ms": f"{1000 * mean('exchange_s') / max(steps, 1):.0f}",
            "ps_cpu": ps_cpu, "worker_cpu": worker_cpu, "busiest_cpu": busiest,
            "ok": "yes" if proc.returncode == 0 else (proc.stderr.strip().splitlines() or ["?"])[-1][:200]}


def _steps_per_epoch(rows: list[dict]) -> int:
    """Each worker's steps in an epoch, from the global step's progress (sync: one per update)."""
    steps = [int(b["global_step"]) - int(a["global_step"]) for a, b in itertools.pairwise(rows) if a["global_step"] and b["global_step"]]
    return max(steps) if steps else int(rows[0]["global_step"] or 0)


def _cpu(run_dir: Path, begin: float, end: float) -> tuple[str, str, str]:
    """Mean CPU (% of each host's share) while training: of node01 (a ps only), of the busy worker
    hosts, and the busiest host's (a host with a ps beside its worker shows here)."""
    path = run_dir / "nodes.csv"
    if not path.exists():
        return "", "", ""
    by_node: dict[str, list[float]] = {}
    with open(path, newline="") as f:
        for r in csv.DictReader(f):
            if begin <= float(r["time"]) <= end and r["cpu_percent"]:
                by_node.setdefault(r["node"], []).append(float(r["cpu_percent"]))
    means = {node: sum(v) / len(v) for node, v in by_node.items() if v}
    busiest = f"{max(means.values()):.0f}" if means else ""
    ps = means.pop("node01", None)
    busy = [m for m in means.values() if m >= 5.0]  # hosts of workers this run did not use idle
    return (f"{ps:.0f}" if ps is not None else ""), (f"{sum(busy) / len(busy):.0f}" if busy else ""), busiest


def report(rows: dict[tuple[str, str, int], dict], figures: Path, drawn: tuple[str, ...] = ("default",)) -> None:
    print("| variant | mode | workers | s/epoch | time to val >= 90 % | start-up | best val acc (epochs) | speedup | efficiency |"
          " steps/epoch | input ms/step | session ms/step | exchange ms/step | node01 (ps) CPU % | worker CPU % | busiest host CPU % |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for (variant, mode, workers), r in sorted(rows.items()):
        base = rows.get((variant, mode, 1))
        speedup = float(base["s_per_epoch"]) / float(r["s_per_epoch"]) if base else None
        reached = f"{float(r['time_to_90_s']):.0f} s" if r["time_to_90_s"] else f"not in {r['epochs']} epochs"
        print(f"| {variant} | {mode} | {workers} | {float(r['s_per_epoch']):.1f} | {reached} | {r.get('start_s') or '-'} s | "
              f"{float(r['best_val_acc']):.1%} ({r['epochs']}) | "
              + (f"{speedup:.2f} | {speedup / workers:.0%} |" if speedup else "- | - |")
              + "".join(f" {r.get(k) or '-'} |" for k in ("steps_per_epoch", "input_ms", "session_ms", "exchange_ms", "ps_cpu", "worker_cpu", "busiest_cpu")))
    cpu = {r["cpu_per_host"] for r in rows.values()}
    print(f"\nper host: {', '.join(sorted(cpu))} CPU and 1 GiB; failed runs: "
          + (", ".join(f"{v} {m} x{w}: {r['ok']}" for (v, m, w), r in rows.items() if r["ok"] != "yes") or "none"))
    for variant in drawn:  # a figure per variant asked for, from its rows only (har_lab_<variant>.png)
        chosen = {(m, w): r for (v, m, w), r in rows.items() if v == variant}
        if not chosen:
            continue
        source = RESULTS / f"har_lab_{variant}.csv"
        with open(source, "w", newline="") as f:
            writer = csv.DictWriter(f, fieldnames=COLUMNS[1:])
            writer.writeheader()
            for key in sorted(chosen):
                writer.writerow({c: chosen[key].get(c, "") for c in COLUMNS[1:]})
        shape = "" if variant == "default" else f" ({chosen[min(chosen)]['cpu_per_host']} of a core each)"
        for path in plot(source, figures, ("png",), title=f"HAR on Pi-shaped test hosts: scaling by workers{shape}"):
            print(f"figure: {path}")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--workers", default="1,2,4,8")
    parser.add_argument("--modes", default="sync,async")
    parser.add_argument("--hosts-for", type=int, default=8, help="workers the lab is sized for (fixes the CPU share)")
    parser.add_argument("--epochs", type=int, default=30, help="at most this many (a run stops at validation >= 90 %%)")
    parser.add_argument("--variants", default="default=",
                        help="NAME=EXTRA TRAIN OPTIONS;... each run side by side (default: the defaults)")
    parser.add_argument("--ps-hosts", type=int, default=1,
                        help="hosts with a ps task: node01 a ps only, node02... a ps beside their worker (pick with --ps N)")
    parser.add_argument("--ps-apart", action="store_true",
                        help="every --ps-hosts host a ps only, with --hosts-for more hosts for the workers")
    parser.add_argument("--no-target", action="store_true", help="run every epoch (no stop at validation >= 90 %%)")
    parser.add_argument("--report", action="store_true", help="only print the table and draw the figures")
    parser.add_argument("--figures", type=Path, default=Path(__file__).resolve().parent.parent / "docs" / "images")
    parser.add_argument("--draw", default="default", help="variants to draw a figure of, comma-separated [default]")
    args = parser.parse_args()
    if args.ps_hosts < 1:
        parser.error("--ps-hosts must be at least 1")
    rows = load()
    if args.report:
        report(rows, args.figures, tuple(args.draw.split(",")))
        return
    har = har_dir() / CACHE_NAME
    if not har.exists():
        raise SystemExit(f"no prepared HAR data at {har}: run 'picluster data har' first")
    hosts = (args.ps_hosts if args.ps_apart else 1) + args.hosts_for
    limits = pi_shaped(hosts)
    cpu = limits.cpu
    variants = dict(v.split("=", 1) for v in args.variants.split(";"))
    # Interleaved: variants of one configuration back to back, so a drift of the machine hits them alike.
    wanted = [(v, m, int(w)) for m in args.modes.split(",") for w in args.workers.split(",") for v in variants]
    with lab_cluster(hosts, limits, ps_hosts=args.ps_hosts, beside=not args.ps_apart) as (lab, inventory, inv):
        for host in lab.hosts[1:]:
            target = host.path(f"{inv.data_dir}/har")
            target.mkdir(parents=True, exist_ok=True)
            shutil.copy2(har, target / CACHE_NAME)
        for variant, mode, workers in wanted:
            run_dir = RESULTS / "har_lab" / f"{variant}-{mode}-{workers}"
            shutil.rmtree(run_dir, ignore_errors=True)
            run_dir.parent.mkdir(parents=True, exist_ok=True)
            t0 = time.perf_counter()
            row = one(inventory, mode, workers, args.epochs, run_dir, variants[variant].split(), not args.no_target)
            row["cpu_per_host"] = f"{cpu:g}"
            row["variant"] = variant
            row["ps_hosts"] = f"{args.ps_hosts}{' apart' if args.ps_apart else ''}"
            rows[(variant, mode, workers)] = row
            save(rows)
            print(f"{variant} {mode} x{workers}: {json.dumps(row)} ({time.perf_counter() - t0:.0f} s)", flush=True)
    report(rows, args.figures, tuple(args.draw.split(",")))


if __name__ == "__main__":
    main()
