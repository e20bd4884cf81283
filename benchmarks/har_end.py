"""Where the end of a HAR run goes on Pi-shaped test hosts: timestamps around each step of the
coordinator's shut-down, taken inside its process (the command line's own code, wrapped).

Run as root, on a quiet machine (a 9-host lab and two short runs: about 3 minutes):
    .venv/bin/python benchmarks/har_end.py 9 "--target-val-accuracy 0.5 --epochs 3 --seed 1" "--target-val-accuracy 0.5 --epochs 3 --seed 2"

The first argument is the lab's hosts (node01 the ps, the others a worker each, har_wall.py's
shape); each later one a run's `train har` options.  Each step's begin and end go to stderr as
``T <time> <step>``; compare them with the run's metrics.csv last row (the target's) and
result.json's time.  docs/data/har_end_h9_timeline.csv holds what this printed, step by step,
for each change of docs/studies/2026-12-07-end-of-run.md.
"""

import functools
import shutil
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from har_wall import stage_har
from labcluster import lab_cluster, pi_shaped


def mark(what: str) -> None:
    print(f"T {time.time():.3f} {what}", file=sys.stderr, flush=True)


def wrap(obj, name: str, label: str) -> None:
    fn = getattr(obj, name)

    @functools.wraps(fn)
    def timed(*args, **kwargs):
        mark(f"{label} begin")
        try:
            return fn(*args, **kwargs)
        finally:
            mark(f"{label} end")

    setattr(obj, name, timed)


def main() -> None:
    import picluster.jobs.har.clients as clients
    import picluster.jobs.har.coordinator as coordinator
    import picluster.monitor.record as record
    from picluster.cli import main as picluster
    from picluster.cluster import nodecluster

    wrap(coordinator, "follow", "follow")
    wrap(clients, "stop", "clients.stop")
    wrap(clients, "stop_only", "clients.stop_only")
    wrap(record.Recorder, "__exit__", "recorder.exit")
    wrap(coordinator, "_record_exits", "record_exits")
    for cls in [c for c in vars(nodecluster).values() if isinstance(c, type)]:
        for method in ("forget", "repair", "release"):
            if method in vars(cls):
                wrap(cls, method, f"{cls.__name__}.{method}")
    hosts = int(sys.argv[1])
    with lab_cluster(hosts, pi_shaped(hosts), rate="300mbit") as (lab, inventory, inv):
        stage_har(lab.hosts[1:], inv, lab.host(inv.nfs_master))
        for i, options in enumerate(sys.argv[2:]):
            mark(f"command {i} begin")
            run_dir = Path(__file__).resolve().parent / "results" / "har_end" / f"run{i}"
            shutil.rmtree(run_dir, ignore_errors=True)
            try:
                picluster(["train", "har", "-i", str(inventory), "--workers", str(hosts - 1), "--run-dir", str(run_dir),
                           "--no-live", "--json", *options.split()])
            except SystemExit as exc:
                mark(f"exit {exc.code}")
            mark(f"command {i} end")
            print(f"run {i}: target row {run_dir / 'metrics.csv'}, result {(run_dir / 'result.json').stat().st_mtime:.3f}", file=sys.stderr)
        for t, host in enumerate(lab.hosts[1:]):
            log = host.read_file(f"{lab.user.home}/{nodecluster.RUN_DIR}/worker-{t}.log")
            print("\n".join(line for line in log.splitlines() if " ended, " in line), file=sys.stderr)


if __name__ == "__main__":
    main()
