"""The coordinator's mirror of the chief's files on a node: which files it copies again."""

import os
import types
from pathlib import Path, PurePosixPath

from picluster.jobs.har.clients import NodeClient


def _client(run_dir: Path) -> NodeClient:
    client = object.__new__(NodeClient)  # no SSH: only the copy decision is under test
    client.run_dir = run_dir
    return client


def _entry(size: int, mtime: int):
    return types.SimpleNamespace(st_size=size, st_mtime=mtime, st_atime=mtime)


def test_a_state_file_rewritten_in_the_same_second_is_copied_again(tmp_path):
    """SFTP gives whole seconds: "model.ckpt-26" and "model.ckpt-39" have the same size and time."""
    local = tmp_path / "checkpoints" / "checkpoint"
    local.parent.mkdir()
    local.write_text('model_checkpoint_path: "model.ckpt-26"\n')
    os.utime(local, (1000, 1000))
    same_size_same_second = _entry(local.stat().st_size, 1000)
    assert _client(tmp_path)._stale(PurePosixPath("checkpoints/checkpoint"), same_size_same_second)


def test_a_large_file_unchanged_in_size_and_time_is_not_copied_again(tmp_path):
    local = tmp_path / "checkpoints" / "model.ckpt-26.data-00000-of-00001"
    local.parent.mkdir()
    local.write_bytes(b"\0" * 100_000)
    os.utime(local, (1000, 1000))
    client = _client(tmp_path)
    relative = PurePosixPath("checkpoints") / local.name
    assert not client._stale(relative, _entry(100_000, 1000))
    assert client._stale(relative, _entry(100_000, 1001))
    assert client._stale(relative, _entry(99_000, 1000))
    assert client._stale(PurePosixPath("checkpoints/model.ckpt-39.index"), _entry(100_000, 1000))  # not here yet
