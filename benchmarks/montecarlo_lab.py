"""Monte-Carlo pi across test hosts (real sshd hosts in network namespaces), the thesis's Table 5 shape.

Run as root: .venv/bin/python benchmarks/montecarlo_lab.py [--quick]

9 hosts (node01 ps, node02-09 workers) on a bridge, each link shaped to the thesis's Pi network
with tc: 100 Mbit/s both ways (tbf); the 0.3 ms one-way delay needs netem, which this kernel
lacks, so the run says whether it was applied. `picluster cluster up` starts the servers over
SSH; the sweep (samples 1e7..1e8 x nodes 1, 2, 4, 8) runs from this machine as coordinator;
compute seconds are printed beside the thesis's figures. The node agents' own CPU and memory are
measured over the whole sweep (target: under 1 % of one core, under 40 MB RSS).
All hosts share this machine's 2 cores: absolute times say nothing about 8 Pis, only about
the protocol's overhead at small sizes and the shape of the table.
"""

import argparse
import subprocess
import sys
import time
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from picluster.cluster.nodes import RUN_DIR  # noqa: E402
from picluster.clusterspec import from_inventory  # noqa: E402
from picluster.inventory import load_inventory  # noqa: E402
from picluster.jobs.montecarlo.estimate import MonteCarlo  # noqa: E402
from picluster.lab import Lab  # noqa: E402

THESIS = {  # Table 5, seconds on 16 Raspberry Pi 3 B+; None = out of memory
    10**7: {1: 1.495, 2: 1.180, 4: 1.320, 8: 1.961},
    2 * 10**7: {1: 2.594, 2: 1.704, 4: 1.572, 8: 2.087},
    3 * 10**7: {1: 3.673, 2: 2.284, 4: 1.848, 8: 2.299},
    4 * 10**7: {1: 4.758, 2: 2.818, 4: 2.090, 8: 2.350},
    5 * 10**7: {1: 6.561, 2: 3.373, 4: 2.391, 8: 2.480},
    6 * 10**7: {1: 7.713, 2: 3.910, 4: 2.648, 8: 2.628},
    7 * 10**7: {1: None, 2: 4.451, 4: 2.923, 8: 2.782},
    8 * 10**7: {1: None, 2: 4.998, 4: 3.218, 8: 2.953},
    9 * 10**7: {1: None, 2: 5.678, 4: 3.482, 8: 3.147},
    10**8: {1: None, 2: 6.103, 4: 3.741, 8: 3.234},
}


def cli(*args: str) -> None:
    subprocess.run([sys.executable, "-m", "picluster", *args], check=True, capture_output=True, text=True)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true", help="3 sizes, nodes 1 and 2")
    args = parser.parse_args()
    sizes = [10**7, 5 * 10**7, 10**8] if args.quick else sorted(THESIS)
    node_counts = [1, 2] if args.quick else [1, 2, 4, 8]
    hosts = 1 + max(node_counts)

    with Lab(nodes=hosts) as lab:
        for host in lab.hosts:
            lab.shape(host, rate="100mbit")
        delay = "0.3 ms netem delay applied" if lab.netem_supported() else "no netem in this kernel: no delay, rate only"
        inventory = lab.write_inventory(Path(lab.run_dir) / "bench.toml")
        inventory.write_text(inventory.read_text().replace("[cluster]\n", f"[cluster]\nvenv = \"{sys.prefix}\"\n", 1))
        inv = load_inventory(inventory)
        t0 = time.perf_counter()
        cli("cluster", "up", "-i", str(inventory))
        up_s = time.perf_counter() - t0
        agents = [psutil.Process(int(h.read_file(f"/home/pi/{RUN_DIR}/agent.pid"))) for h in lab.hosts]
        before = [(a.cpu_times(), time.monotonic()) for a in agents]
        layout = from_inventory(inv)
        seconds: dict[tuple[int, int], float] = {}
        try:
            for n in node_counts:
                with MonteCarlo(layout, n) as job:
                    for size in sizes:
                        seconds[(size, n)] = job.estimate(size, seed=1).compute_s
                        print(f"  {size:.0e} x{n}: {seconds[(size, n)]:.3f} s", flush=True)
            cpu = []
            for agent, (times, at) in zip(agents, before):
                now = agent.cpu_times()
                cpu.append(100 * (now.user + now.system - times.user - times.system) / (time.monotonic() - at))
            rss = [a.memory_info().rss for a in agents]
        finally:
            cli("cluster", "down", "-i", str(inventory))

    print(f"\n{hosts} test hosts, links 100 Mbit/s ({delay}); cluster up over SSH took {up_s:.1f} s\n")
    header = " | ".join(f"{n} node{'s' if n > 1 else ''} (thesis)" for n in node_counts)
    print(f"| samples | {header} |")
    print("|---|" + "---|" * len(node_counts))
    for size in sizes:
        cells = []
        for n in node_counts:
            ours = seconds[(size, n)]
            theirs = THESIS.get(size, {}).get(n)
            cells.append(f"{ours:.3f} ({theirs:.3f})" if theirs is not None else f"{ours:.3f} (N/A: OOM)")
        print(f"| {size:.0e} | " + " | ".join(cells) + " |")
    print(f"\nnode agent per node over the sweep: CPU {max(cpu):.2f} % of one core at most "
          f"(mean {sum(cpu) / len(cpu):.2f} %), RSS {max(rss) / 2**20:.1f} MiB at most "
          f"(targets: < 1 %, < 40 MB)")


if __name__ == "__main__":
    main()
