"""Calibrate the CPU share of a Pi-profile test host: Monte-Carlo pi as fast as the thesis's single Pi.

Run as root, on a quiet machine: .venv/bin/python benchmarks/lab_calibrate.py

The thesis's Table 5 has one Raspberry Pi 3 B+ draw 6e7 samples in 7.713 s.  Two test hosts
(node01 ps, node02 the worker) come up with 1 GiB each; `cluster up` starts their servers over
SSH.  The worker's CPU quota is then set to a trial share, picluster's Monte-Carlo job times
6e7 samples on it, the share is scaled by measured/7.713 s (CFS time is what the job consumes,
so the rate is close to proportional), and the scaled share is timed again, three times.
It prints the share to put in picluster/lab/profiles.toml.  The thesis-style graph (one
[n, 2] tensor) is timed at the same share for comparison.
"""

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from labcluster import lab_cluster

from picluster.jobs.montecarlo.estimate import MonteCarlo
from picluster.lab.limits import Limits
from picluster.model.clusterspec import from_inventory

THESIS_SAMPLES, THESIS_SECONDS = 6 * 10**7, 7.713


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--trial", type=float, default=0.1, help="first CPU share to time")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    memory = 2**30
    with lab_cluster(2, Limits(cpu=1.0, memory=memory)) as (lab, _, inv):
        worker = lab.hosts[1]
        layout = from_inventory(inv)
        with MonteCarlo(layout, 1) as job:
            def timed(share: float) -> float:
                lab.set_limits(worker, Limits(cpu=share, memory=memory))
                time.sleep(0.5)
                return job.estimate(THESIS_SAMPLES, seed=1).compute_s

            trial = timed(args.trial)
            share = round(args.trial * trial / THESIS_SECONDS, 4)
            print(f"share {args.trial:g}: {trial:.2f} s for 6e7 samples -> scaled share {share:g}", flush=True)
            times = [timed(share) for _ in range(args.repeats)]
            print(f"share {share:g}: {', '.join(f'{t:.2f}' for t in times)} s (median {statistics.median(times):.2f} s; "
                  f"thesis {THESIS_SECONDS} s)", flush=True)
        from thesis_style import ThesisStyle

        # Its [n, 2] tensor does not fit in 1 GiB at 6e7 (benchmarks/montecarlo_lab.py finds where it
        # stops): this comparison of speed gives the host more memory.
        lab.set_limits(worker, Limits(cpu=share, memory=4 * memory))
        thesis = ThesisStyle(layout, 1)
        try:
            t = thesis.run(THESIS_SAMPLES)
        finally:
            thesis.close()
        print(f"thesis-style graph at share {share:g} (4 GiB): {t:.2f} s for 6e7 samples", flush=True)
    print(f"\nprofiles.toml: cpu = {share:g}   # 6e7 samples in {statistics.median(times):.2f} s (thesis: {THESIS_SECONDS} s)")


if __name__ == "__main__":
    main()
