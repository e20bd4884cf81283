"""Where sync HAR training goes at 32 and 64 Pis: a two-part model fitted on the lab's measured
points, checked against the points it was not fitted on, then extended.

Run after benchmarks/har_lab.py has measured 1 and 8 workers over several seeds:
    .venv/bin/python benchmarks/har_model.py [--fit s1,s2,s3,s4,s5]

1. Time per update.  A sync update costs each worker its own compute plus its share of the
   exchange with the ps tasks, which grows with the workers each ps serves:
       step_ms(N, P, share) = (a + b * N / P) / (share / 0.222)
   a and b come from the median session ms/step of the --fit variants at 1 and 8 workers (the
   9-host shape: 0.222 of a core per host, one ps).  Compute and the ps's work both slow with a
   smaller share (a 1-worker epoch at 0.111 took twice that at 0.222), hence the common divisor.
   It is checked on the lab's other rows: several ps tasks, 11 and 18 hosts, 16 workers.
2. Updates to validation >= 90 %.  An update of B windows needs
       S(B) = S_min * (1 + B_noise / B)
   updates (McCandlish et al., 2018, "An empirical model of large-batch training"): below the
   noise scale B_noise a larger batch saves updates almost in proportion, above it hardly any.
   S_min and B_noise come from the median updates to 90 % at B = 100 (1 worker) and 800 (8).
   The check is the one-seed 2- and 4-worker run in docs/lab.md (CHECK_UPDATES).

On real Pis every board keeps its CPU as the cluster grows (share fixed), a ps task serves at
most 12 workers (picluster's default: ceil(nodes / 12) ps nodes), and each worker feeds --batch
100 until HAR's training windows run out (a worker needs a batch of its own: N * batch <= n).
The speedup to 90 % is then S(100) * step(1) / (S(B) * step(N)), counting the epochs only.
A benchmark, not a test: nothing asserts.
"""

import argparse
import csv
import math
import statistics
import sys
from pathlib import Path

RESULTS = Path(__file__).resolve().parent / "results"
REFERENCE_SHARE = 0.222  # the 9-host shape's share of a core: the fit's unit
BATCH = 100  # --batch, windows per worker step
NODES_PER_PS = 12  # this model is of the ps exchange, with the ps count the defaults then gave (one per 12 nodes)
# The lab's rows to check the step model on: (variant, workers, ps tasks); docs/lab.md says how
# each was run ("1ps"-"3ps": ps beside workers on 9 hosts; "a": ps apart on 11; "s": 18 hosts).
CHECK_STEPS = (("1ps", 8, 1), ("2ps", 8, 2), ("3ps", 8, 3), ("a1ps", 8, 1), ("a3ps", 8, 3),
               ("s1ps", 1, 1), ("s1ps", 16, 1), ("s2ps", 16, 2))
# Updates to 90 % of the one-seed run at 4a9e1e3 (docs/lab.md, "HAR scaling with a batch per
# worker"): workers -> (epochs to 90 %, updates per epoch).  Not in har_lab.csv any more.
CHECK_UPDATES = {2: (16, 29), 4: (22, 14)}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--fit", default="s1,s2,s3,s4,s5", help="har_lab.csv variants (seeds) to fit on [s1,...,s5]")
    parser.add_argument("--table", type=Path, default=RESULTS / "har_lab.csv")
    args = parser.parse_args()
    if not args.table.exists():
        sys.exit(f"har_model.py: no {args.table}; run benchmarks/har_lab.py first (see docs/lab.md)")
    with open(args.table, newline="") as f:
        rows = [r for r in csv.DictReader(f) if r["mode"] == "sync"]
    fit = {v.strip() for v in args.fit.split(",")}
    by = {w: [r for r in rows if r["variant"] in fit and int(r["workers"]) == w] for w in (1, 8)}
    if not by[1] or not by[8]:
        sys.exit(f"har_model.py: har_lab.csv has no sync rows of {sorted(fit)} at 1 and 8 workers")

    # 1. Time per update.
    one, eight = (statistics.median(float(r["session_ms"]) for r in by[w]) for w in (1, 8))
    b = (eight - one) / 7
    a = one - b
    print(f"step model: step_ms = ({a:.0f} + {b:.1f} * workers / ps) / (share / {REFERENCE_SHARE}), "
          f"from the medians {one:.0f} ms (1 worker) and {eight:.0f} ms (8) of {len(by[1])} and {len(by[8])} runs")

    def step_ms(workers: int, ps: int, share: float = REFERENCE_SHARE) -> float:
        return (a + b * workers / ps) / (share / REFERENCE_SHARE)

    print("\n| row | workers | ps | share | session ms/step measured | modelled | error |\n|---|---|---|---|---|---|---|")
    for variant, workers, ps in CHECK_STEPS:
        r = next((r for r in rows if r["variant"] == variant and int(r["workers"]) == workers), None)
        if r is None:
            continue
        share, measured = float(r["cpu_per_host"]), float(r["session_ms"])
        model = step_ms(workers, ps, share)
        print(f"| {variant} | {workers} | {ps} | {share:.3f} | {measured:.0f} | {model:.0f} | {model / measured - 1:+.0%} |")

    # 2. Updates to 90 %.
    updates = {}
    for w in (1, 8):
        reached = [int(r["epochs"]) * int(r["steps_per_epoch"]) for r in by[w] if r["time_to_90_s"]]
        missed = len(by[w]) - len(reached)
        if len(reached) <= len(by[w]) / 2:
            sys.exit(f"har_model.py: at {w} workers only {len(reached)} of {len(by[w])} runs reached 90 %: no median")
        # A run that never reached 90 % counts as more updates than any that did (the median still holds).
        updates[w] = statistics.median_low(sorted(reached) + [math.inf] * missed)
    ratio = updates[1] / updates[8]  # (1 + Bn/100) / (1 + Bn/800)
    if ratio <= 1 or ratio >= 8:
        sys.exit(f"har_model.py: updates to 90 % at 1 and 8 workers ({updates[1]}, {updates[8]}) fit no noise scale")
    noise = (ratio - 1) / (1 / BATCH - ratio / (8 * BATCH))
    s_min = updates[8] / (1 + noise / (8 * BATCH))
    print(f"\nupdates model: S(B) = {s_min:.0f} * (1 + {noise:.0f} / B), from the median updates to 90 %: "
          f"{updates[1]} at B = {BATCH} and {updates[8]} at B = {8 * BATCH}")

    def updates_to_90(batch: int) -> float:
        return s_min * (1 + noise / batch)

    print("\n| workers | updates to 90 % measured (one seed) | modelled |\n|---|---|---|")
    for w, (epochs, per_epoch) in CHECK_UPDATES.items():
        print(f"| {w} | {epochs * per_epoch} | {updates_to_90(w * BATCH):.0f} |")

    # 3. Real Pis: the share stays, a ps per 12 workers, --batch 100 while the windows last.
    n = int(by[1][0]["steps_per_epoch"]) * BATCH  # 1 worker's windows per epoch (whole batches)
    base = updates_to_90(BATCH) * step_ms(1, 1)
    print(f"\nOn Pis (each keeps its CPU; ceil(workers / {NODES_PER_PS}) ps tasks apart; {n} training windows):")
    print("\n| workers | ps | batch per worker | updates per epoch | ms per update | updates to 90 % | speedup to 90 % | efficiency |"
          "\n|---|---|---|---|---|---|---|---|")
    for w in (1, 2, 4, 8, 16, 32, 64):
        ps = math.ceil(w / NODES_PER_PS)
        batch = min(BATCH, n // w)
        per_epoch = n // w // batch
        time = updates_to_90(w * batch) * step_ms(w, ps)
        print(f"| {w} | {ps} | {batch} | {per_epoch} | {step_ms(w, ps):.0f} | {updates_to_90(w * batch):.0f} | "
              f"{base / time:.1f}x | {base / time / w:.0%} |")


if __name__ == "__main__":
    main()
