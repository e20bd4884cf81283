"""HAR end to end on Pi-shaped test hosts: what a user waits for, from `picluster train har`'s start
to validation >= a target (96 %), against the best one-Pi run, and where that time goes.

Run as root, on a quiet machine (a run of every configuration over 3 seeds takes about half an hour):
    .venv/bin/python benchmarks/har_wall.py --workers 1,2,4,8 --seeds 1,2,3
    .venv/bin/python benchmarks/har_wall.py --workers 8 --runtimes resident,shared --seeds 1,2,3
    .venv/bin/python benchmarks/har_wall.py --report       # the tables, from the rows kept

The lab: --ps-hosts (1) + max(--workers) hosts (node01 the ps, or node01.. the --ps-hosts ps hosts,
the others a worker each), each limited to an
equal share of this machine's cores (2/9 of a core for 9 hosts: the hosts compute side by side)
and the pi3b profile's 1 GiB, every link shaped to --link (a Pi 3B+'s Ethernet carries about
300 Mbit/s, a Pi 4's 1 Gbit/s).  `cluster up` once, as a cluster's owner does before the jobs.
Then, seed by seed, configurations back to back (a drift of the machine hits them alike):

- ``pi``: the best a user with one Pi could do, `picluster train har --standalone --threads 1`
  run on the first worker's host itself (node02 with one ps host), inside its limits, reading the
  data set from its disk.  That host's worker server (the chief's) is stopped for it (a Pi alone runs none; in 1 GiB the kernel killed the idle server
  beside the training) and `cluster up` starts it again after, outside the row's time.  With
  ``--pi-side-by-side`` every seed's one Pi runs first, all at once, each on a worker host of its
  own (node02, node03, ...): a one-Pi run takes 10-30 minutes at a ninth of a core;
- ``RUNTIME`` x N: `picluster train har -i INV --workers N` from this machine (the coordinator,
  not limited), with ``--worker-runtime RUNTIME`` (resident: each client inside its node's server,
  the default; shared: a client process per node that imports TensorFlow and serves the task);
- ``NAME`` x N (``--variant NAME=OPTIONS``): the first runtime with more training options, e.g.
  ``--variant chief-eval='--evaluator chief'`` for validation on the chief between its epochs.

Every run: ``--target-val-accuracy`` (0.96) and the recipe's defaults otherwise.  Each row says
where the time to the target went: start-up (the command's start to the first training step:
state.json's start, written by the chief as its first step begins), the training steps (the sum
of epoch_s), the validation pass (metrics.csv's eval_s; on the path only when the chief runs it,
not beside the coordinator; runs of earlier versions also had an exchange probe, probe_s), and
the rest (checkpoints, records, the coordinator's polls, the evaluator's lag behind the chief).
The ps's CPU seconds and the bytes its link carried each way, per worker-step, come from its
/proc and its link's counters.  The chief's own start-up
line splits its part (process, data, graph, session, barrier).

Rows go to benchmarks/results/har_wall.csv (kept between runs; one row per configuration and
seed); ``--keep FILE`` copies them to a file to commit, beside the docs table they make.
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
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from labcluster import lab_cluster, pi_shaped

from picluster.cluster.nodecluster import RUN_DIR
from picluster.data.har import har_dir
from picluster.data.har.dataset import CACHE_NAME
from picluster.jobs.har.coordinator import RUNTIMES
from picluster.jobs.har.metrics import read_rows

RESULTS = Path(__file__).resolve().parent / "results"
TABLE = RESULTS / "har_wall.csv"
RUNS = RESULTS / "har_wall"
COLUMNS = ("config", "workers", "seed", "cpu_per_host", "link", "target", "wall_s", "to_target_s", "epochs", "startup_s",
           "steps_s", "probe_s", "eval_s", "rest_s", "val_acc", "test_acc", "process_s", "data_s", "graph_s", "session_s",
           "barrier_s", "ok", "evaluator", "worker_steps", "ps_cpu_s", "ps_ms_per_worker_step", "ps_rx_bytes", "ps_tx_bytes",
           "ps_kb_in_per_worker_step", "ps_kb_out_per_worker_step", "options", "ps_hosts")
START_UP = re.compile(r"replica 0: start-up: process ([\d.]+) s, data ([\d.]+) s(?: \(held\))?, graph ([\d.]+) s, session ([\d.]+) s, barrier ([\d.]+) s")


def load(path: Path = TABLE) -> dict[tuple[str, int, int], dict]:
    if not path.exists():
        return {}
    with open(path, newline="") as f:
        return {(r["config"], int(r["workers"]), int(r["seed"])): r for r in csv.DictReader(f)}


def save(rows: dict[tuple[str, int, int], dict], path: Path = TABLE) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=COLUMNS)
        writer.writeheader()
        for key in sorted(rows):
            writer.writerow({c: rows[key].get(c, "") for c in COLUMNS})


def prepared_har() -> Path:
    """This machine's prepared HAR cache, or the one line that says how to make it."""
    har = har_dir() / CACHE_NAME
    if not har.exists():
        raise SystemExit(f"no prepared HAR data at {har}: run 'picluster data har' first")
    return har


def stage_har(hosts, inv, nfs_master) -> Path:
    """The cache copied to each worker host's data folder, where its runs read it, and into the NFS
    master's export, as `picluster data har -i` leaves it on a real cluster (there the folders are
    one, over NFS; the namespace hosts have none): the coordinator's `--evaluator auto` fetches
    its copy from there.  Returns this machine's copy."""
    har = prepared_har()
    for host, folder in [*((h, inv.data_dir) for h in hosts), (nfs_master, inv.share_dir)]:
        target = host.path(f"{folder}/har")
        target.mkdir(parents=True, exist_ok=True)
        shutil.copy2(har, target / CACHE_NAME)
    return har


def up_to_target(epochs: list[dict], target: float) -> tuple[list[dict], bool]:
    """The epochs counted: up to the first whose validation reached ``target``, else all; and whether one did."""
    reached = next((i for i, r in enumerate(epochs) if float(r["val_acc"]) >= target), None)
    return epochs[: (reached if reached is not None else len(epochs) - 1) + 1], reached is not None


def measure(command: list[str], run_dir: Path, target: float, run) -> dict:
    """Run ``command`` (through ``run``, which returns its exit status and last error line) and read
    where its time went from the run directory."""
    shutil.rmtree(run_dir, ignore_errors=True)
    run_dir.parent.mkdir(parents=True, exist_ok=True)
    started = time.time()
    status, last = run(command)
    wall = time.time() - started
    row: dict = {"wall_s": f"{wall:.1f}", "ok": "yes" if status == 0 else f"exit {status}: {last}"[:200]}
    rows = read_rows(run_dir / "metrics.csv")  # complete rows only; [] when the run wrote none
    if not rows:
        return row
    first_step = json.loads((run_dir / "state.json").read_text())["started"]
    # Validation beside the coordinator overlaps the next epoch: only the chief's own is on the path.
    evaluator = json.loads((run_dir / "config.json").read_text()).get("evaluator", "chief")
    upto, reached = up_to_target(rows, target)
    end = float(upto[-1]["time"])
    total = lambda key: sum(float(r.get(key) or 0) for r in upto)
    startup = first_step - started
    row |= {"to_target_s": f"{end - started:.1f}" if reached else "", "epochs": len(upto),
            "startup_s": f"{startup:.1f}", "steps_s": f"{total('epoch_s'):.1f}", "probe_s": f"{total('probe_s'):.1f}",
            "eval_s": f"{total('eval_s'):.1f}",
            "rest_s": f"{end - first_step - total('epoch_s') - total('probe_s') - (total('eval_s') if evaluator == 'chief' else 0):.1f}",
            "evaluator": evaluator,
            "val_acc": f"{float(upto[-1]['val_acc']):.4f}"}
    result = run_dir / "result.json"
    if result.exists():
        test = json.loads(result.read_text()).get("test_accuracy")
        row["test_acc"] = f"{test:.4f}" if isinstance(test, float) else ""
    log = run_dir / "worker-0.log"
    found = START_UP.search(log.read_text()) if log.exists() else None
    if found:
        row |= dict(zip(("process_s", "data_s", "graph_s", "session_s", "barrier_s"), found.groups(), strict=True))
    return row


def cpu_seconds(pid_file: Path) -> float | None:
    """User + system CPU of the process a pid file names (the test hosts share this kernel's /proc)."""
    try:
        stat = Path(f"/proc/{int(pid_file.read_text().strip())}/stat").read_text()
    except (OSError, ValueError):
        return None
    fields = stat.rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def link_bytes(lab, index: int) -> tuple[int, int] | None:
    """(received, sent) bytes of host ``index``'s link (from 1), read on its root-namespace end:
    what the host sent is what that end received."""
    from picluster.lab import naming

    end = Path("/sys/class/net") / naming.veth(lab.id, index) / "statistics"
    try:
        return int((end / "tx_bytes").read_text()), int((end / "rx_bytes").read_text())
    except (OSError, ValueError):
        return None


def _summed(values) -> float | None:
    """The sum over the ps hosts, or None when one of them could not be read."""
    values = list(values)
    return None if any(v is None for v in values) else sum(values)


def _summed_links(lab, ps_hosts: int) -> tuple[int, int] | None:
    """(received, sent) bytes of the ps hosts' links together (link_bytes)."""
    links = [link_bytes(lab, i) for i in range(1, ps_hosts + 1)]
    return None if any(b is None for b in links) else (sum(b[0] for b in links), sum(b[1] for b in links))


def ps_load(row: dict, run_dir: Path, workers: int, before: float | None, after: float | None,
            bytes_before: tuple[int, int] | None = None, bytes_after: tuple[int, int] | None = None) -> dict:
    """The ps's CPU and the bytes its link carried over the whole run, per worker-step (sync: each
    update holds one step of every worker)."""
    rows = read_rows(run_dir / "metrics.csv")
    if before is None or after is None or not rows or not rows[-1].get("global_step"):
        return row
    mode = json.loads((run_dir / "config.json").read_text()).get("mode", "sync")
    steps = int(float(rows[-1]["global_step"])) * (workers if mode == "sync" and workers > 1 else 1)
    row = row | {"worker_steps": steps, "ps_cpu_s": f"{after - before:.1f}",
                 "ps_ms_per_worker_step": f"{1000 * (after - before) / max(steps, 1):.2f}"}
    if bytes_before is not None and bytes_after is not None:
        rx, tx = (a - b for a, b in zip(bytes_after, bytes_before))
        row |= {"ps_rx_bytes": rx, "ps_tx_bytes": tx, "ps_kb_in_per_worker_step": f"{rx / 1000 / max(steps, 1):.1f}",
                "ps_kb_out_per_worker_step": f"{tx / 1000 / max(steps, 1):.1f}"}
    return row


def _local(command: list[str]) -> tuple[int, str]:
    proc = subprocess.run(command, capture_output=True, text=True, timeout=3 * 3600)
    return proc.returncode, (proc.stderr.strip().splitlines() or [""])[-1]


def median_sd(values: list[float]) -> str:
    if not values:
        return "-"
    spread = f" ± {statistics.stdev(values):.0f}" if len(values) > 1 else ""
    return f"{statistics.median(values):.0f}{spread}"


def epoch_s(row: dict) -> float:
    """Wall seconds an epoch took, from the first step to the last epoch counted: its steps, the
    probe, the chief's validation where it ran on the path, and the rest."""
    path = sum(float(row.get(k) or 0) for k in ("steps_s", "probe_s", "rest_s"))
    # "workers": har_allreduce.py's validation, shared by the workers between their epochs.
    path += float(row.get("eval_s") or 0) if row.get("evaluator", "chief") in ("chief", "workers") else 0.0
    return path / int(row["epochs"])


def report(rows: dict[tuple[str, int, int], dict]) -> None:
    """Medians over seeds (± the sample standard deviation); speedup: the one Pi's time to the
    target over this configuration's, paired by seed, median of the pairs."""
    pi = {seed: float(r["to_target_s"]) for (config, _, seed), r in rows.items() if config == "pi" and r.get("to_target_s")}
    print("| configuration | seeds | wall to val >= target, s | speedup vs one Pi | epochs | s per epoch | start-up, s | steps, s |"
          " probe, s | validation, s | rest, s | chief's start-up: process / data / graph / session / barrier, s | test acc |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    configs = sorted({(config, workers) for config, workers, _ in rows}, key=lambda c: (c[0] != "pi", c[0], c[1]))
    for config, workers in configs:
        mine = {seed: r for (c, w, seed), r in rows.items() if (c, w) == (config, workers)}
        reached = {seed: float(r["to_target_s"]) for seed, r in mine.items() if r.get("to_target_s")}
        col = lambda key, mine=mine: [float(r[key]) for r in mine.values() if r.get(key)]
        pairs = [pi[s] / reached[s] for s in reached if s in pi]
        name = "one Pi, standalone" if config == "pi" else f"{config}, {workers} worker{'s' * (workers > 1)}"
        parts = " / ".join(f"{statistics.median(col(k)):.1f}" if col(k) else "-" for k in ("process_s", "data_s", "graph_s", "session_s", "barrier_s"))
        missed = len(mine) - len(reached)
        speedup = f"{statistics.median(pairs):.2f}x" if pairs and config != "pi" else "-"
        test = f"{statistics.median(col('test_acc')):.2%}" if col("test_acc") else "-"
        per_epoch = [epoch_s(r) for r in mine.values() if r.get("epochs")]
        each = f"{statistics.median(per_epoch):.1f}" if per_epoch else "-"
        print(f"| {name} | {len(mine)}{f' ({missed} short of the target)' if missed else ''} | {median_sd(list(reached.values()))} | "
              f"{speedup} | {median_sd(col('epochs'))} | {each} | {median_sd(col('startup_s'))} | {median_sd(col('steps_s'))} | "
              f"{median_sd(col('probe_s'))} | {median_sd(col('eval_s'))} | {median_sd(col('rest_s'))} | {parts} | {test} |")
    failed = [f"{c} x{w} seed {s}: {r['ok']}" for (c, w, s), r in rows.items() if r["ok"] != "yes"]
    shares = sorted({f"{r['cpu_per_host']} core, link {r['link']}" for r in rows.values()})
    print(f"\nper host: {'; '.join(shares)}; failed runs: {'; '.join(failed) or 'none'}")


def olympic(values: list[float]) -> float:
    """MLPerf's olympic mean: the fastest and the slowest dropped (from 5 or more), the rest averaged."""
    kept = sorted(values)[1:-1] if len(values) >= 5 else values
    return statistics.mean(kept)


def emulated(path: Path, variant: str, workers: int, target: float) -> dict[int, tuple[int, float]]:
    """By seed, from har_recipes.py's rows (the emulator's curves): the epochs to validation >=
    ``target`` (one past the curve where a seed never reached it) and the test accuracy, in %."""
    with open(path, newline="") as f:
        rows = [r for r in csv.DictReader(f) if r["variant"] == variant and int(r["workers"]) == workers]
    out = {}
    for r in rows:
        curve = [float(v) for v in r["val_acc"].split(";")]
        out[int(r["seed"])] = (next((i + 1 for i, v in enumerate(curve) if v >= target), len(curve) + 1), 100 * float(r["test_acc"]))
    return out


def four_parts(rows: dict[tuple[str, int, int], dict], config: str, emulator: Path | None, variants: dict[int, str],
               target: float) -> None:
    """The four measures side by side per worker count: (a) the epoch's speedup against one Pi,
    (b) epochs to the target over the emulator's seeds, (c) end to end against one Pi (median,
    olympic mean, lowest seed), (d) test accuracy paired by seed with one Pi's.  Pairs are by seed;
    a seed that missed the target in either run has no end-to-end pair (and is counted)."""
    pi = {seed: r for (c, _, seed), r in rows.items() if c == "pi" and r.get("epochs")}

    def from_emulator(workers: int) -> tuple[str, str]:
        if emulator is None or workers not in variants or 1 not in variants:
            return "-", "-"
        mine, alone = emulated(emulator, variants[workers], workers, target), emulated(emulator, variants[1], 1, target)
        if not mine:
            return "-", "-"
        epochs = f"{statistics.median(e for e, _ in mine.values()):g} ({len(mine)} seeds)"
        diffs = [mine[s][1] - alone[s][1] for s in mine if s in alone]
        return epochs, (f"{statistics.mean(diffs):+.2f} ± {statistics.stdev(diffs):.2f} ({len(diffs)})" if len(diffs) > 1 and workers > 1 else "-")

    print(f"\n| workers | (a) epoch vs one Pi, median of pairs | (b) epochs to val >= {target:.0%}, emulator: median |"
          " (c) end to end vs one Pi: median / olympic mean / lowest | (d) test acc minus one Pi's, emulator: mean ± sd (pairs) |"
          " (d) the same, these runs | start-up / after the target's epoch to the command's end, s: median |")
    print("|---|---|---|---|---|---|---|")
    counts = sorted({w for c, w, _ in rows if c == config and w > 1})
    for workers in [1, *counts]:
        if workers == 1:
            mine = pi
        else:
            mine = {seed: r for (c, w, seed), r in rows.items() if (c, w) == (config, workers) and r.get("epochs")}
        paired = [s for s in mine if s in pi]
        per_epoch = [epoch_s(pi[s]) / epoch_s(mine[s]) for s in paired]
        ends = [float(pi[s]["to_target_s"]) / float(mine[s]["to_target_s"]) for s in paired
                if pi[s].get("to_target_s") and mine[s].get("to_target_s")]
        tests = [100 * (float(mine[s]["test_acc"]) - float(pi[s]["test_acc"])) for s in paired
                 if mine[s].get("test_acc") and pi[s].get("test_acc")]
        name = "1 (one Pi, standalone)" if workers == 1 else str(workers)
        a = f"{statistics.median(per_epoch):.2f}x" if per_epoch and workers > 1 else "-"
        c = (f"{statistics.median(ends):.2f}x / {olympic(ends):.2f}x / {min(ends):.2f}x"
             f"{f' ({len(paired) - len(ends)} of {len(paired)} short)' if len(ends) < len(paired) else ''}") if ends and workers > 1 else "-"
        d = (f"{statistics.mean(tests):+.2f} ± {statistics.stdev(tests):.2f} ({len(tests)})" if len(tests) > 1 else "-") if workers > 1 else "-"
        ends_s = [float(r["wall_s"]) - float(r["to_target_s"]) for r in mine.values() if r.get("to_target_s")]
        outside = f"{statistics.median(float(r['startup_s']) for r in mine.values()):.1f} / {statistics.median(ends_s):.1f}" if ends_s else "-"
        epochs, emulated_d = from_emulator(workers)
        print(f"| {name} | {a} | {epochs} | {c} | {emulated_d} | {d} | {outside} |")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--workers", default="1,2,4,8", help="worker counts, comma-separated (the lab has 1 + the largest hosts)")
    parser.add_argument("--runtimes", default="resident", help="--worker-runtime values to compare, comma-separated [resident]")
    parser.add_argument("--compare-seeds", default=None,
                        help="run the runtimes after the first only for these seeds, comma-separated [every seed]")
    parser.add_argument("--variant", action="append", default=[], metavar="NAME=OPTIONS",
                        help="a configuration of its own: the first runtime with these training options, e.g. "
                             "gb8='--global-batch' (repeatable; rows keyed by NAME)")
    parser.add_argument("--again", action="store_true", help="measure again what the rows kept already hold (ok runs are skipped otherwise)")
    parser.add_argument("--seeds", default="1,2,3")
    parser.add_argument("--no-pi", action="store_true", help="leave out the one-Pi baseline")
    parser.add_argument("--pi-side-by-side", action="store_true",
                        help="run every seed's one Pi at once, first, each on a worker host of its own (node02, node03, ...)")
    parser.add_argument("--variants-only", action="store_true", help="run the --variant configurations only (on the first runtime), not the runtimes' own")
    parser.add_argument("--variant-workers", default=None,
                        help="run the --variant configurations only at these worker counts, comma-separated [every one of --workers]")
    parser.add_argument("--target", type=float, default=0.96, help="validation accuracy to reach [0.96]")
    parser.add_argument("--epochs", type=int, default=40, help="at most this many epochs per run [40]")
    parser.add_argument("--ps-hosts", type=int, default=1,
                        help="hosts that hold a ps each, apart from the workers (node01..); the runs use them all unless a variant passes --ps [1]")
    parser.add_argument("--link", default="300mbit", help="each host's link rate, as tc writes it [300mbit: a Pi 3B+]")
    parser.add_argument("--report", action="store_true", help="only print the table of the rows kept")
    parser.add_argument("--emulator-rows", type=Path, default=None,
                        help="har_recipes.py's rows (the emulator's curves over seeds) for the four-part table's epochs to the target")
    parser.add_argument("--emulator-variant", action="append", default=[], metavar="WORKERS=VARIANT",
                        help="which of those rows are the defaults at WORKERS, e.g. 16=gb400-b2-0.95; 1=base is one Pi (repeatable)")
    parser.add_argument("--keep", type=Path, help="also write the rows kept to this CSV (to commit beside the docs)")
    parser.add_argument("--rows", type=Path, default=TABLE, help=f"the rows kept [{TABLE.relative_to(TABLE.parents[1])}]")
    parser.add_argument("--runs", type=Path, default=RUNS,
                        help=f"each run's folder goes under this one, as CONFIG-WORKERS-SEED [{RUNS.relative_to(RUNS.parents[1])}]")
    args = parser.parse_args()
    rows = load(args.rows)
    emulated = {int(w): v for w, _, v in (given.partition("=") for given in args.emulator_variant)}
    if args.report:
        report(rows)
        four_parts(rows, args.runtimes.split(",")[0], args.emulator_rows, emulated, args.target)
        if args.keep:
            save(rows, args.keep)
        return
    prepared_har()  # before a lab is built for nothing
    counts = [int(w) for w in args.workers.split(",")]
    hosts = args.ps_hosts + max(counts)
    limits = pi_shaped(hosts)
    cpu = limits.cpu
    variants = {}
    for given in args.variant:
        name, _, options = given.partition("=")
        if not name or name in ("pi", *RUNTIMES):
            raise SystemExit(f"--variant {given!r}: give NAME=OPTIONS, NAME not pi or a runtime")
        variants[name] = shlex.split(options)
    compare = {int(s) for s in args.compare_seeds.split(",")} if args.compare_seeds else None
    # A variant tried beside the defaults at some worker counts only, on the lab of the largest.
    variant_counts = {int(w) for w in args.variant_workers.split(",")} if args.variant_workers else set(counts)
    common = ["--target-val-accuracy", str(args.target), "--epochs", str(args.epochs), "--no-live", "--json"]
    with lab_cluster(hosts, limits, rate=args.link, ps_hosts=args.ps_hosts, beside=False) as (lab, inventory, inv):
        har = stage_har(lab.hosts[args.ps_hosts:], inv, lab.host(inv.nfs_master))
        def cluster_up() -> None:
            up = subprocess.run([sys.executable, "-m", "picluster", "cluster", "up", "-i", str(inventory)], capture_output=True, text=True)
            if up.returncode != 0:
                raise SystemExit(f"cluster up after the one-Pi run: {up.stderr.strip()}")

        def stop_worker_server(k: int) -> None:
            """One Pi alone holds no worker server: worker k's host's is stopped for the run (in 1 GiB
            the two did not fit, and the kernel killed the server); cluster_up starts it again after."""
            host = lab.hosts[args.ps_hosts + k]
            pid = host.path(f"{lab.user.home}/{RUN_DIR}/worker-{k}.pid")
            if pid.exists():
                host.run(["kill", pid.read_text().strip()], check=False)

        def one_pi(k: int, seed: int) -> dict:
            """The one-Pi run of ``seed`` on worker k's host, inside its limits, reading the data set from its disk."""
            host = lab.hosts[args.ps_hosts + k]

            def on_host(command: list[str]) -> tuple[int, str]:
                proc = host.run(command, check=False, timeout=3 * 3600)
                return proc.returncode, (proc.stderr.strip().splitlines() or [""])[-1]

            run_dir = args.runs.resolve() / f"pi-1-{seed}"
            command = [sys.executable, "-m", "picluster", "train", "har", "--seed", str(seed), "--run-dir", str(run_dir), *common,
                       "--standalone", "--threads", "1", "--data-dir", str(har.parent)]
            return measure(command, run_dir, args.target, on_host) | {
                "config": "pi", "workers": 1, "seed": seed, "cpu_per_host": f"{cpu:g}", "link": args.link,
                "target": f"{args.target:g}", "ps_hosts": args.ps_hosts}

        seeds = [int(s) for s in args.seeds.split(",")]
        side = [s for s in seeds if args.again or rows.get(("pi", 1, s), {}).get("ok") != "yes"] if args.pi_side_by_side and not args.no_pi else []
        if side:
            # Each seed's one Pi on a worker host of its own, all at once: each host keeps its share
            # of a core, and the machine has cores to spare for a few (17 share it in a cluster run).
            if len(side) > len(lab.hosts) - args.ps_hosts:
                raise SystemExit(f"--pi-side-by-side: {len(side)} seeds, {len(lab.hosts) - args.ps_hosts} worker hosts")
            for k in range(len(side)):
                stop_worker_server(k)
            time.sleep(2)
            t0 = time.perf_counter()
            with ThreadPoolExecutor(len(side)) as pool:
                for row in pool.map(one_pi, range(len(side)), side):
                    row["options"] = f"side by side with {len(side) - 1} other one-Pi runs, each on its own host"
                    rows[("pi", 1, row["seed"])] = row
                    print(f"pi x1 seed {row['seed']}: {json.dumps(row)}", flush=True)
            save(rows, args.rows)
            print(f"{len(side)} one-Pi runs side by side: {time.perf_counter() - t0:.0f} s", flush=True)
            cluster_up()

        for seed in seeds:
            runtimes = args.runtimes.split(",")
            compared = seed in compare if compare is not None else True
            configs = list(variants) if args.variants_only else [*runtimes, *variants]
            wanted = ([] if args.no_pi or args.pi_side_by_side else [("pi", 1)]) + [(r, w) for w in counts for r in configs
                                                             if (r == runtimes[0] or compared) and (r not in variants or w in variant_counts)]
            for config, workers in wanted:
                if not args.again and rows.get((config, workers, seed), {}).get("ok") == "yes":
                    continue
                run_dir = args.runs.resolve() / f"{config}-{workers}-{seed}"
                base = [sys.executable, "-m", "picluster", "train", "har", "--seed", str(seed), "--run-dir", str(run_dir), *common]
                t0 = time.perf_counter()
                if config == "pi":
                    stop_worker_server(0)
                    time.sleep(2)
                    row = one_pi(0, seed)
                    cluster_up()
                else:
                    runtime, extra = (runtimes[0], variants[config]) if config in variants else (config, [])
                    ps_pids = [lab.hosts[i].path(f"{lab.user.home}/{RUN_DIR}/ps-{i}.pid") for i in range(args.ps_hosts)]
                    before, bytes_before = _summed(cpu_seconds(p) for p in ps_pids), _summed_links(lab, args.ps_hosts)
                    row = measure([*base, "-i", str(inventory), "--workers", str(workers), "--worker-runtime", runtime, *extra],
                                  run_dir, args.target, _local)
                    row = ps_load(row, run_dir, workers, before, _summed(cpu_seconds(p) for p in ps_pids), bytes_before,
                                  _summed_links(lab, args.ps_hosts))
                    row["options"] = shlex.join(extra)
                row |= {"config": config, "workers": workers, "seed": seed, "cpu_per_host": f"{cpu:g}", "link": args.link,
                        "target": f"{args.target:g}", "ps_hosts": args.ps_hosts}
                rows[(config, workers, seed)] = row
                save(rows, args.rows)
                print(f"{config} x{workers} seed {seed}: {json.dumps(row)} ({time.perf_counter() - t0:.0f} s)", flush=True)
    report(rows)
    four_parts(rows, args.runtimes.split(",")[0], args.emulator_rows, emulated, args.target)
    if args.keep:
        save(rows, args.keep)


if __name__ == "__main__":
    main()
