"""The Ansible twin of provisioning and of the node chores, as the package ships it
(``picluster/ansible/``: site.yml, reboot.yml, upgrade.yml, shutdown.yml, their roles), and a copy
of it where ``ansible-playbook`` can run it (``picluster playbooks --out DIR``).

In a checkout, ``ansible/`` at the top links here, and each role's templates link to the shared
``provision/files/*.j2``; a wheel holds them as files.  A copy holds the files, links followed.
"""

from pathlib import Path

from picluster.util import atomic
from picluster.util.errors import ClusterError, StorageError, UsageError

DIR = Path(__file__).resolve().parents[1] / "ansible"
PLAYBOOKS = ("site.yml", "reboot.yml", "upgrade.yml", "shutdown.yml")


def files() -> dict[str, Path]:
    """Every file of the twin: its path inside the twin -> where this picluster has it."""
    if not (DIR / "site.yml").is_file():
        raise ClusterError(f"the Ansible twin is missing from this picluster's install ({DIR}): reinstall picluster")
    return {path.relative_to(DIR).as_posix(): path for path in sorted(DIR.rglob("*")) if path.is_file() and "__pycache__" not in path.parts}


def copy(out: Path, force: bool = False) -> list[str]:
    """The twin's files into ``out`` (made if missing), each written whole; the folder's other
    files (the inventory ``picluster inventory --ansible`` wrote there) are left alone.  A file of
    the twin's that is there with other content (edited, or another version's) is replaced only
    with ``force``: without it, nothing is written.  Returns the files written."""
    wanted = {name: path.read_bytes() for name, path in files().items()}
    for place in (out, *out.parents):
        if place.exists() and not place.is_dir():
            raise UsageError(f"--out {out}: {place} is not a directory; give a folder for the playbooks")
    differ = []
    for name, data in wanted.items():
        target = out / name
        if target.is_symlink() or (target.exists() and not target.is_file()):
            raise UsageError(f"--out {out}: {target} is not a plain file; give another folder")
        if target.is_file() and target.read_bytes() != data:
            differ.append(name)
    if differ and not force:
        shown = ", ".join(differ[:3]) + (f" and {len(differ) - 3} more" if len(differ) > 3 else "")
        raise UsageError(f"--out {out}: {shown} differ from this picluster's (edited, or another version's): "
                         "--force replaces the twin's files (the folder's other files stay), or give a new folder")
    written = []
    for name, data in wanted.items():
        target = out / name
        if target.is_file() and target.read_bytes() == data:
            continue
        try:
            target.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise StorageError(target.parent, exc) from None
        atomic.write_bytes(target, data)
        written.append(name)
    return written
