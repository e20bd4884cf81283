"""What each process of a worker node holds in memory, on x86-64 and on aarch64 (the Pi's instruction set).

Run as root: .venv/bin/python benchmarks/arm64_memory.py [--cpu cortex-a53] [--root DIR] [--x86-only]
(not part of CI: the first run builds a Debian arm64 root with debootstrap and pip-installs
TensorFlow's aarch64 wheel into it, several minutes; later runs reuse both).

The same scenario runs twice, natively with this venv and in the arm64 root under qemu-user
(``QEMU_CPU=cortex-a53``, the Pi 3B+'s core; ``cortex-a72`` is the Pi 4's): one epoch of the HAR
model on the prepared data set (``picluster data har`` first), with one ps and one worker,
started as `cluster up` and `train har` start them on nodes:

- separate: the worker node runs its TensorFlow server and, beside it, the training client
  (which imports TensorFlow again);
- shared: the training client hosts the worker's server itself (``--serve``): one runtime per node.

Every 0.5 s it reads each process's /proc status and smaps (picluster.monitor.footprint) and keeps
the peaks; "node" sums the worker node's processes with shared libraries counted once.  Under
qemu-user a process's RSS includes the emulator (its translated-code cache grows with the code
run); the bare-interpreter row shows that overhead's floor.

``--train-seconds T`` stops each training client after T s of training (emulated, one epoch takes
far longer than the memory needs to reach its plateau): the table then says how many steps of the
epoch each run took, so a reader knows which part of training the peaks cover.
"""

import argparse
import json
import os
import shutil
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import arm64root

from picluster.data.har import har_dir
from picluster.data.har.dataset import CACHE_NAME
from picluster.jobs.har.config import TrainConfig
from picluster.monitor.footprint import ProcessMemory, node_resident, process_memory

MiB = 2**20


@dataclass
class Runtime:
    """Where a scenario's processes run: this machine's venv, or the arm64 root under qemu."""

    name: str
    root: Path | None = None  # the arm64 root; None: natively
    cpu: str = ""

    def argv(self, args: list[str], extra: dict[str, str]) -> tuple[list[str], dict[str, str] | None]:
        if self.root is None:
            return [sys.executable if a == "python" else a for a in args], dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", **extra)
        args = [f"{arm64root.VENV}/bin/python" if a == "python" else a for a in args]
        return arm64root.command(self.root, args, self.cpu, extra), None

    def workdir(self, name: str) -> tuple[Path, str]:
        """(the folder as this machine sees it, as the processes see it)."""
        inside = f"/tmp/picluster-arm64-memory/{name}"
        host = (self.root / inside.lstrip("/")) if self.root else Path(inside)
        shutil.rmtree(host, ignore_errors=True)
        host.mkdir(parents=True)
        return host, inside


@dataclass
class Peaks:
    by_label: dict[str, ProcessMemory] = field(default_factory=dict)
    node: int = 0
    steps: str = ""  # "done of per-epoch" training steps the peaks cover


def free_ports(n: int) -> list[int]:
    socks = [socket.socket() for _ in range(n)]
    try:
        for s in socks:
            s.bind(("127.0.0.1", 0))
        return [s.getsockname()[1] for s in socks]
    finally:
        for s in socks:
            s.close()


def sample(procs: dict[str, subprocess.Popen], node: list[str], peaks: Peaks, stop: threading.Event) -> None:
    while not stop.is_set():
        now = {}
        for label, proc in list(procs.items()):  # the scenario adds processes as it goes
            if proc.poll() is None:
                try:
                    now[label] = process_memory(proc.pid, label)
                except OSError:
                    continue
        for label, mem in now.items():
            if label not in peaks.by_label or mem.rss > peaks.by_label[label].rss:
                peaks.by_label[label] = mem
        mine = [now[label] for label in node if label in now]
        if mine:
            peaks.node = max(peaks.node, node_resident(mine))
        stop.wait(0.5)


def wait_file(path: Path, proc: subprocess.Popen, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not path.exists():
        if proc.poll() is not None or time.monotonic() > deadline:
            raise SystemExit(f"{what} did not start (exit {proc.poll()}); see {path.parent}")
        time.sleep(0.2)


def steps_done(run: Path) -> str:
    try:
        live = json.loads((run / "live.json").read_text())
    except (OSError, ValueError):
        return "0 steps (training not started)"
    return f"{live['step']} of {live['steps']} steps"


def scenario(rt: Runtime, mode: str, har_file: Path, timeout: float, train_seconds: float | None) -> Peaks:
    host, inside = rt.workdir(mode)
    (host / "har").mkdir()
    shutil.copy2(har_file, host / "har" / CACHE_NAME)
    (host / "run").mkdir()
    (host / "run" / "config.json").write_text(TrainConfig(epochs=1, workers=1, ps=1, data_dir=f"{inside}/har").to_json())
    ps_port, worker_port, agent_port = free_ports(3)
    layout = [{"job": "ps", "index": 0, "node": "node01", "host": "127.0.0.1", "port": ps_port},
              {"job": "worker", "index": 0, "node": "node02", "host": "127.0.0.1", "port": worker_port}]
    (host / "cluster.json").write_text(json.dumps({"layout": layout}))
    tf_config = json.dumps({"cluster": {"ps": [f"127.0.0.1:{ps_port}"], "worker": [f"127.0.0.1:{worker_port}"]},
                            "task": {"type": "worker", "index": 0}})
    procs: dict[str, subprocess.Popen] = {}
    logs = []

    def start(label: str, args: list[str], extra: dict[str, str] | None = None) -> subprocess.Popen:
        argv, env = rt.argv(["python", "-m", *args], extra or {})
        log = open(host / f"{label.replace(' ', '-')}.log", "wb")  # noqa: SIM115  (closed below)
        logs.append(log)
        procs[label] = subprocess.Popen(argv, env=env, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        return procs[label]

    def server(job: str) -> None:
        proc = start(f"{job} server", ["picluster.cluster.server", "--cluster-file", f"{inside}/cluster.json", "--job", job,
                                       "--task", "0", "--ready-file", f"{inside}/{job}.ready"])
        wait_file(host / f"{job}.ready", proc, timeout, f"the {job} server")

    peaks, stop = Peaks(), threading.Event()
    node = ["worker server", "client", "agent"] if mode == "separate" else ["client serving its task", "agent"]
    watcher = threading.Thread(target=sample, args=(procs, node, peaks, stop), daemon=True)
    watcher.start()
    try:
        start("agent", ["picluster.monitor.agent", "--addr", "127.0.0.1", "--port", str(agent_port), "--node", "node02"])
        server("ps")
        if mode == "separate":
            server("worker")
            client = start("client", ["picluster.jobs.har.process", "--run-dir", f"{inside}/run"], {"TF_CONFIG": tf_config})
        else:
            client = start("client serving its task", ["picluster.jobs.har.process", "--run-dir", f"{inside}/run", "--serve"],
                           {"TF_CONFIG": tf_config})
        if train_seconds is None:
            code = client.wait(timeout)
        else:  # the cap counts from the first training step (live.json), not from the start
            deadline = time.monotonic() + timeout
            while not (host / "run" / "live.json").exists() and client.poll() is None and time.monotonic() < deadline:
                time.sleep(1)
            try:
                code = client.wait(max(0.0, min(train_seconds, deadline - time.monotonic())))
            except subprocess.TimeoutExpired:
                code = 0  # stopped by the cap (terminated below)
        peaks.steps = steps_done(host / "run")
        if code != 0:
            raise SystemExit(f"{rt.name} {mode}: the training client failed (exit {code}); see {host}")
    finally:
        stop.set()
        watcher.join(5)
        for proc in procs.values():
            if proc.poll() is None:
                proc.terminate()
        for proc in procs.values():
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        for log in logs:
            log.close()
    return peaks


def bare_interpreter(rt: Runtime) -> ProcessMemory:
    argv, env = rt.argv(["python", "-c", "import time; time.sleep(4)"], {})
    proc = subprocess.Popen(argv, env=env)
    time.sleep(3)
    mem = process_memory(proc.pid, "python")
    proc.wait()
    return mem


def import_seconds(rt: Runtime) -> float:
    argv, env = rt.argv(["python", "-c", "import tensorflow"], {})
    t0 = time.perf_counter()
    subprocess.run(argv, env=env, check=True, capture_output=True)
    return time.perf_counter() - t0


def cell(mem: ProcessMemory | None) -> str:
    if mem is None:
        return "-"
    return f"{mem.rss / MiB:.0f} ({mem.anon / MiB:.0f} + {mem.file / MiB:.0f})"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--cpu", default="cortex-a53", help="qemu CPU model: cortex-a53 (Pi 3B+), cortex-a72 (Pi 4)")
    parser.add_argument("--root", type=Path, default=arm64root.DEFAULT_ROOT, help="the cached arm64 root")
    parser.add_argument("--x86-only", action="store_true", help="skip the emulated runs")
    parser.add_argument("--timeout", type=float, default=3600)
    parser.add_argument("--train-seconds", type=float, help="stop each client after this many seconds of training")
    parser.add_argument("--json", type=Path, default=Path(__file__).resolve().parent / "results" / "arm64_memory.json")
    args = parser.parse_args()
    if os.geteuid() != 0 and not args.x86_only:
        raise SystemExit("run as root: debootstrap, chroot and mounts")
    har_file = har_dir() / CACHE_NAME
    if not har_file.exists():
        raise SystemExit(f"no prepared HAR data at {har_file}: run 'picluster data har' first")

    runtimes = [Runtime("x86-64")]
    if not args.x86_only:
        arm64root.ensure_root(args.root)
        arm64root.ensure_picluster(args.root)
        runtimes.append(Runtime(f"aarch64 ({args.cpu}, qemu-user)", args.root, args.cpu))
    results = {}
    for rt in runtimes:
        ctx = arm64root.mounted(rt.root) if rt.root else _nothing()
        with ctx:
            print(f"{rt.name}: import tensorflow ...", file=sys.stderr, flush=True)
            imported = import_seconds(rt)
            bare = bare_interpreter(rt)
            runs = {}
            for mode in ("separate", "shared"):
                print(f"{rt.name}: {mode} ...", file=sys.stderr, flush=True)
                t0 = time.perf_counter()
                runs[mode] = scenario(rt, mode, har_file, args.timeout, args.train_seconds)
                print(f"{rt.name}: {mode} done in {time.perf_counter() - t0:.0f} s", file=sys.stderr, flush=True)
        results[rt.name] = (imported, bare, runs)

    names = list(results)
    print("\nPeak RSS per process, MiB (anonymous + file-backed); one HAR epoch, default model, 1 ps + 1 worker\n")
    print("| process | " + " | ".join(names) + " |")
    print("|---|" + "---|" * len(names))
    print("| python3, bare interpreter | " + " | ".join(cell(results[n][1]) for n in names) + " |")
    rows = [("separate", "ps server", "ps server (on the ps node)"), ("separate", "worker server", "worker server"),
            ("separate", "client", "training client beside it"), ("shared", "client serving its task", "training client serving its task"),
            ("separate", "agent", "node agent")]
    for mode, label, text in rows:
        print(f"| {text} | " + " | ".join(cell(results[n][2][mode].by_label.get(label)) for n in names) + " |")
    for mode, text in (("separate", "worker node, separate: server + client + agent"), ("shared", "worker node, shared: client + agent")):
        print(f"| **{text}** (libraries once) | " + " | ".join(f"**{results[n][2][mode].node / MiB:.0f}**" for n in names) + " |")
    print("| training steps the peaks cover (separate; shared) | "
          + " | ".join(f"{results[n][2]['separate'].steps}; {results[n][2]['shared'].steps}" for n in names) + " |")
    print("\n" + "; ".join(f"{n}: import tensorflow {results[n][0]:.1f} s" for n in names))
    out = {n: {"import_s": r[0], "bare": vars(r[1]) | {"files": None},
               "runs": {m: {"node": p.node, "steps": p.steps, "processes": {k: vars(v) | {"files": None} for k, v in p.by_label.items()}}
                        for m, p in r[2].items()}} for n, r in results.items()}
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(out, indent=1))


class _nothing:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


if __name__ == "__main__":
    main()
