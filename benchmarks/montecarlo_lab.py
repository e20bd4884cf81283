"""Monte-Carlo pi on Pi-shaped test hosts: the thesis's Table 5 sweep on 1, 2, 4, 8 and 16 "Pis".

Run as root, on a quiet machine: .venv/bin/python benchmarks/montecarlo_lab.py [--quick]

17 test hosts (node01 ps, node02-17 workers), each in a cgroup with the pi3b profile (1 GiB, the
CPU share calibrated by benchmarks/lab_calibrate.py so one host draws 6e7 samples in about the
thesis's single-Pi 7.7 s), every link shaped to 100 Mbit/s with tc.  The thesis's 0.3 ms one-way
delay needs netem, which this kernel lacks: the run applies the rate only and says so.  The
servers start with a larger CPU share (starting 17 TensorFlow servers at 5 % of a core each takes
minutes and is not measured); every host is set to the profile before the sweep.

1. The sweep (samples 1e7..1e8 x nodes 1, 2, 4, 8, 16) from this machine as coordinator, compute
   seconds beside the thesis's, and cell by cell whether going from N/2 to N nodes made it faster
   or slower in both (the thesis's reading of its table: more nodes help large sample counts and
   hurt small ones).  The agents record each host's CPU and memory meanwhile (every 2 s).
2. The thesis's implementation (one [n, 2] tensor per task) on one 1 GiB host, 1e7, 2e7, ...
   until its server is killed by the host's out-of-memory killer: the run reports the largest
   count that ran and the first that did not.
3. picluster's implementation (chunked draws) with 1e10 samples on the same 1 GiB host.
Phases 2 and 3 give that host a whole core (memory is what they test; a 5 % share would take
21 minutes for 1e10).

Writes benchmarks/results/montecarlo_lab.csv and .json and the figures (picluster plot) under
docs/images/ (--figures).
"""

import argparse
import csv
import itertools
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from labcluster import cli, lab_cluster
from thesis_style import ThesisStyle

from picluster.cluster.nodecluster import RUN_DIR, NodeCluster
from picluster.jobs.montecarlo import thesis
from picluster.jobs.montecarlo.estimate import MonteCarlo
from picluster.lab.cgroups import Cgroup
from picluster.lab.limits import Limits, fair_share, machine, resolve
from picluster.model.clusterspec import from_inventory
from picluster.monitor.poll import Monitor
from picluster.monitor.record import Recorder
from picluster.plots import plot

RESULTS = Path(__file__).resolve().parent / "results"
NOISE = 0.05  # relative differences below this are called "same" (repeat runs vary by about this much)


def direction(faster_than: float | None, t: float | None) -> str | None:
    """'faster', 'slower' or 'same' going from a time to the next; None without both."""
    if faster_than is None or t is None:
        return None
    change = (t - faster_than) / faster_than
    return "same" if abs(change) < NOISE else "faster" if change < 0 else "slower"


def agreement(seconds: dict[tuple[int, int], float], sizes: list[int], nodes: list[int]) -> dict[tuple[int, int], str]:
    """Per cell (size, n) with n > first: 'agrees', 'differs', or why it cannot be compared."""
    out = {}
    for s in sizes:
        for prev, n in itertools.pairwise(nodes):
            ours = direction(seconds.get((s, prev)), seconds.get((s, n)))
            theirs = direction(thesis.seconds(s, prev), thesis.seconds(s, n))
            if theirs is None:
                out[(s, n)] = "no thesis cell"
            elif ours is None:
                out[(s, n)] = "not run"
            elif ours == theirs or "same" in (ours, theirs):  # a change within the noise goes either way
                out[(s, n)] = "agrees"
            else:
                out[(s, n)] = f"differs (ours {ours}, thesis {theirs})"
    return out


def thesis_style_limit(layout, sizes: list[int], group: Cgroup, inventory: Path) -> tuple[int | None, int | None, str]:
    """Largest count the thesis's graph ran on one host, the first it did not, and why."""
    kills = group.usage()["oom_kills"] or 0
    largest = None
    job = ThesisStyle(layout, 1, timeout_s=600)
    try:
        for s in sizes:
            try:
                t = job.run(s, alive=lambda: (group.usage()["oom_kills"] or 0) == kills)
            except Exception as exc:  # the server under the session died (or TensorFlow said why it failed)
                now = group.usage()["oom_kills"] or 0
                why = "killed by the host's OOM killer" if now > kills else f"failed: {str(exc).splitlines()[0][:120]}"
                return largest, s, why
            largest = s
            print(f"  thesis style {s:.0e} on one 1 GiB host: {t:.2f} s", flush=True)
    finally:
        try:
            job.close()
        except Exception:  # noqa: S110  (the session's master may be the dead server)
            pass
        cli("cluster", "up", "-i", str(inventory))  # restart what the OOM killer took
    return largest, None, "never failed"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true", help="3 sizes, nodes 1, 2 and 4; no 1e10 run")
    parser.add_argument("--profile", default="pi3b")
    parser.add_argument("--figures", type=Path, default=Path(__file__).resolve().parent.parent / "docs" / "images")
    args = parser.parse_args()
    sizes = [10**7, 5 * 10**7, 10**8] if args.quick else list(thesis.SAMPLES)
    node_counts = [1, 2, 4] if args.quick else list(thesis.NODES)
    hosts = 1 + max(node_counts)
    profile = resolve(hosts, profile=args.profile)
    start = Limits(cpu=fair_share(machine()[0], hosts), memory=profile.memory)  # quicker server start-up, not measured

    RESULTS.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    with lab_cluster(hosts, start, rate="100mbit") as (lab, inventory, inv):
        up_s = time.perf_counter() - t0
        delay = "0.3 ms netem delay applied" if lab.netem_supported() else "no netem in this kernel: no delay, rate only"
        for host in lab.hosts:
            lab.set_limits(host, profile)
        layout = from_inventory(inv)
        agents = [(h, int(h.read_file(f"{lab.user.home}/{RUN_DIR}/agent.pid"))) for h in lab.hosts]
        agent_cpu = {h.name: _cpu_seconds(pid) for h, pid in agents}
        seconds: dict[tuple[int, int], float] = {}
        sweep_t0 = time.monotonic()
        with Recorder(Monitor.of(NodeCluster(inv)), RESULTS / "montecarlo_lab-nodes.csv", period=2.0):
            for n in node_counts:
                with MonteCarlo(layout, n) as job:
                    for size in sizes:
                        seconds[(size, n)] = job.estimate(size, seed=1).compute_s
                        print(f"  {size:.0e} x{n}: {seconds[(size, n)]:.3f} s", flush=True)
        sweep_s = time.monotonic() - sweep_t0
        agent_share = {h.name: (_cpu_seconds(pid) - agent_cpu[h.name]) / sweep_s for h, pid in agents}

        # Phases 2 and 3 on node02, the first worker: a whole core, the profile's memory.
        worker = lab.hosts[1]
        lab.set_limits(worker, Limits(cpu=1.0, memory=profile.memory))
        group = Cgroup(worker.cgroup)
        oom_sizes = [k * 10**7 for k in range(1, 11)]
        largest, failed, why = thesis_style_limit(layout, oom_sizes, group, inventory)
        big = None
        if not args.quick:
            (group.dirs()["memory"] / "memory.max_usage_in_bytes").write_text("0")
            kills = group.usage()["oom_kills"]
            with MonteCarlo(layout, 1) as job:
                e = job.estimate(10**10, seed=1)
            usage = group.usage()
            big = {"seconds": e.compute_s, "estimate": e.pi, "peak_bytes": usage["memory_peak"],
                   "oom_kills": usage["oom_kills"] - kills}
            print(f"  picluster 1e10 on one 1 GiB host: {e.compute_s:.1f} s, host memory peak "
                  f"{usage['memory_peak'] / 2**20:.0f} MiB, OOM kills {big['oom_kills']}", flush=True)

    with open(RESULTS / "montecarlo_lab.csv", "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["samples", "nodes", "seconds", "thesis_seconds"])
        for (size, n), t in sorted(seconds.items(), key=lambda kv: (kv[0][1], kv[0][0])):
            writer.writerow([size, n, f"{t:.4f}", thesis.seconds(size, n) or ""])
    cells = agreement(seconds, sizes, node_counts)
    (RESULTS / "montecarlo_lab.json").write_text(json.dumps({
        "profile": profile.describe(), "hosts": hosts, "cluster_up_s": up_s, "delay": delay,
        "seconds": {f"{s}x{n}": t for (s, n), t in seconds.items()},
        "agreement": {f"{s}x{n}": a for (s, n), a in cells.items()},
        "thesis_style": {"largest_ok": largest, "first_failed": failed, "why": why}, "picluster_1e10": big,
        "agent_cpu_share": agent_share}, indent=1))

    print(f"\n{hosts} test hosts with the {profile.describe()} profile, links 100 Mbit/s ({delay}); "
          f"lab and cluster up took {up_s:.0f} s\n")
    print("Compute seconds, ours (thesis); the mark says whether the change from the column before "
          f"(half the nodes) went the same way as the thesis's (changes under {NOISE:.0%} count as either way)\n")
    print("| samples | " + " | ".join(f"{n} node{'s' if n > 1 else ''}" for n in node_counts) + " |")
    print("|---|" + "---|" * len(node_counts))
    for size in sizes:
        row = []
        for n in node_counts:
            theirs = thesis.seconds(size, n)
            text = f"{seconds[(size, n)]:.2f} ({theirs:.2f})" if theirs is not None else f"{seconds[(size, n)]:.2f} (OOM)"
            mark = cells.get((size, n))
            row.append(text + ("" if mark is None else " ✓" if mark == "agrees" else " ✗" if mark.startswith("differs") else ""))
        print(f"| {size:.0e} | " + " | ".join(row) + " |")
    compared = [a for a in cells.values() if a == "agrees" or a.startswith("differs")]
    print(f"\ndirection agrees with the thesis in {sum(a == 'agrees' for a in compared)} of {len(compared)} comparable cells")
    for (s, n), a in sorted(cells.items()):
        if a.startswith("differs"):
            print(f"  {s:.0e}, {n // 2} -> {n} nodes: {a}")
    print(f"thesis style on one host with {profile.describe()}'s memory (and a whole core): ran up to {largest:.0e} samples; "
          + (f"{failed:.0e} {why}" if failed else why) if largest else f"thesis style: {why}")
    if big:
        print(f"picluster on the same host: 1e10 samples in {big['seconds']:.1f} s, host memory peak "
              f"{big['peak_bytes'] / 2**20:.0f} MiB, {big['oom_kills']} OOM kills")
    worst = max(agent_share.values())
    print(f"node agent CPU over the sweep (one scrape per 2 s): {100 * worst:.2f} % of a core at most "
          f"({100 * worst / (profile.cpu or 1):.1f} % of a host's share)")
    for path in plot(RESULTS / "montecarlo_lab.csv", args.figures, ("png",), title=f"Monte-Carlo pi on {args.profile} test hosts (thesis Table 5 dashed)"):
        print(f"figure: {path}")
    for path in plot(RESULTS / "montecarlo_lab-nodes.csv", args.figures, ("png",), title="Test hosts during the sweep"):
        print(f"figure: {path}")


def _cpu_seconds(pid: int) -> float:
    import psutil

    t = psutil.Process(pid).cpu_times()
    return t.user + t.system


if __name__ == "__main__":
    main()
