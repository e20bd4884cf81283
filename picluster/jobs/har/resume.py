"""What a resumed training goes back to: the run's config, checked as the command line is, and
the inventory it trained on (its chief's node may hold checkpoints the coordinator lacks)."""

from pathlib import Path

from picluster.jobs.har import metrics
from picluster.jobs.har.config import TrainConfig
from picluster.jobs.har.rundir import RunDir, read_json
from picluster.model.inventory import Inventory, load_inventory
from picluster.util.errors import UsageError


def resume_config(run: RunDir) -> TrainConfig:
    """The run's config.json, checked as the command line is; refused before anything starts when
    the run has records but no checkpoint to continue them from (starting over would overwrite them)."""
    if not run.config.exists():
        raise UsageError(f"--resume {run}: no run there (config.json missing)")
    config = TrainConfig.load(run.config)
    placed = read_json(run.layout) or {}
    on_nodes = isinstance(placed, dict) and placed.get("inventory")  # the chief's node may hold checkpoints we lack
    if not on_nodes and metrics.read_rows(run.metrics) and not run.has_checkpoint():
        raise UsageError(f"--resume {run}: the run has records but no checkpoint to continue them from; "
                         "resuming would start over and overwrite them: start a new run instead")
    return config


def run_inventory(run: RunDir) -> Inventory | None:
    """The inventory a run trained on, parsed (a resumed run goes back to the same nodes), else None."""
    placed = read_json(run.layout) or {}
    if not isinstance(placed, dict) or not isinstance(placed.get("inventory", ""), (str, type(None))):
        raise UsageError(f"--resume {run}: layout.json is not a run's layout; give --inventory or start a new run")
    if not placed.get("inventory"):
        return None
    path = Path(placed["inventory"])
    if not path.is_file():
        raise UsageError(f"--resume {run}: it trained on the cluster of {path}, which is gone; give --inventory")
    return load_inventory(path)
