"""Where an update's time goes, exchange by exchange, on Pi-shaped test hosts: each worker's
compute, its own and the ps's CPU per update, the bytes each link carries, and the epoch they add
up to, beside one Pi alone.  The rows feed the cost model (har_cost.py).

Run as root, on a quiet machine (about 2 minutes a run):
    .venv/bin/python benchmarks/har_exchange.py --workers 8,16 --ps-hosts 2 \\
        --designs "ps=--ps 1 --exchange fused;ps2=--ps 2 --exchange fused;bf16=--ps 1 --wire bfloat16;variables=--ps 1 --exchange variables;allreduce=--exchange allreduce"
    .venv/bin/python benchmarks/har_exchange.py --report

The lab: --ps-hosts + max(--workers) hosts (node01.. the ps hosts, the rest a worker each), each
an equal share of this machine's cores and the pi3b profile's 1 GiB, every link shaped to --link
(300 Mbit/s: a Pi 3B+).  `cluster up` once.  Then per worker count, each design is
`picluster train har -i INV --workers N --epochs E --seed S` with the design's options and the
defaults otherwise (the update of 400 windows from 8 workers on), and one Pi alone
(`--standalone --threads 1` on the first worker's host, its server stopped for it, as
har_wall.py runs it).  While a run trains, every host's CPU seconds (its cgroup) and its link's
bytes are sampled four times a second; the rates between the second epoch's record and the
last's give each part per update.  Epochs after the first are the steady ones: the first holds
the start of the exchange and the rate's first updates.

Rows: benchmarks/results/har_exchange.csv (one per design, worker count and seed; kept between runs).
"""

import argparse
import csv
import json
import shlex
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import itertools

from har_wall import link_bytes, prepared_har, stage_har
from labcluster import lab_cluster, pi_shaped

from picluster.cluster.nodecluster import RUN_DIR
from picluster.jobs.har.metrics import read_rows
from picluster.lab import cgroups

RESULTS = Path(__file__).resolve().parent / "results"
ROWS = RESULTS / "har_exchange.csv"
COLUMNS = ("design", "options", "workers", "seed", "hosts", "ps_hosts", "cpu_per_host", "link", "epochs", "ok",
           "epoch_s", "compute_s", "exchange_s", "input_s", "updates_per_epoch", "windows_per_step",
           "ps_cpu_ms_per_update", "worker_cpu_ms_per_step", "worker_cpu_ms_per_step_max",
           "ps_kb_in_per_update", "ps_kb_out_per_update", "worker_kb_out_per_step", "worker_kb_in_per_step",
           "ps_throttled_per_update", "straggler_ms", "wall_s")


class Sampler:
    """Every host's CPU seconds and link bytes, four times a second, in a thread."""

    def __init__(self, lab) -> None:
        self.lab, self.samples, self._stop = lab, [], threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            now = time.time()
            cpu = [cgroups.Cgroup(h.cgroup).usage() for h in self.lab.hosts]
            links = [link_bytes(self.lab, i + 1) for i in range(len(self.lab.hosts))]
            self.samples.append((now, [c.get("cpu_seconds") for c in cpu], [c.get("throttled") for c in cpu], links))
            self._stop.wait(0.25)

    def __enter__(self) -> "Sampler":
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self.thread.join()

    def at(self, when: float) -> tuple:
        """The sample nearest ``when``."""
        return min(self.samples, key=lambda s: abs(s[0] - when))

    def save(self, path: Path) -> None:
        """Every sample: time, then per host its CPU seconds, throttled periods, bytes in and out."""
        with open(path, "w", newline="") as f:
            w = csv.writer(f)
            hosts = [h.name for h in self.lab.hosts]
            w.writerow(["time", *(f"{h}_{k}" for h in hosts for k in ("cpu_s", "throttled", "rx", "tx"))])
            for when, cpu, throttled, links in self.samples:
                w.writerow([f"{when:.3f}", *(v for i in range(len(hosts))
                                             for v in (cpu[i], throttled[i], *(links[i] or ("", ""))))])


def epoch_ends(run_dir: Path, rows: list[dict]) -> list[tuple[float, int]]:
    """(when the chief finished the epoch, the global step then), epoch by epoch: the chief's
    hand-overs to the evaluator beside the coordinator (trained.jsonl), else metrics.csv's rows,
    which a chief that evaluates writes itself (the evaluator's rows come later, by its lag)."""
    handed = run_dir / "trained.jsonl"
    if handed.exists():
        records = [json.loads(line) for line in handed.read_text().splitlines() if line.strip()]
        ends = {r["epoch"]: float(r["time"]) for r in records if "epoch" in r and "checkpoint" in r}
        steps = {int(r["epoch"]): int(r["global_step"]) for r in rows}
        return [(ends[e], steps[e]) for e in sorted(ends) if e in steps]
    return [(float(r["time"]), int(r["global_step"])) for r in rows]


def steady(ends: list[tuple[float, int]], sampler: Sampler, ps_hosts: list[int], workers: list[int]) -> dict:
    """The parts per update between the end of the first epoch and the end of the last."""
    if len(ends) < 3:
        return {}
    (t0, step0), (t1, step1) = ends[0], ends[-1]
    updates = step1 - step0
    a, b = sampler.at(t0), sampler.at(t1)
    cpu = lambda i: (b[1][i] - a[1][i]) if a[1][i] is not None and b[1][i] is not None else None
    link = lambda i, way: (b[3][i][way] - a[3][i][way]) if a[3][i] and b[3][i] else None
    per_step = [cpu(i) / updates * 1000 for i in workers if cpu(i) is not None]
    out = {"ps_cpu_ms_per_update": f"{sum(cpu(i) or 0 for i in ps_hosts) / updates * 1000:.2f}",
           "worker_cpu_ms_per_step": f"{statistics.median(per_step):.2f}" if per_step else "",
           "worker_cpu_ms_per_step_max": f"{max(per_step):.2f}" if per_step else "",
           "ps_throttled_per_update": f"{sum((b[2][i] or 0) - (a[2][i] or 0) for i in ps_hosts) / updates:.2f}"}
    # link_bytes: (received by the host, sent by the host)
    out["ps_kb_in_per_update"] = f"{sum(link(i, 0) or 0 for i in ps_hosts) / updates / 1000:.1f}"
    out["ps_kb_out_per_update"] = f"{sum(link(i, 1) or 0 for i in ps_hosts) / updates / 1000:.1f}"
    outs = [link(i, 1) / updates / 1000 for i in workers if link(i, 1) is not None]
    ins = [link(i, 0) / updates / 1000 for i in workers if link(i, 0) is not None]
    out["worker_kb_out_per_step"] = f"{statistics.median(outs):.1f}" if outs else ""
    out["worker_kb_in_per_step"] = f"{statistics.median(ins):.1f}" if ins else ""
    return out


def medians(rows: list[dict]) -> dict:
    """Seconds per epoch and its parts, medians over the epochs after the first."""
    later = rows[1:] or rows
    med = lambda k: statistics.median(float(r[k] or 0) for r in later)
    stragglers = [float(r["straggler_ms"]) for r in later if r.get("straggler_ms")]
    steps = [int(b["global_step"]) - int(a["global_step"]) for a, b in itertools.pairwise(rows)]
    return {"epoch_s": f"{med('epoch_s'):.3f}", "compute_s": f"{med('compute_s'):.3f}", "exchange_s": f"{med('exchange_s'):.3f}",
            "input_s": f"{med('input_s'):.3f}", "updates_per_epoch": statistics.median(steps) if steps else "",
            "straggler_ms": f"{statistics.median(stragglers):.1f}" if stragglers else ""}


def load(path: Path) -> dict:
    if not path.exists():
        return {}
    with open(path, newline="") as f:
        return {(r["design"], int(r["workers"]), int(r["seed"])): r for r in csv.DictReader(f)}


def save(rows: dict, path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, COLUMNS, extrasaction="ignore")
        w.writeheader()
        for key in sorted(rows):
            w.writerow({c: rows[key].get(c, "") for c in COLUMNS})


def report(rows: dict) -> None:
    print("| design | workers | hosts (core each) | s per epoch | compute, s | exchange, s | updates per epoch | ps CPU per update, ms "
          "| worker CPU per step, ms | ps link per update in / out, KB | a worker's link per step out / in, KB | vs one Pi, per epoch |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    pi = {(int(r["hosts"]), int(r["seed"])): float(r["epoch_s"]) for r in rows.values() if r["design"] == "pi" and r.get("epoch_s")}
    for key in sorted(rows, key=lambda k: (int(rows[k]["hosts"]), k[1], k[0] != "pi", k[0])):
        r = rows[key]
        if not r.get("epoch_s"):
            continue
        alone = pi.get((int(r["hosts"]), int(r["seed"])))
        speed = f"{alone / float(r['epoch_s']):.2f}x" if alone and r["design"] != "pi" else "-"
        print(f"| {r['design']} | {r['workers']} | {r['hosts']} ({r['cpu_per_host']}) | {r['epoch_s']} | {r['compute_s']} | {r['exchange_s']} | "
              f"{r['updates_per_epoch']} | {r.get('ps_cpu_ms_per_update') or '-'} | {r.get('worker_cpu_ms_per_step') or '-'} | "
              f"{r.get('ps_kb_in_per_update') or '-'} / {r.get('ps_kb_out_per_update') or '-'} | "
              f"{r.get('worker_kb_out_per_step') or '-'} / {r.get('worker_kb_in_per_step') or '-'} | {speed} |")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workers", default="8,16")
    ap.add_argument("--designs", default="ps=--exchange fused;allreduce=",
                    help="NAME=OPTIONS;... (train har's options; rows keyed by NAME)")
    ap.add_argument("--ps-hosts", type=int, default=1, help="hosts that hold a ps each, apart from the workers")
    ap.add_argument("--hosts", type=int, default=0, help="hosts in all (default: --ps-hosts + the largest worker count)")
    ap.add_argument("--epochs", type=int, default=4)
    ap.add_argument("--seeds", default="1")
    ap.add_argument("--link", default="300mbit")
    ap.add_argument("--no-pi", action="store_true", help="leave out one Pi alone")
    ap.add_argument("--again", action="store_true", help="measure again what the rows hold")
    ap.add_argument("--rows", type=Path, default=ROWS)
    ap.add_argument("--report", action="store_true")
    args = ap.parse_args()
    rows = load(args.rows)
    if args.report:
        report(rows)
        return
    prepared_har()
    designs = dict((d.partition("=")[0], shlex.split(d.partition("=")[2])) for d in args.designs.split(";") if d)
    counts = [int(w) for w in args.workers.split(",")]
    hosts = args.hosts or args.ps_hosts + max(counts)
    limits = pi_shaped(hosts)
    with lab_cluster(hosts, limits, rate=args.link, ps_hosts=args.ps_hosts, beside=False) as (lab, inventory, inv):
        har = stage_har(lab.hosts[args.ps_hosts:], inv, lab.host(inv.nfs_master))
        pi_host = lab.hosts[args.ps_hosts]
        common = {"hosts": hosts, "ps_hosts": args.ps_hosts, "cpu_per_host": f"{limits.cpu:g}", "link": args.link,
                  "epochs": args.epochs}
        for seed in (int(s) for s in args.seeds.split(",")):
            wanted = ([] if args.no_pi else [("pi", 1, [])]) + [(d, w, o) for w in counts for d, o in designs.items()]
            for design, workers, options in wanted:
                if not args.again and rows.get((design, workers, seed), {}).get("ok") == "yes":
                    continue
                run_dir = RESULTS / "har_exchange" / f"{design}-{workers}-{seed}"
                subprocess.run(["rm", "-rf", str(run_dir)], check=True)
                base = [sys.executable, "-m", "picluster", "train", "har", "--seed", str(seed), "--epochs", str(args.epochs),
                        "--run-dir", str(run_dir), "--no-live", "--json"]
                started = time.time()
                with Sampler(lab) as sampler:
                    if design == "pi":
                        pid = pi_host.path(f"{lab.user.home}/{RUN_DIR}/worker-0.pid")
                        if pid.exists():
                            pi_host.run(["kill", pid.read_text().strip()], check=False)
                            time.sleep(2)
                        done = pi_host.run([*base, "--standalone", "--threads", "1", "--data-dir", str(har.parent)], check=False,
                                           timeout=3600)
                    else:
                        done = subprocess.run([*base, "-i", str(inventory), "--workers", str(workers), *options],
                                              capture_output=True, text=True, timeout=3600)
                if design == "pi":
                    up = subprocess.run([sys.executable, "-m", "picluster", "cluster", "up", "-i", str(inventory), "--timeout", "600"],
                                        capture_output=True, text=True)
                    if up.returncode != 0:
                        raise SystemExit(f"cluster up after the one-Pi run: {up.stderr.strip()}")
                ok = "yes" if done.returncode == 0 else f"exit {done.returncode}: {(done.stderr.strip().splitlines() or [''])[-1]}"[:200]
                metrics = read_rows(run_dir / "metrics.csv")
                row = {"design": design, "options": shlex.join(options), "workers": workers, "seed": seed, "ok": ok,
                       "wall_s": f"{time.time() - started:.1f}", **common}
                if metrics:
                    config = json.loads((run_dir / "config.json").read_text())
                    n = 1 if design == "pi" else workers
                    row["windows_per_step"] = config["batch"] if config["batch_per_worker"] or n == 1 else config["batch"] // n
                    row |= medians(metrics)
                    used = list(range(args.ps_hosts, args.ps_hosts + workers))
                    ps = list(range(args.ps_hosts)) if design != "pi" else []
                    row |= steady(epoch_ends(run_dir, metrics), sampler, ps, used if design != "pi" else [args.ps_hosts])
                sampler.save(run_dir / "samples.csv")
                rows[(design, workers, seed)] = row
                save(rows, args.rows)
                print(f"{design} x{workers} seed {seed}: {json.dumps(row)}", flush=True)
    report(rows)


if __name__ == "__main__":
    main()
