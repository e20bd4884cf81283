"""The whole chain on VM test hosts, timed phase by phase: what a new cluster's owner runs.

Run as root, on a quiet machine (each phase is minutes to an hour under TCG):

    .venv/bin/python benchmarks/vm_chain.py                       # every phase, then the lab goes
    .venv/bin/python benchmarks/vm_chain.py --phases up,provision --keep   # stop there, keep the lab
    .venv/bin/python benchmarks/vm_chain.py --phases cluster,montecarlo,har,reboot,down
    .venv/bin/python benchmarks/vm_chain.py --arch arm64 --name arm   # the Pi's instruction set

Phases, in this order (``--phases`` picks some; a later run goes on with the kept lab):

- ``up``: ``picluster lab up --vm`` (3 VMs: node01 the ps and NFS master, node02-03 workers);
- ``provision``: every step, the runtime step with the real TensorFlow wheel from the wheelhouse
  (staged once on the NFS share, installed on every node);
- ``cluster``: ``picluster cluster up``;
- ``montecarlo``: ``picluster run montecarlo --samples 1e7 --nodes 2``;
- ``har``: the HAR windows copied into the share, then one short epoch of
  ``picluster train har --layers 3``;
- ``reboot``: ``picluster nodes reboot`` of every node, one at a time, then ``cluster status``
  with no ``cluster up`` in between (the tasks come back by themselves);
- ``replace``: node03's card "dies" (its VM reset to a fresh image with a new host key) while
  node01-02 keep running; ``picluster provision`` then refuses node03 naming the key, and
  ``picluster provision --replaced node03`` pins the new key, installs the runtime again from the
  wheels on the share and starts node03's tasks (the rest of the cluster is up);
- ``shutdown``: ``picluster nodes shutdown`` of every node (workers first, the NFS master last);
- ``down``: ``picluster lab down``.

Each phase's wall time, and per node after `cluster up` what picluster's processes hold in memory,
go to benchmarks/results/vm_chain-<arch>.json, merged with earlier runs of other phases.
"""

import argparse
import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results"
PHASES = ("up", "provision", "cluster", "montecarlo", "har", "reboot", "replace", "shutdown", "down")
STATE = Path.home() / ".local" / "state" / "picluster" / "lab"


def cli(*args: str, timeout: float = 7200, expect: int = 0) -> tuple[float, str]:
    """Seconds and output of one picluster command; its stderr ends the run on another exit code."""
    started = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "picluster", *args], capture_output=True, text=True, timeout=timeout)
    seconds = time.monotonic() - started
    print(f"  picluster {' '.join(args)}: {seconds:.1f} s (exit {proc.returncode})", flush=True)
    if expect != 0 and proc.returncode == expect:
        return seconds, proc.stdout + proc.stderr
    if proc.returncode != 0:
        raise SystemExit(f"picluster {' '.join(args)} failed ({proc.returncode}): {(proc.stderr or proc.stdout).strip()[-3000:]}")
    return seconds, proc.stdout


def ssh(name: str, node: str, command: str, timeout: float = 600) -> str:
    config = STATE / name / "ssh_config"
    proc = subprocess.run(["ssh", "-F", str(config), node, command], capture_output=True, text=True, timeout=timeout)
    if proc.returncode != 0:
        raise SystemExit(f"{node}: {command}: {proc.stderr.strip()[-500:]}")
    return proc.stdout


def memory(name: str, nodes: list[str]) -> dict[str, list[dict]]:
    """Per node, each picluster process's resident memory (MiB) and what it runs."""
    script = ("for p in $(pgrep -f 'picluster\\.(cluster\\.server|monitor\\.agent|jobs)'); do "
              "echo \"$(awk '/VmRSS/ {print $2}' /proc/$p/status) $(tr '\\0' ' ' < /proc/$p/cmdline | cut -c1-160)\"; done")
    out = {}
    for node in nodes:
        rows = []
        for line in ssh(name, node, script).splitlines():
            kb, _, cmd = line.partition(" ")
            if kb.isdigit():
                rows.append({"rss_mib": round(int(kb) / 1024, 1), "command": cmd})
        out[node] = rows
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--name", default="chain", help="the lab's name [chain]")
    parser.add_argument("--vms", type=int, default=3)
    parser.add_argument("--arch", choices=("amd64", "arm64"), default="amd64", help="the VMs' instruction set [amd64]")
    parser.add_argument("--phases", default=",".join(PHASES), help=f"comma-separated, from {','.join(PHASES)}")
    parser.add_argument("--keep", action="store_true", help="leave the lab up after the last phase asked for")
    args = parser.parse_args()
    phases = [p for p in args.phases.split(",") if p]
    unknown = [p for p in phases if p not in PHASES]
    if unknown:
        parser.error(f"unknown phase(s) {','.join(unknown)}: choose from {','.join(PHASES)}")
    arch = args.arch
    RESULTS.mkdir(parents=True, exist_ok=True)
    out_path = RESULTS / f"vm_chain-{arch}.json"
    record = json.loads(out_path.read_text()) if out_path.exists() else {"phases": {}}
    inventory = STATE / args.name / "chain.toml"
    nodes = [f"node{i:02d}" for i in range(1, args.vms + 1)]
    known = STATE / args.name / "known_hosts"
    try:
        for phase in phases:
            print(f"{phase}:", flush=True)
            extra: dict = {}
            started = time.monotonic()
            if phase == "up":
                cli("lab", "up", "--vm", *(["--arch", arch] if arch != "amd64" else []), "-n", str(args.vms), "--name", args.name,
                    "--inventory-out", str(inventory))
            elif phase == "provision":
                _, text = cli("provision", "-i", str(inventory), "--known-hosts", str(known))
                extra["report_tail"] = text.strip().splitlines()[-8:]
            elif phase == "cluster":
                cli("cluster", "up", "-i", str(inventory), "--timeout", "1800")  # TensorFlow loads in minutes under TCG
                extra["memory"] = memory(args.name, nodes)
            elif phase == "montecarlo":
                _, text = cli("run", "montecarlo", "--samples", "1e7", "--nodes", str(args.vms - 1), "-i", str(inventory))
                extra["output"] = text.strip().splitlines()[-4:]
            elif phase == "har":
                cache = Path.home() / ".local" / "share" / "picluster" / "har" / "har.npz"
                t, _ = copy_into_share(args.name, cache)
                extra["copy_s"] = round(t, 1)
                t, text = cli("train", "har", "--layers", "3", "--epochs", "1", "-i", str(inventory))
                extra["train_s"] = round(t, 1)
                runs = sorted((Path.home() / ".local" / "state" / "picluster" / "runs").glob("*/result.json"), key=lambda p: p.stat().st_mtime)
                if runs:  # train's summary goes to the terminal, its figures to the run's result.json
                    result = json.loads(runs[-1].read_text())
                    extra["result"] = {k: result.get(k) for k in ("best_epoch", "val_accuracy", "test_accuracy", "epoch_s_mean", "wall_s")}
            elif phase == "reboot":
                _, text = cli("nodes", "reboot", "all", "-i", str(inventory), "--timeout", "1800", "--yes")
                extra["output"] = text.strip().splitlines()
                t, text = cli("cluster", "status", "-i", str(inventory))
                extra["status"] = text.strip().splitlines()
            elif phase == "replace":
                sys.path.insert(0, str(ROOT))
                from picluster.lab import Lab

                t0 = time.monotonic()
                Lab.load(args.name).reset("node03")
                extra["reset_s"] = round(time.monotonic() - t0, 1)
                _, text = cli("provision", "-i", str(inventory), "--known-hosts", str(known), expect=1)
                extra["refused"] = [line for line in text.splitlines() if "host key" in line][-2:]
                t, text = cli("provision", "-i", str(inventory), "--known-hosts", str(known), "--replaced", "node03")
                extra["provision_s"] = round(t, 1)
                extra["output"] = text.strip().splitlines()[-6:]
                _, text = cli("cluster", "status", "-i", str(inventory))
                extra["status"] = text.strip().splitlines()
            elif phase == "shutdown":
                _, text = cli("nodes", "shutdown", "all", "-i", str(inventory), "--yes")
                extra["output"] = text.strip().splitlines()
            elif phase == "down":
                cli("lab", "down", "--name", args.name)
            seconds = round(time.monotonic() - started, 1)
            record["phases"][phase] = {"seconds": seconds, "when": time.strftime("%Y-%m-%dT%H:%M:%S%z"), **extra}
            out_path.write_text(json.dumps(record, indent=2))
            print(f"{phase}: {seconds:.1f} s", flush=True)
    finally:
        if not args.keep and "down" not in phases and (STATE / args.name).exists():
            subprocess.run([sys.executable, "-m", "picluster", "lab", "down", "--name", args.name], check=False)
    print(f"results: {out_path}")


def copy_into_share(name: str, cache: Path) -> tuple[float, None]:
    """har.npz into node01's share, where every node reads it at the inventory's data_dir."""
    if not cache.is_file():
        raise SystemExit(f"no {cache}: prepare it first with 'picluster data har'")
    started = time.monotonic()
    config = STATE / name / "ssh_config"
    ssh(name, "node01", "sudo -n install -d -o pi -g pi /srv/picluster/har")
    subprocess.run(["scp", "-q", "-F", str(config), str(cache), "node01:/srv/picluster/har/har.npz"], check=True, timeout=600)
    return time.monotonic() - started, None


if __name__ == "__main__":
    if shutil.which("qemu-system-x86_64") is None and shutil.which("qemu-system-aarch64") is None:
        raise SystemExit("qemu is not installed: scripts/lab-deps.sh installs it")
    main()
