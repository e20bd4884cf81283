"""A launched job's files (each-worker mode: the script, or ``--dir``) put where every worker node
can run them: the inventory's nodes' side of ``Cluster.stage`` (NodeCluster).

On nodes that mount the cluster's share at ``data_dir`` it is written once, through the NFS
master, into ``share_dir/jobs/<job>`` and read there as ``data_dir/jobs/<job>``, as the thesis
kept its scripts on the share.  Nodes without the share get their own copy over SFTP in
``~/.local/state/picluster/node/jobs/<job>``.  Either way every node then proves it has the
files (sha256), and a node that does not — a share that is mounted but is not the cluster's, a
full disk — is named in one line before any task starts.
"""

import hashlib
import shlex
from collections.abc import Callable
from pathlib import Path, PurePosixPath

from picluster.cluster.jobfolder import COPY_ERRORS
from picluster.model import nodeset
from picluster.model.fanout import fan_out
from picluster.util.errors import ClusterError, UsageError


def node_job_name(job_id: int, state: Path) -> str:
    """The job's folder name on nodes and on the share: unique per coordinator (its state directory)."""
    return f"{job_id}-{hashlib.sha1(str(state.resolve()).encode()).hexdigest()[:8]}"


def stage(inv, remotes: dict, files: list[tuple[str, Path]], name: str, run_dir: str, open_master: Callable) -> dict[str, str]:
    """Put ``files`` on every node of ``remotes``; per node, the folder as a shell word (its ``cd``).
    ``run_dir``: the nodes' own folder under the user's home, for nodes without the share;
    ``open_master()``: a connection to the NFS master, where it is not one of ``remotes``."""
    shared = PurePosixPath(str(inv.data_dir)) / "jobs" / name
    mounted = fan_out(lambda node: remotes[node].ok(f"mountpoint -q {shlex.quote(str(inv.data_dir))}"), list(remotes),
                      name=lambda node: node).raise_failures("checking the share")
    on_share = [node for node, yes in mounted.items() if yes]
    folders: dict[str, str] = {}
    if on_share:
        _upload_to_share(inv, remotes, files, PurePosixPath(str(inv.share_dir)) / "jobs" / name, open_master)
        folders |= {node: shlex.quote(str(shared)) for node in on_share}
    private = PurePosixPath(run_dir) / "jobs" / name  # relative to the user's home, as SFTP sees it
    copies = [node for node in remotes if node not in on_share]
    fan_out(lambda node: _copy(remotes[node], files, private), copies, name=lambda node: node).raise_failures("copying the script")
    folders |= {node: f"\"$HOME\"/{shlex.quote(str(private))}" for node in copies}
    _verify(remotes, folders, files, inv, on_share)
    return folders


def _upload_to_share(inv, remotes: dict, files, folder: PurePosixPath, open_master: Callable) -> None:
    own = inv.nfs_master not in remotes
    master = open_master() if own else remotes[inv.nfs_master]
    try:
        _copy(master, files, folder)
    except ClusterError as exc:
        raise ClusterError(f"{inv.nfs_master}: cannot write the script to the share {inv.share_dir}: {exc}") from None
    finally:
        if own:
            master.close()


def _copy(remote, files: list[tuple[str, Path]], folder: PurePosixPath) -> None:
    """SFTP, each file written beside its name and renamed over it (a rerun never sees half a file)."""
    parents = sorted({str(folder / rel).rsplit("/", 1)[0] for rel, _ in files})
    home = "" if folder.is_absolute() else "\"$HOME\"/"
    remote.run(f"umask 077 && mkdir -p {' '.join(home + shlex.quote(p) for p in parents)}")
    try:
        sftp = remote.conn.sftp()
        for rel, local in files:
            target = str(folder / rel)
            sftp.put(str(local), target + ".part")
            sftp.posix_rename(target + ".part", target)
    except COPY_ERRORS as exc:
        raise ClusterError(f"copying {len(files)} file(s) failed: {' '.join(str(exc).split()) or type(exc).__name__}") from None


def _verify(remotes: dict, folders: dict[str, str], files: list[tuple[str, Path]], inv, on_share: list[str]) -> None:
    want = {rel: hashlib.sha256(local.read_bytes()).hexdigest() for rel, local in files}
    listed = " ".join(shlex.quote(rel) for rel in want)

    def check(node: str) -> str:
        out = remotes[node].run(f"cd {folders[node]} 2>/dev/null && sha256sum -- {listed} 2>/dev/null", check=False).stdout
        have = {line[66:]: line[:64] for line in out.splitlines() if len(line) > 66}
        wrong = [rel for rel, digest in want.items() if have.get(rel) != digest]
        return ", ".join(wrong)

    results = fan_out(check, list(folders), name=lambda node: node).raise_failures("checking the staged files")
    bad: dict[str, list[str]] = {}
    for node, wrong in results.items():
        if wrong:
            where = "the share" if node in on_share else "its copy"
            hint = f"; is {inv.data_dir} the share of {inv.nfs_master}?" if node in on_share else ""
            bad.setdefault(f"staged files missing or different in {where} ({wrong}){hint}", []).append(node)
    if bad:
        raise UsageError("; ".join(f"{nodeset.fold(nodes)}: {why}" for why, nodes in bad.items()))
