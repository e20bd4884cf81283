"""Does a Pi-profile worker host (1 GiB) run its part of HAR training?  Before and after one runtime per node.

Run as root: .venv/bin/python benchmarks/har_memory.py [--epochs 2] [--runs separate,shared,resident,resident:coordinator]
(memory, not time: it needs no quiet machine.)

Three test hosts with the pi3b profile's memory (node01 ps, node02-03 workers; CPU 0.66 each, so
the run is not slowed to a Pi's pace), `cluster up` over SSH, the prepared HAR data set copied to
each worker's /mnt/picluster/har (no NFS in this kernel), then `picluster train har -i` twice:

- ``--worker-runtime separate`` (before): each worker node runs its TensorFlow server and, beside
  it, the training client that imports TensorFlow again;
- ``--worker-runtime shared``: the client hosts the worker's server; the node's own server is
  stopped for the run and started again after;
- ``--worker-runtime resident`` (the default on inventory nodes): the client runs inside the
  node's own server (started by `cluster up`), which keeps TensorFlow and the data set loaded;
- ``resident:coordinator``: the same with ``--evaluator coordinator``, validation and the test
  scoring beside the coordinator (this machine) instead of on node02, the chief.

Every 0.5 s it reads, on the worker hosts, each picluster process's /proc status and smaps
(picluster.monitor.footprint), and the host's cgroup (usage, peak, OOM kills, swap).  "node"
is the processes' anonymous memory plus each mapped file once: what the board would need.  The
cgroup's own figure counts file pages only when this host was the first on the machine to read
them (cgroup v1 charges a page cache page to whoever faulted it in), so it reads low for the
TensorFlow libraries every process here shares; the per-process figures do not.
"""

import argparse
import json
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from labcluster import lab_cluster

from picluster.data.har import har_dir
from picluster.data.har.dataset import CACHE_NAME
from picluster.lab.cgroups import Cgroup
from picluster.lab.limits import Limits, resolve
from picluster.monitor.footprint import node_resident, process_memory

MiB = 2**20
RESULTS = Path(__file__).resolve().parent / "results"
ROLES = (("picluster.cluster.server", "worker server"), ("picluster.jobs.har.process", "training client"),
         ("picluster.monitor.agent", "agent"))


def role(pid: int) -> str | None:
    try:
        cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return None
    if "picluster.jobs.har.process" in cmd and "--serve" in cmd:
        return "training client serving its task"
    return next((name for module, name in ROLES if module in cmd), None)


def watch(groups: dict[str, Cgroup], peaks: dict, stop: threading.Event) -> None:
    while not stop.is_set():
        for host, group in groups.items():
            mine = []
            for pid in group.pids():
                name = role(pid)
                if name is None:
                    continue
                try:
                    mem = process_memory(pid, name)
                except OSError:
                    continue
                mine.append(mem)
                key = (host, name)
                if key not in peaks["processes"] or mem.rss > peaks["processes"][key].rss:
                    peaks["processes"][key] = mem
            if mine:
                peaks["node"][host] = max(peaks["node"].get(host, 0), node_resident(mine))
        stop.wait(0.5)


def held(groups: dict[str, Cgroup]) -> dict[str, int]:
    """Each server's anonymous memory now (between runs: what it keeps of the runs before)."""
    out = {}
    for host, group in groups.items():
        for pid in group.pids():
            name = role(pid)
            if name == "worker server":
                try:
                    out[f"{host} {'ps server' if host == 'node01' else name}"] = process_memory(pid, name).anon
                except OSError:
                    continue
    return out


def run(spec: str, inventory: Path, groups: dict[str, Cgroup], every: dict[str, Cgroup], epochs: int, run_dir: Path) -> dict:
    mode, _, evaluator = spec.partition(":")
    for group in groups.values():
        (group.dirs()["memory"] / "memory.max_usage_in_bytes").write_text("0")
    kills = {h: g.usage()["oom_kills"] for h, g in groups.items()}
    peaks: dict = {"processes": {}, "node": {}}
    stop = threading.Event()
    watcher = threading.Thread(target=watch, args=(groups, peaks, stop), daemon=True)
    watcher.start()
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "picluster", "train", "har", "-i", str(inventory), "--epochs", str(epochs),
                           "--worker-runtime", mode, "--evaluator", evaluator or "chief", "--run-dir", str(run_dir), "--no-live", "--json"],
                          capture_output=True, text=True, timeout=3600)
    stop.set()
    watcher.join(5)
    usage = {h: g.usage() for h, g in groups.items()}
    time.sleep(2)  # the door collects after the job's end
    result = json.loads(proc.stdout) if proc.returncode == 0 else None
    return {
        "ok": proc.returncode == 0, "error": proc.stderr.strip().splitlines()[-1:] if proc.returncode else [],
        "wall_s": time.perf_counter() - t0, "val_acc": result and result.get("val_accuracy"),
        "processes": {f"{h} {n}": {"rss": m.rss, "anon": m.anon, "file": m.file, "peak_rss": m.peak_rss, "swap": m.swap}
                      for (h, n), m in peaks["processes"].items()},
        "node": peaks["node"],
        "held_after": held(every),
        "cgroup": {h: {"peak": u["memory_peak"], "oom_kills": u["oom_kills"] - kills[h], "swap": u["swap"]} for h, u in usage.items()},
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--profile", default="pi3b")
    parser.add_argument("--runs", default="separate,shared,resident,resident:coordinator",
                        help="worker runtimes to run, each with :coordinator for the evaluator beside this machine [all]")
    parser.add_argument("--report", action="store_true", help="only print the tables of the last run (results/har_memory.json)")
    args = parser.parse_args()
    profile = resolve(3, profile=args.profile)
    limits = Limits(cpu=0.66, memory=profile.memory, profile=args.profile)
    if args.report:
        report(json.loads((RESULTS / "har_memory.json").read_text()), args.epochs, limits)
        return
    har = har_dir() / CACHE_NAME
    if not har.exists():
        raise SystemExit(f"no prepared HAR data at {har}: run 'picluster data har' first")
    out = {}
    with lab_cluster(3, limits) as (lab, inventory, inv):
        workers = lab.hosts[1:]
        for host in workers:
            target = host.path(f"{inv.data_dir}/har")
            target.mkdir(parents=True, exist_ok=True)
            shutil.copy2(har, target / CACHE_NAME)
        groups = {h.name: Cgroup(h.cgroup) for h in workers}
        every = {h.name: Cgroup(h.cgroup) for h in lab.hosts}
        out["0. before"] = {"held_after": held(every)}
        specs = args.runs.split(",")
        for i, spec in enumerate(specs, 1):
            # A run's place in the sequence matters: a resident server keeps what earlier runs left it.
            key = f"{i}. {spec}" if len(specs) > 1 else spec
            print(f"train har {key} ...", file=sys.stderr, flush=True)
            out[key] = run(spec, inventory, groups, every, args.epochs, Path(lab.run_dir) / f"run-{i}-{spec.replace(':', '-')}")
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / "har_memory.json").write_text(json.dumps(out, indent=1))
    report(out, args.epochs, limits)


def report(out: dict, epochs: int, limits: Limits) -> None:
    print(f"\nHAR training, {epochs} epochs, default model, 1 ps + 2 workers on test hosts limited to "
          f"{limits.describe()} (no swap beyond it)\n")
    print("| worker runtime | process (on node02) | peak RSS MiB (anon + file) |")
    print("|---|---|---|")
    runs = {mode: r for mode, r in out.items() if "processes" in r}
    for mode, r in runs.items():
        for key, m in sorted(r["processes"].items()):
            if key.startswith("node02 "):
                name = key[7:]
                if "shared" in mode and name == "worker server":
                    name += " (cluster up's, until the run stops it)"
                elif "resident" in mode and name == "worker server":
                    name += " (cluster up's, the client inside it)"
                print(f"| {mode} | {name} | {m['rss'] / MiB:.0f} ({m['anon'] / MiB:.0f} + {m['file'] / MiB:.0f}) |")
    print("\n| worker runtime | ran | node02 / node03 resident, libraries once (MiB) | cgroup peak (MiB) | OOM kills | swap |")
    print("|---|---|---|---|---|---|")
    for mode, r in runs.items():
        nodes = " / ".join(f"{r['node'].get(h, 0) / MiB:.0f}" for h in ("node02", "node03"))
        peak = " / ".join(f"{r['cgroup'][h]['peak'] / MiB:.0f}" for h in ("node02", "node03"))
        kills = sum(c["oom_kills"] for c in r["cgroup"].values())
        swap = sum(c["swap"] or 0 for c in r["cgroup"].values())
        ran = "yes" if r["ok"] else f"no: {' '.join(r['error'])}"
        print(f"| {mode} | {ran} | {nodes} | {peak} | {kills} | {swap} |")
    servers = sorted({k for r in out.values() for k in r.get("held_after", {})})
    if servers:
        print("\nEach server's anonymous memory after the run (MiB): what it keeps between runs\n")
        print("| after | " + " | ".join(servers) + " |")
        print("|---|" + "---|" * len(servers))
        for mode, r in out.items():
            after = r.get("held_after", {})
            print(f"| {mode} | " + " | ".join(f"{after[k] / MiB:.0f}" if k in after else "-" for k in servers) + " |")


if __name__ == "__main__":
    main()
