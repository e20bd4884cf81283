"""The coordinator's mirror of the chief's files on a node: which files it copies again."""

from picluster.jobs.har.mirror import ALWAYS_COPY_BYTES, stale


def test_a_state_file_rewritten_in_the_same_second_is_copied_again():
    """SFTP gives whole seconds: "model.ckpt-26" and "model.ckpt-39" have the same size and time."""
    state_file = (len('model_checkpoint_path: "model.ckpt-26"\n'), 1000)
    assert stale(state_file, state_file)


def test_a_large_file_unchanged_in_size_and_time_is_not_copied_again():
    here = (100_000, 1000)
    assert not stale(here, (100_000, 1000))
    assert stale(here, (100_000, 1001))
    assert stale(here, (99_000, 1000))
    assert stale(None, (100_000, 1000))  # not here yet


def test_the_small_file_limit_is_inclusive():
    assert stale((ALWAYS_COPY_BYTES, 5), (ALWAYS_COPY_BYTES, 5))
    assert not stale((ALWAYS_COPY_BYTES + 1, 5), (ALWAYS_COPY_BYTES + 1, 5))
