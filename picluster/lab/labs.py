"""Every lab on this machine as a ``Lab``: open one by id, tear one or all down, reap the orphans
(labs whose owning process died before it could clean up)."""

from pathlib import Path

from picluster.lab.lab import Lab
from picluster.lab.registry import known_ids, owner_alive
from picluster.util.errors import ClusterError, UsageError


def open_lab(lab_id: str, root: Path | None = None):
    """The lab from its state file, or a bare one that can only sweep away what is named after it."""
    try:
        return Lab.load(lab_id, root)
    except (UsageError, ClusterError, KeyError):
        return Lab.remains(lab_id, root)


def teardown(lab_id: str, root: Path | None = None) -> bool:
    """Tear lab `lab_id` down; False when nothing of it existed."""
    if lab_id not in known_ids(root):
        return False
    open_lab(lab_id, root).down()
    return True


def down_all(root: Path | None = None) -> list[str]:
    done, problems = [], []
    for lab_id in known_ids(root):
        try:
            open_lab(lab_id, root).down()
            done.append(lab_id)
        except ClusterError as exc:
            problems.append(str(exc))
    if problems:
        raise ClusterError("; ".join(problems))
    return done


def reap_orphans(root: Path | None = None) -> list[str]:
    """Tear down labs whose owning process is gone (killed before it could clean up)."""
    reaped = []
    for lab_id in known_ids(root):
        try:
            lab = Lab.load(lab_id, root)
        except (UsageError, ClusterError, KeyError, TypeError, ValueError):
            continue  # not ours to judge: e.g. a lab another picluster version wrote, with fields we lack
        if lab.owner and not owner_alive(lab.owner):
            lab.down()
            reaped.append(lab_id)
    return reaped
