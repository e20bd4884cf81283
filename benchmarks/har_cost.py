"""The cost of one update, design by design: a model that builds the epoch from the parts
har_exchange.py measured on the lab, set against the epoch measured.

    epoch = U x (input + compute + exchange)

U is the updates an epoch holds, input and compute a worker's own per step (metrics.csv), and the
exchange the critical path of one update, from its parts:

- **ps** (fused, 16-bit wire, variable by variable, 2 ps tasks): each ps is one server at its host's
  CPU share s, working through the worker-steps in turn (its CPU per update P, measured, shared
  evenly among the N worker-steps and, for each, half when the step starts: the weights out;
  half when its gradient arrives); each ps link carries what it carried (measured bytes) at
  the link's rate.  Every worker starts together, is served in turn, computes, and the update
  ends when the last gradient is served and the chief's apply is done.  A small event simulation
  of this queue gives the update's time.
- **tree**: the same queue twice: the ps serves the groups' first workers, and each of them its
  members (its CPU beyond a member's, measured), the weights at the start and the gradients at
  the end.
- **all-reduce** (picluster's over TCP, TensorFlow's ring, its two levels): R rounds one after the
  other, each a hop of latency h (a message on a host at a share of a core: its wake-up and its
  CPU) and the round's bytes at the link's rate: halving and doubling 2 log2(N) rounds of halves,
  quarters, ... of the vector; a ring 2(N - 1) rounds of 1/N of it; two levels 2(g - 1) rounds of
  1/g and 2(N/g - 1) of g/N of it.

One parameter per family is not measured but fitted, on the runs of ``--fit`` workers (8): the
all-reduces' hop latency h, and the ps's round at the end of a sync update (the chief's, taking
the arrivals and handing out the tokens), the median over the ps designs.  The model then predicts the other runs (16 workers, and the 9-host
lab's hosts of twice the share), which is the test: ``--report`` prints predicted against measured
epochs and the error; the batch sweep (har_batch.py) uses the same parts to cost an update of any
size.

    .venv/bin/python benchmarks/har_cost.py --rows docs/data/har_exchange_h17.csv docs/data/har_exchange_h18.csv ...
"""

import argparse
import csv
import math
import statistics
import sys
from dataclasses import dataclass
from pathlib import Path

MODEL_BYTES = 69_254 * 4  # the default model's float32 weights (and gradients)
RATES = {"300mbit": 300e6 / 8, "1gbit": 1e9 / 8}  # bytes a second of the lab's shaped links


@dataclass(frozen=True)
class Run:
    """One row of har_exchange.py, in seconds and bytes."""

    design: str
    options: str
    workers: int
    share: float  # of a core, each host
    rate: float  # bytes a second, each link
    updates: int  # a epoch
    epoch: float  # measured, s
    compute: float  # a step, s
    exchange: float  # an update, s (as measured: epoch's steps less compute and input)
    input: float  # a step, s
    ps_cpu: float  # s an update, every ps together
    worker_cpu: float  # s a step, the median worker
    worker_cpu_max: float  # s a step, the busiest worker
    ps_bytes: tuple[float, float]  # in, out an update, every ps together
    hosts: int

    @property
    def kind(self) -> str:
        return kind_of(self.design, self.options)

    @property
    def ps_tasks(self) -> int:
        words = self.options.split()
        return int(words[words.index("--ps") + 1]) if "--ps" in words else 1


def kind_of(design: str, options: str) -> str:
    """A design's family, from its options; a row with no --exchange ran the default of its day,
    which its design's name says (the all-reduce since it became the sync default; the ps before)."""
    if "--exchange tree" in options:
        return "tree"
    for name in ("collective-tree", "collective", "allreduce"):
        if f"--exchange {name}" in options:
            return name
    return "allreduce" if "--exchange" not in options and design == "allreduce" else "ps"


def load(paths: list[Path]) -> list[Run]:
    """The runs of each file, with one compute a step per worker count: the all-reduce's run's
    (it times its exchange itself, so its split of a step is measured, not traced), as a worker's
    compute does not depend on how the update meets."""
    runs = []
    for path in paths:
        with open(path, newline="") as f:
            rows = [r for r in csv.DictReader(f) if r["ok"] == "yes" and r.get("epoch_s") and r["design"] != "pi"]
        f_ = lambda r, k: float(r[k]) if r.get(k) else 0.0
        computes = {r["workers"]: f_(r, "compute_s") / f_(r, "updates_per_epoch") for r in rows if kind_of(r["design"], r["options"]) == "allreduce"}
        for r in rows:
            if r["workers"] not in computes:
                sys.exit(f"{path}: no all-reduce run of {r['workers']} workers to give a step's compute")
            u = int(f_(r, "updates_per_epoch"))
            compute, input_ = computes[r["workers"]], f_(r, "input_s") / u
            runs.append(Run(r["design"], r["options"], int(r["workers"]), float(r["cpu_per_host"]), RATES[r["link"]], u,
                            f_(r, "epoch_s"), compute, f_(r, "epoch_s") / u - input_ - compute, input_,
                            f_(r, "ps_cpu_ms_per_update") / 1000, f_(r, "worker_cpu_ms_per_step") / 1000,
                            f_(r, "worker_cpu_ms_per_step_max") / 1000,
                            (f_(r, "ps_kb_in_per_update") * 1000, f_(r, "ps_kb_out_per_update") * 1000), int(r["hosts"])))
    return runs


def served_in_turn(arrivals: list[float], work: float, start: float = 0.0) -> float:
    """When one server at work seconds each is done with requests arriving at ``arrivals``."""
    free = start
    for t in sorted(arrivals):
        free = max(free, t) + work
    return free


def ps_update(run: Run, compute: float) -> float:
    """The update through k ps tasks: served in turn at the start (weights out) and as each
    gradient arrives, each ps on its own share and link (the k share every worker-step's work)."""
    n, k, s = run.workers, run.ps_tasks, run.share
    per = run.ps_cpu / k / n / s  # one worker-step at one ps, wall seconds at its share
    out_bytes, in_bytes = run.ps_bytes[1] / k / n, run.ps_bytes[0] / k / n
    # Start: each ps serves the workers in turn; a worker has its weights once every ps did.
    starts = [0.0] * n
    for _ in range(k):
        free = link = 0.0
        for w in range(n):
            free += per / 2
            link = max(link, free) + out_bytes / run.rate
            starts[w] = max(starts[w], link)
    ready = [t + compute for t in starts]
    # End: every gradient through the ps's link, then its half of the worker-step's work.
    ends = []
    for _ in range(k):
        link, arrivals = 0.0, []
        for t in sorted(ready):
            link = max(link, t) + in_bytes / run.rate
            arrivals.append(link)
        ends.append(served_in_turn(arrivals, per / 2, start=n * per / 2))
    return max(ends)


def tree_update(run: Run, compute: float, group: int = 4) -> float:
    """Two queues, each as a ps's: at the start the ps serves the groups' first workers the
    weights in turn, and each first worker its members; at the end each first worker takes its
    members' gradients in turn and sums them, then the ps the groups' sums.  A first worker's work
    a member is its CPU beyond a member's, measured; the ps's a group, its CPU over the groups;
    each half at the start and half at the end, as the ps's."""
    n, s = run.workers, run.share
    groups = math.ceil(n / group)
    lead = max(0.0, run.worker_cpu_max - run.worker_cpu) / max(1, group - 1) / s  # a member at its first worker
    root = run.ps_cpu / groups / s  # a group at the ps
    vector = MODEL_BYTES / run.rate
    root_free, sums = 0.0, []
    for g in range(groups):
        members = min(group, n - g * group) - 1
        root_free += root / 2
        lead_free = root_free + vector  # the first worker has the weights
        starts = [lead_free]
        for _ in range(members):
            lead_free += lead / 2
            starts.append(lead_free + vector)
        ready = [t + compute for t in starts]
        sums.append(served_in_turn([t + vector for t in ready[1:]], lead / 2, start=max(lead_free, ready[0])))
    return served_in_turn([t + vector for t in sums], root / 2, start=root_free)


def rounds(run: Run) -> list[float]:
    """The bytes of each round of an all-reduce of the model, in order."""
    n = run.workers
    if run.kind == "allreduce":
        low = 1 << (n.bit_length() - 1)
        halves = [MODEL_BYTES / 2 ** (k + 1) for k in range(low.bit_length() - 1)]
        fold = [MODEL_BYTES] if low < n else []
        return fold + halves + halves[::-1] + fold
    if run.kind == "collective-tree":
        g = max(d for d in range(1, 5) if n % d == 0)
        if g not in (1, n):
            return [MODEL_BYTES / g] * 2 * (g - 1) + [MODEL_BYTES * g / n] * 2 * (n // g - 1)
    return [MODEL_BYTES / n] * 2 * (n - 1)


def ring_update(run: Run, hop: float) -> float:
    """R rounds one after the other: each a hop's latency and its bytes at the link's rate."""
    return sum(hop + b / run.rate for b in rounds(run))


def exchange(run: Run, hops: dict[str, float]) -> float:
    if run.kind == "ps":
        return ps_update(run, run.compute) - run.compute + hops.get("ps", 0.0)
    if run.kind == "tree":
        return tree_update(run, run.compute) - run.compute  # its two queues alone came within 5 % (no fitted round)
    return ring_update(run, hops[run.kind])


def fit_hops(runs: list[Run], workers: int) -> dict[str, float]:
    """Each all-reduce's hop latency, from its runs of ``workers`` workers: their exchange less the
    bytes' time, over their rounds (the median over the shares measured)."""
    hops: dict[str, list[float]] = {}
    for r in runs:
        if r.workers == workers and r.kind in ("allreduce", "collective", "collective-tree"):
            steps = rounds(r)
            hops.setdefault(r.kind, []).append((r.exchange - sum(b / r.rate for b in steps)) / len(steps))
        elif r.workers == workers and r.kind == "ps":
            # A sync update through a ps ends with the chief's own round: it takes the arrivals and
            # hands out the tokens the workers wait for; its latency, what the queue leaves over.
            hops.setdefault("ps", []).append(r.exchange - (ps_update(r, r.compute) - r.compute))
    return {k: statistics.median(v) for k, v in hops.items()}


def predict(run: Run, hops: dict[str, float]) -> float:
    return run.updates * (run.input + run.compute + exchange(run, hops))


def report(runs: list[Run], fit: int) -> None:
    hops = fit_hops(runs, fit)
    print(f"hop latency fitted on {fit} workers: " + ", ".join(f"{k} {v * 1000:.1f} ms" for k, v in sorted(hops.items())))
    print("| design | workers | hosts (core each) | epoch measured, s | predicted, s | error | exchange an update: measured / predicted, ms | fitted here |")
    print("|---|---|---|---|---|---|---|---|")
    worst = 0.0
    for r in sorted(runs, key=lambda r: (r.hosts, r.workers, r.kind, r.design)):
        if r.kind != "tree" and r.kind not in hops:
            continue
        p = predict(r, hops)
        err = p / r.epoch - 1
        fitted = r.workers == fit and r.kind != "tree"
        worst = max(worst, abs(err)) if not fitted else worst
        print(f"| {r.design} | {r.workers} | {r.hosts} ({r.share:g}) | {r.epoch:.2f} | {p:.2f} | {err:+.0%} | "
              f"{r.exchange * 1000:.0f} / {exchange(r, hops) * 1000:.0f} | {'yes' if fitted else ''} |")
    print(f"\nlargest error where nothing was fitted: {worst:.0%}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", nargs="+", type=Path, required=True, help="har_exchange.py's rows files")
    ap.add_argument("--fit", type=int, default=8, help="the worker count whose runs give the hop latencies [8]")
    args = ap.parse_args()
    runs = load(args.rows)
    if not runs:
        sys.exit("no rows")
    report(runs, args.fit)


if __name__ == "__main__":
    main()
