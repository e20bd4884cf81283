"""Shared by the lab benchmarks: test hosts with limits, a cluster started on them over SSH.

    with lab_cluster(hosts=9, limits=resolve(9, profile="pi3b")) as (lab, inventory, inv):
        ...   # every host's servers and agent are up; `picluster ... -i inventory` works

Not a benchmark itself (imported by the scripts beside it).
"""

import signal
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from picluster.lab import Lab  # noqa: E402
from picluster.lab.limits import Limits, fair_share, machine, resolve  # noqa: E402
from picluster.model.inventory import Inventory, load_inventory  # noqa: E402


def cli(*args: str, timeout: float = 900) -> str:
    """Run picluster's command line; its stderr on failure."""
    proc = subprocess.run([sys.executable, "-m", "picluster", *args], capture_output=True, text=True, timeout=timeout)
    if proc.returncode != 0:
        raise SystemExit(f"picluster {' '.join(args)} failed ({proc.returncode}): {proc.stderr.strip()[-2000:]}")
    return proc.stdout


def pi_shaped(hosts: int) -> Limits:
    """Each of ``hosts`` an equal share of this machine's cores (they compute side by side) and
    the pi3b profile's memory: the lab shape of the HAR benchmarks."""
    return Limits(cpu=fair_share(machine()[0], hosts), memory=resolve(hosts, profile="pi3b").memory)


def lab_inventory(lab: Lab, ps_hosts: int = 1, beside: bool = True) -> Path:
    """The lab's inventory, with this venv as every node's (the hosts share this machine's /usr and
    /work).  ``ps_hosts`` > 1 gives the first that many hosts a ps task: node01 only a ps, the
    others a ps beside their worker (the placement a cluster without spare boards has) or, without
    ``beside``, a ps only (the workers are the hosts after them)."""
    path = lab.write_inventory(Path(lab.run_dir) / "bench.toml")
    text = path.read_text().replace("[cluster]\n", f"[cluster]\nvenv = \"{sys.prefix}\"\n", 1)
    if ps_hosts > 1:
        names = [h.name for h in lab.hosts]
        if not 1 < ps_hosts < len(names):
            raise SystemExit(f"ps_hosts={ps_hosts}: a lab of {len(names)} hosts holds 1 to {len(names) - 1} ps hosts")
        text = text.replace(_roles_line(text, "ps"), f'ps = "{",".join(names[:ps_hosts])}"\n', 1)
        if not beside:
            text = text.replace(_roles_line(text, "worker"), f'worker = "{",".join(names[ps_hosts:])}"\n', 1)
    path.write_text(text)
    return path


def _roles_line(text: str, role: str) -> str:
    line = next((line + "\n" for line in text.splitlines() if line.startswith(f"{role} = ")), None)
    if line is None:
        raise SystemExit(f"the lab's inventory has no {role} line to change")
    return line


@contextmanager
def lab_cluster(hosts: int, limits: Limits | None = None, rate: str | None = None,
                start: bool = True, ps_hosts: int = 1, beside: bool = True) -> Iterator[tuple[Lab, Path, Inventory]]:
    """A lab of ``hosts`` (node01 ps, the others workers; ``ps_hosts``, ``beside`` as in lab_inventory) with
    ``limits`` each and its links shaped to ``rate``; with ``start``, `cluster up` on it (and
    `cluster down` after).  SIGTERM (as
    `kill` sends) unwinds like Ctrl-C, so the servers and the lab go down with the benchmark."""
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(128 + signum))
    with Lab(nodes=hosts, limits=limits) as lab:
        if rate:
            for host in lab.hosts:
                lab.shape(host, rate=rate)
        inventory = lab_inventory(lab, ps_hosts, beside)
        if start:
            cli("cluster", "up", "-i", str(inventory))
        try:
            yield lab, inventory, load_inventory(inventory)
        finally:
            if start:
                cli("cluster", "down", "-i", str(inventory))
