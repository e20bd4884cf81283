"""The coordinator: attach a cluster, start one client per worker task, follow the chief, clean up.

The clients (``python -m picluster.train.replica``) are driven only by files in the run
directory, so issue 6 can start the same module over SSH.  Progress comes from the files the
chief writes.  A failed client, Ctrl-C or SIGTERM stops every client and (through ``attach``)
any temporary servers; no process outlives the coordinator (PDEATHSIG as in picluster.server).
"""

import json
import os
import secrets
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from datetime import datetime
from pathlib import Path

from picluster.errors import ClusterError, UsageError
from picluster.lifetime import last_line, signal_group
from picluster.local import answers
from picluster.paths import state_dir
from picluster.train import metrics
from picluster.train.config import TrainConfig

POLL_S = 0.2
CHECK_S = 5.0  # seconds between checks that the cluster's servers still answer


def new_run_dir(run_dir: Path | None) -> Path:
    if run_dir is None:
        run_dir = state_dir() / "runs" / datetime.now().strftime("%Y%m%d-%H%M%S")
    if (run_dir / "config.json").exists():
        raise UsageError(f"{run_dir} already holds a run; continue it with --resume {run_dir} or choose another --run-dir")
    run_dir.mkdir(parents=True, exist_ok=True)
    return run_dir


def check_data(config: TrainConfig) -> None:
    """Fail before any server starts: a missing or misshapen data set is the user's to fix."""
    from picluster.train.replica import load_data

    load_data(config)


def train(config: TrainConfig, run_dir: Path, inventory: Path | None = None,
          on_epoch: Callable[[dict], None] = lambda row: None,
          on_event: Callable[[str], None] = lambda msg: None) -> dict:
    """Run (or continue) the training in ``run_dir``; return result.json's contents."""
    check_data(config)
    (run_dir / "config.json").write_text(config.to_json())
    (run_dir / "result.json").unlink(missing_ok=True)
    if config.standalone:
        clients = []
        try:
            clients.append(_spawn(run_dir, 0))
            return _follow(run_dir, config, clients, on_epoch, on_event)
        finally:
            _stop(clients)
    from picluster.connect import attach

    with attach(inventory, workers=config.workers, ps=config.ps) as cluster:
        layout = cluster.layout
        used = [t for t in layout.tasks if t.job == "ps" and t.index < config.ps]
        used += [t for t in layout.tasks if t.job == "worker" and t.index < config.workers]
        # Only the tasks we use go in our ClusterSpec: spare ones must not be waited for.
        rows = [r for r in layout.to_json() if any(r["job"] == t.job and r["index"] == t.index for t in used)]
        metrics.write_json(run_dir / "layout.json", {"layout": rows, "cluster": cluster.kind, "launch": secrets.token_hex(4)})
        on_event(f"cluster: {cluster.kind}, {config.ps} ps + {config.workers} workers"
                 + (f" (started in {cluster.start_s:.1f} s)" if cluster.start_s else ""))
        clients = []
        try:
            for i in range(config.workers):
                clients.append(_spawn(run_dir, i))
            return _follow(run_dir, config, clients, on_epoch, on_event, used)
        finally:
            _stop(clients)


def _spawn(run_dir: Path, task: int) -> subprocess.Popen:
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2")
    with open(run_dir / f"worker-{task}.log", "ab") as log:
        return subprocess.Popen(
            [sys.executable, "-m", "picluster.train.replica", "--run-dir", str(run_dir),
             "--task", str(task), "--parent", str(os.getpid())],
            stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
            start_new_session=True,  # Ctrl-C reaches the coordinator, which stops clients in order
            env=env,
        )


def _follow(run_dir: Path, config: TrainConfig, clients: list[subprocess.Popen],
            on_epoch, on_event, tasks=()) -> dict:
    csv_path = run_dir / "metrics.csv"
    # Keyed by write time: on --resume the chief drops rows it will redo, and only new ones show.
    shown = {r.get("time") for r in metrics.read_rows(csv_path)}
    lost: set[int] = set()
    chief = clients[0]
    last_check = time.monotonic()
    while True:
        rows = metrics.read_rows(csv_path)
        for row in rows:
            if row.get("time") not in shown:
                shown.add(row.get("time"))
                on_epoch(row)
        code = chief.poll()
        if code is not None:
            if code != 0:
                raise ClusterError(f"the chief (worker 0) failed: {last_line(run_dir / 'worker-0.log')} (log: {run_dir / 'worker-0.log'})"
                                   + _resume_hint(run_dir))
            break
        # Once the chief has finished, others may fail as it closes the queues: not a loss.
        done = (run_dir / "result.json").exists()
        for i, proc in enumerate([] if done else clients[1:], start=1):
            code = proc.poll()
            if code is None or code == 0 or i in lost:  # 0: it finished its epochs
                continue
            why = f"signal {-code}" if code < 0 else f"exit code {code}"
            if config.mode == "sync":
                raise ClusterError(f"worker {i} died ({why}); sync training cannot go on without it"
                                   + _resume_hint(run_dir))
            lost.add(i)
            on_event(f"worker {i} died ({why}); async training goes on with {config.workers - len(lost)} worker(s)")
        if time.monotonic() - last_check > CHECK_S and not done:
            # A dead server leaves the clients waiting forever: notice it here.
            last_check = time.monotonic()
            for task in tasks:
                if not _answers(task.host, task.port) and (task.job == "ps" or task.index == 0 or config.mode == "sync"):
                    raise ClusterError(f"{task.label} on {task.node} stopped answering; the run stopped"
                                       + _resume_hint(run_dir))
        time.sleep(POLL_S)
    result = json.loads((run_dir / "result.json").read_text())
    result["lost_workers"] = sorted(lost)
    metrics.write_json(run_dir / "result.json", result)
    return result


def _answers(host: str, port: int) -> bool:
    for _ in range(3):  # a busy server may be slow to accept; three misses mean it is gone
        if answers(host, port, timeout=2.0):
            return True
        time.sleep(0.5)
    return False


def _resume_hint(run_dir: Path) -> str:
    if any((run_dir / "checkpoints").glob("*.index")):
        return f"; continue with 'picluster train har --resume {run_dir}'"
    return ""


def _stop(clients: list[subprocess.Popen], grace: float = 5.0) -> None:
    for proc in clients:
        if proc.poll() is None:
            signal_group(proc.pid, signal.SIGTERM)
    deadline = time.monotonic() + grace
    for proc in clients:
        try:
            proc.wait(max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            signal_group(proc.pid, signal.SIGKILL)
            proc.wait(5)


def resume_config(run_dir: Path) -> TrainConfig:
    if not (run_dir / "config.json").exists():
        raise UsageError(f"--resume {run_dir}: no run there (config.json missing)")
    return TrainConfig.load(run_dir / "config.json")

