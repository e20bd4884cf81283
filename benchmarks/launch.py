"""picluster launch: its overhead, how fast it notices failures, and how it restarts, side by side.

Run as root (test hosts): .venv/bin/python benchmarks/launch.py [--repeats 3] [--no-lab]

On the local cluster (1 ps + 2 workers) and on 4 test hosts (node01 ps, node02-04 workers), both
examples are started twice over: by hand (the same script and TF_CONFIG, no picluster: the floor)
and with `picluster launch`; the time to the script's first training step is the median of
``--repeats`` runs each, and the overhead is their difference.  Then, one run each: a ps killed
after the first step (time until launch exits), a script that dies at start (launch's wall time), a
worker killed mid-run with --restart-limit 1 (time to its restart and to the restarted copy's first
line), and on the hosts a node cut off before launch and `cluster up` with a venv that cannot
import picluster (the #12 case: the old code waited out its 120 s timeout).
Everything shares this machine's 2 cores: the numbers say what picluster adds, not what Pis do.
"""

import argparse
import json
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples"
COORD = (EXAMPLES / "ps_coordinator.py", ["--steps", "1000000", "--log-every", "100000"], "step 1/")
EACH = (EXAMPLES / "between_graph.py", ["--steps", "1000000", "--log-every", "100000"], ": step 1 ")


STARTED: list["Proc"] = []  # stopped at the end, whatever happened


class Proc:
    """A command whose output lines are timed as they arrive."""

    def __init__(self, argv: list[str], env: dict | None = None) -> None:
        STARTED.append(self)
        self.start = time.monotonic()
        self.proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env,
                                     start_new_session=True, cwd=ROOT)
        self.lines: list[tuple[float, str]] = []
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.append((time.monotonic(), line.rstrip("\n")))

    def first(self, text: str, timeout: float = 300, after: float = 0.0) -> float:
        """Seconds from the start to the first line holding ``text`` (seen after ``after``)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for at, line in list(self.lines):
                if text in line and at >= after:
                    return at - self.start
            if self.proc.poll() is not None and not any(text in ln for _, ln in self.lines):
                raise RuntimeError(f"ended ({self.proc.returncode}) before {text!r}: {self.tail()}")
            time.sleep(0.02)
        raise RuntimeError(f"no {text!r} within {timeout} s: {self.tail()}")

    def wait(self, timeout: float = 300) -> float:
        self.proc.wait(timeout)
        return time.monotonic() - self.start

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGINT)  # launch stops its tasks; a direct run just ends
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)

    def tail(self) -> str:
        return " | ".join(line for _, line in self.lines[-5:])


def cli(*args, check=True) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "picluster", *map(str, args)], capture_output=True, text=True, check=check, cwd=ROOT)


def launch(inventory, *args) -> Proc:
    return Proc([sys.executable, "-m", "picluster", "launch", "--no-live", *(["-i", str(inventory)] if inventory else []), *map(str, args)])


def free_port(host: str) -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def direct(layout, mode: str, coordinator: str, ssh=None) -> list[Proc]:
    """The example started by hand, TF_CONFIG written by hand: what launch saves the user from."""
    if mode == "coordinator":
        script, args, _ = COORD
        cluster = {"chief": [f"{coordinator}:{free_port(coordinator)}"], **layout.cluster_dict()}
        env = dict(os.environ, TF_CONFIG=json.dumps({"cluster": cluster, "task": {"type": "chief", "index": 0}}))
        return [Proc([sys.executable, str(script), *args], env)]
    script, args, _ = EACH
    procs = []
    for task in layout.workers:
        config = json.dumps({"cluster": layout.cluster_dict(), "task": {"type": "worker", "index": task.index}})
        if ssh is None:
            procs.append(Proc([sys.executable, str(script), *args], dict(os.environ, TF_CONFIG=config)))
        else:  # the hosts see this machine's /work and venv
            command = f"TF_CONFIG='{config}' PYTHONUNBUFFERED=1 {sys.executable} {script} {' '.join(args)}"
            # -tt: a terminal, so stopping the ssh client hangs the remote script up (without one
            # it would go on training on the host and load every measurement after it).
            ssh_argv = ssh(task.node)
            procs.append(Proc([ssh_argv[0], "-tt", *ssh_argv[1:], command]))
    return procs


def first_step(procs: list[Proc], text: str) -> float:
    try:
        return min(p.first(text) for p in procs[:1]) if len(procs) == 1 else _earliest(procs, text)
    finally:
        for p in procs:
            p.stop()


def _earliest(procs: list[Proc], text: str) -> float:
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        seen = [at - p.start for p in procs for at, line in list(p.lines) if text in line]
        if seen:
            return min(seen)
        time.sleep(0.02)
    raise RuntimeError(f"no {text!r}: " + " / ".join(p.tail() for p in procs))


def measure(place: str, inventory, layout, coordinator: str, repeats: int, ssh=None, server_pid=None) -> list[tuple[str, str]]:
    rows = []
    for mode, (script, args, marker) in (("coordinator", COORD), ("each-worker", EACH)):
        by_hand = [first_step(direct(layout, mode, coordinator, ssh), marker) for _ in range(repeats)]
        launched = [first_step([launch(inventory, "--mode", mode, script, *args)], marker) for _ in range(repeats)]
        hand, ours = statistics.median(by_hand), statistics.median(launched)
        rows.append((f"{place}: {mode}: start to first step, by hand / launch (median of {repeats})",
                     f"{hand:.1f} s / {ours:.1f} s: overhead {ours - hand:+.1f} s ({ours / hand:.2f}x)"))
        print(*rows[-1], sep=": ", flush=True)
    # A ps killed after the first step: how long until launch has stopped everything and exited.
    run = launch(inventory, "--restart-limit", "3", COORD[0], *COORD[1])
    run.first(COORD[2])
    psutil.Process(server_pid("ps:0")).kill()
    killed = time.monotonic()
    run.wait(120)
    rows.append((f"{place}: killed ps -> launch exited (exit {run.proc.returncode})", f"{time.monotonic() - killed:.1f} s"))
    cli("cluster", "up", *(["-i", inventory] if inventory else []))
    # A script that dies at start, on every worker.
    with tempfile.NamedTemporaryFile("w", suffix=".py", dir=ROOT / "benchmarks", delete=False) as broken:
        broken.write("import no_such_module\n")
    try:
        run = launch(inventory, "--mode", "each-worker", broken.name)
        rows.append((f"{place}: task dead at start -> launch exited (exit {run.proc.wait(120)})", f"{run.wait():.1f} s wall"))
    finally:
        os.unlink(broken.name)
    # A worker killed mid-run, restarted once.
    run = launch(inventory, "--mode", "each-worker", "--restart-limit", "1", EACH[0], *EACH[1])
    try:
        what, result = _restart(run)
        rows.append((f"{place}: {what}", result))
    finally:
        run.stop()
    return rows


def _restart(run: Proc) -> tuple[str, str]:
    run.first("worker 1: step 1 ")
    victim = next(p for p in psutil.process_iter(["cmdline"]) if _runs(p.info["cmdline"] or [], EACH[0].name)
                  and '"index": 1' in p.environ().get("TF_CONFIG", "") and "PICLUSTER_JOB_ID" in p.environ())  # here or on a host: one pid namespace
    victim.kill()
    killed = time.monotonic()
    noticed = run.first("restart 1 of 1", after=killed) - (killed - run.start)
    back = run.first("worker 1: step 1 ", after=killed) - (killed - run.start)
    return ("killed worker -> restarted / its first step again", f"{noticed:.1f} s / {back:.1f} s")


def _runs(cmdline: list[str], script: str) -> bool:
    """The script itself: not its tether, not the launch command that names it."""
    return any(part.endswith(script) for part in cmdline) and "picluster.cluster.tether" not in cmdline and "launch" not in cmdline


def local_rows(repeats: int) -> list[tuple[str, str]]:
    from picluster.cluster.local import LocalCluster

    cli("cluster", "up", "--ps", "1", "--workers", "2")
    try:
        layout = LocalCluster.open().layout
        pid = lambda label: LocalCluster.open().pids[label]
        return measure("local", None, layout, "127.0.0.1", repeats, server_pid=pid)
    finally:
        cli("cluster", "down")


def lab_rows(repeats: int) -> list[tuple[str, str]]:
    from picluster.cluster.nodecluster import RUN_DIR
    from picluster.lab import Lab
    from picluster.model.clusterspec import from_inventory
    from picluster.model.inventory import load_inventory

    with Lab(nodes=4) as lab:
        inventory = lab.write_inventory(Path(lab.run_dir) / "bench.toml")
        inventory.write_text(inventory.read_text().replace("[cluster]\n", f"[cluster]\nvenv = \"{sys.prefix}\"\n", 1))
        layout = from_inventory(load_inventory(inventory))
        start = time.monotonic()
        cli("cluster", "up", "-i", inventory)
        rows = [("lab: cluster up over SSH, 4 hosts", f"{time.monotonic() - start:.1f} s")]
        pid = lambda label: int(lab.host("node01" if label.startswith("ps") else "node02").read_file(
            f"/home/pi/{RUN_DIR}/{label.replace(':', '-')}.pid"))
        try:
            rows += measure("lab", inventory, layout, lab.gateway, repeats, ssh=lab.ssh_command, server_pid=pid)
            lab.make_unreachable("node03")
            try:
                run = launch(inventory, "--mode", "each-worker", EACH[0], *EACH[1])
                rows.append((f"lab: node03 cut off -> launch exited (exit {run.proc.wait(120)})", f"{run.wait():.1f} s wall"))
            finally:
                lab.restore("node03")
            cli("cluster", "down", "-i", inventory)
            broken = Path(lab.run_dir) / "broken.toml"
            broken.write_text(inventory.read_text().replace(f'venv = "{sys.prefix}"', 'venv = "bare-venv"'))
            for host in lab.hosts:
                (host.path(f"{lab.user.home}/bare-venv/bin")).mkdir(parents=True)
                host.path(f"{lab.user.home}/bare-venv/bin/python").symlink_to(f"/usr/bin/python{sys.version_info.major}.{sys.version_info.minor}")
            start = time.monotonic()
            up = cli("cluster", "up", "-i", broken, check=False)
            rows.append((f"lab: cluster up, venvs without picluster -> error (exit {up.returncode})", f"{time.monotonic() - start:.1f} s"))
        finally:
            cli("cluster", "down", "-i", inventory, check=False)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--no-lab", action="store_true", help="the local cluster only (no root needed)")
    args = parser.parse_args()
    # Started from a background job, SIGINT arrives ignored and the commands below would inherit
    # that: launch would not take the Ctrl-C that stop() sends it.  A handler here resets to default on exec.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    state = tempfile.mkdtemp(prefix="picluster-bench-launch-")
    os.environ["PICLUSTER_STATE_DIR"] = state
    os.environ.pop("PICLUSTER_INVENTORY", None)
    try:
        rows = local_rows(args.repeats)
        if not args.no_lab:
            rows += lab_rows(args.repeats)
    finally:
        for proc in STARTED:
            proc.stop()
        shutil.rmtree(state, ignore_errors=True)
    print("\n| measurement | result |\n|---|---|")
    for what, result in rows:
        print(f"| {what} | {result} |")


if __name__ == "__main__":
    main()
