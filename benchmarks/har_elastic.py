"""What a lost Pi costs a sync training that goes on (picluster/jobs/har/elastic.py): wall time to
validation >= 96 % with one task killed after epoch 3, against the same seed undisturbed, on
Pi-shaped test hosts.

Run as root, on a quiet machine (3 seeds of the three rows take about 15 minutes):
    .venv/bin/python benchmarks/har_elastic.py --seeds 1,2,3
    .venv/bin/python benchmarks/har_elastic.py --report        # the table, from the rows kept

The lab is har_wall.py's (1 + --workers hosts at an equal share of this machine's cores and a
Pi 3B+'s 1 GiB, every link at 300 Mbit/s, `cluster up` once), and every run is the command a user
types, with the defaults: `picluster train har -i INV --workers 8 --target-val-accuracy 0.96
--seed S`.  Seed by seed, back to back:

- ``calm``: undisturbed;
- ``worker``: once epoch 3's row is in, worker 1's server process on node03 is killed with
  SIGKILL, as the kernel's OOM killer does (the client runs inside it, the default on inventory
  nodes): the run starts that server again (its node answers) and goes on from the checkpoint;
- ``ps``: the same for the ps's server on node01: the run starts it again and restores the
  checkpoint.

The target the issue set: ``worker`` at most one epoch plus 20 s later than ``calm`` (the epoch
being the calm run's median epoch), ``ps`` at most one epoch plus the restart.  Each row also
gives the run's own record of the loss (result.json's "elastic": seconds lost, epochs trained
again); the command's stderr, each line with its second, is kept in the run's folder
(coordinator.err): where the extra time went.  `cluster up` runs before every row, outside its
time.  Rows go to benchmarks/results/har_elastic.csv.
"""

import argparse
import csv
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from har_wall import RESULTS, measure, prepared_har, stage_har
from labcluster import lab_cluster, pi_shaped

from picluster.cluster.nodecluster import RUN_DIR
from picluster.jobs.har.metrics import read_rows

TABLE = RESULTS / "har_elastic.csv"
COLUMNS = ("config", "workers", "seed", "cpu_per_host", "link", "target", "wall_s", "to_target_s", "epochs", "startup_s",
           "steps_s", "epoch_s_median", "killed_after_epoch", "killed_at_s", "restarts", "seconds_lost", "epochs_repeated",
           "workers_per_epoch", "val_acc", "test_acc", "ok")
KILL_AFTER = 3


def load(path: Path) -> dict[tuple[str, int], dict]:
    if not path.exists():
        return {}
    with open(path, newline="") as f:
        return {(r["config"], int(r["seed"])): r for r in csv.DictReader(f)}


def save(rows: dict[tuple[str, int], dict], path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=COLUMNS)
        writer.writeheader()
        for key in sorted(rows):
            writer.writerow({c: rows[key].get(c, "") for c in COLUMNS})


def killer(run_dir: Path, pid_file: Path, started: list[float], said: dict) -> threading.Thread:
    """A thread that kills the process in ``pid_file`` once the run's epoch KILL_AFTER is recorded."""
    def watch() -> None:
        deadline = time.monotonic() + 1800
        while time.monotonic() < deadline:
            rows = read_rows(run_dir / "metrics.csv") if (run_dir / "metrics.csv").exists() else []
            if len(rows) >= KILL_AFTER:
                try:
                    os.kill(int(pid_file.read_text().strip()), signal.SIGKILL)
                    said.update(killed_after_epoch=len(rows), killed_at_s=f"{time.time() - started[0]:.1f}")
                except (OSError, ValueError) as exc:
                    said["kill_error"] = str(exc)
                return
            time.sleep(0.2)

    thread = threading.Thread(target=watch, daemon=True)
    thread.start()
    return thread


def _logged(command: list[str], run_dir: Path) -> tuple[int, str]:
    """Run ``command``; its stderr kept in the run's folder with each line's time (where a restart's
    seconds went); its exit status and last line."""
    started = time.time()
    lines: list[str] = []
    proc = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    assert proc.stderr is not None
    for line in proc.stderr:
        lines.append(f"{time.time() - started:7.1f} {line.rstrip()}")
    proc.wait()
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / "coordinator.err").write_text("\n".join(lines) + "\n")
    return proc.returncode, (lines[-1][8:] if lines else "")


def report(rows: dict[tuple[str, int], dict]) -> None:
    calm = {s: r for (c, s), r in rows.items() if c == "calm"}
    epochs = [float(r["epoch_s_median"]) for r in calm.values() if r.get("epoch_s_median")]
    epoch = statistics.median(epochs) if epochs else 0.0
    print("| row | seeds reaching 96 % | wall to 96 %, median | later than calm, paired by seed | target | "
          "seconds lost (the run's record), median | epochs trained again |")
    print("|---|---|---|---|---|---|---|")
    targets = {"calm": "", "worker": f"<= {epoch + 20:.1f} s (1 epoch, {epoch:.1f} s, + 20 s)",
               "ps": f"<= 1 epoch ({epoch:.1f} s) + the restart"}
    for config in ("calm", "worker", "ps"):
        mine = {s: r for (c, s), r in rows.items() if c == config}
        if not mine:
            continue
        reached = [float(r["to_target_s"]) for r in mine.values() if r.get("to_target_s")]
        later = [float(r["to_target_s"]) - float(calm[s]["to_target_s"]) for s, r in sorted(mine.items())
                 if r.get("to_target_s") and calm.get(s, {}).get("to_target_s")]
        lost = [float(r["seconds_lost"]) for r in mine.values() if r.get("seconds_lost")]
        again = [str(r["epochs_repeated"]) for r in mine.values() if r.get("epochs_repeated") not in (None, "")]
        cells = [config, f"{len(reached)} of {len(mine)}", f"{statistics.median(reached):.1f} s" if reached else "-",
                 f"{statistics.median(later):+.1f} s ({', '.join(f'{x:+.1f}' for x in later)})" if later and config != "calm" else "",
                 targets[config], f"{statistics.median(lost):.1f} s" if lost else "", ", ".join(again)]
        print("| " + " | ".join(cells) + " |")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--workers", type=int, default=8)
    parser.add_argument("--seeds", default="1,2,3")
    parser.add_argument("--configs", default="calm,worker,ps")
    parser.add_argument("--target", type=float, default=0.96)
    parser.add_argument("--epochs", type=int, default=40)
    parser.add_argument("--link", default="300mbit")
    parser.add_argument("--again", action="store_true", help="measure again what the rows kept already hold")
    parser.add_argument("--report", action="store_true")
    parser.add_argument("--rows", type=Path, default=TABLE)
    args = parser.parse_args()
    rows = load(args.rows)
    if args.report:
        report(rows)
        return
    prepared_har()
    hosts = 1 + args.workers
    limits = pi_shaped(hosts)
    cpu = limits.cpu
    common = ["--target-val-accuracy", str(args.target), "--epochs", str(args.epochs), "--no-live", "--json"]
    with lab_cluster(hosts, limits, rate=args.link) as (lab, inventory, inv):
        stage_har(lab.hosts[1:], inv, lab.host(inv.nfs_master))
        home = f"{lab.user.home}/{RUN_DIR}"
        victims = {"worker": lab.hosts[2].path(f"{home}/worker-1.pid"), "ps": lab.hosts[0].path(f"{home}/ps-0.pid")}
        for seed in (int(s) for s in args.seeds.split(",")):
            for config in args.configs.split(","):
                if not args.again and rows.get((config, seed), {}).get("ok") == "yes":
                    continue
                run_dir = RESULTS / "har_elastic" / f"{config}-{seed}"
                command = [sys.executable, "-m", "picluster", "train", "har", "-i", str(inventory), "--workers", str(args.workers),
                           "--seed", str(seed), "--run-dir", str(run_dir), *common]
                # Every server up before the row (the last row's losses are not this one's), outside its time.
                up = subprocess.run([sys.executable, "-m", "picluster", "cluster", "up", "-i", str(inventory)], capture_output=True, text=True)
                if up.returncode != 0:
                    raise SystemExit(f"cluster up before the row: {up.stderr.strip()}")
                said: dict = {}
                shutil.rmtree(run_dir, ignore_errors=True)  # before the killer looks: not the last run's rows
                started = [time.time()]
                if config in victims:
                    killer(run_dir, victims[config], started, said)
                row = measure(command, run_dir, args.target, lambda command, where=run_dir: _logged(command, where))
                result = json.loads((run_dir / "result.json").read_text()) if (run_dir / "result.json").exists() else {}
                lost = result.get("elastic") or {}
                epochs = [float(r["epoch_s"]) for r in read_rows(run_dir / "metrics.csv")] if (run_dir / "metrics.csv").exists() else []
                row |= said | {"config": config, "workers": args.workers, "seed": seed, "cpu_per_host": f"{cpu:g}", "link": args.link,
                               "target": f"{args.target:g}", "epoch_s_median": f"{statistics.median(epochs):.2f}" if epochs else "",
                               "restarts": lost.get("restarts", ""), "seconds_lost": lost.get("seconds_lost", ""),
                               "epochs_repeated": lost.get("epochs_repeated", ""),
                               "workers_per_epoch": " ".join(str(v) for v in (lost.get("workers_per_epoch") or {}).values())}
                if config != "calm" and "killed_at_s" not in said:
                    row["ok"] = f"not killed: {said.get('kill_error', 'the run ended first')}"
                rows[(config, seed)] = row
                save(rows, args.rows)
                print(f"{config} seed {seed}: {json.dumps(row)}", flush=True)
    report(rows)


if __name__ == "__main__":
    main()
