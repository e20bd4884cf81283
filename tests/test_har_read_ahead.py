"""A node's server reads the HAR data set on the share ahead of its first job
(picluster.jobs.har.data.warm, run by the door once the task serves): the job then finds it held,
and a job that asks while it is being read waits for that read rather than reading it again.
Through real servers on test hosts: tests/test_train_lab.py."""

import threading
import time

import pytest

from picluster.data.har.dataset import HAR_SUBDIR, load
from picluster.jobs.har import data as har_data
from picluster.jobs.har.config import TrainConfig

from train_fixtures import write_tiny_har


@pytest.fixture
def share(tmp_path, monkeypatch):
    """A share with the data set, its reads counted (each a slow one, as on a Pi), and this
    process holding nothing yet."""
    monkeypatch.setattr(har_data, "_LAST", {})
    reads = []

    def slow_load(path):
        reads.append(path)
        time.sleep(0.5)
        return load(path)

    monkeypatch.setattr(har_data, "load", slow_load)
    write_tiny_har(tmp_path / HAR_SUBDIR)
    return tmp_path, reads


def test_a_job_after_the_read_ahead_finds_the_data_set_held(share):
    mount, reads = share
    said = har_data.warm(str(mount))
    assert said.startswith(f"the HAR data set {mount / HAR_SUBDIR / 'har.npz'} read ahead (240 training windows) in "), said
    data, held = har_data.read_data(TrainConfig(data_dir=str(mount / HAR_SUBDIR)))
    assert held and len(data.x_train) == 240 and len(reads) == 1


def test_a_job_that_asks_during_the_read_ahead_waits_for_it_and_reads_nothing_again(share):
    mount, reads = share
    ahead = threading.Thread(target=har_data.warm, args=(str(mount),))
    ahead.start()
    while not reads:
        time.sleep(0.01)
    data, held = har_data.read_data(TrainConfig(data_dir=str(mount / HAR_SUBDIR)))
    ahead.join()
    assert held and len(reads) == 1 and len(data.x_train) == 240


def test_other_validation_volunteers_or_a_new_file_are_read_again(share):
    mount, reads = share
    har_data.warm(str(mount))
    first = har_data.read_data(TrainConfig(data_dir=str(mount / HAR_SUBDIR)))[0]
    other = har_data.read_data(TrainConfig(data_dir=str(mount / HAR_SUBDIR), val_volunteers="1", batch=20))
    assert other[1] is False and len(reads) == 2 and set(other[0].subject_val) == {1}
    har_data.warm(str(mount))
    assert len(reads) == 3  # held again as the jobs read it by default
    write_tiny_har(mount / HAR_SUBDIR, seed=1)  # `picluster data har --force` on the share
    data, held = har_data.read_data(TrainConfig(data_dir=str(mount / HAR_SUBDIR)))
    assert not held and len(reads) == 4 and data.checksum != first.checksum


def test_no_data_set_on_the_share_is_nothing_to_read_and_a_damaged_one_is_left_for_the_job(tmp_path, monkeypatch):
    monkeypatch.setattr(har_data, "_LAST", {})
    assert har_data.warm(str(tmp_path)) is None
    (tmp_path / HAR_SUBDIR).mkdir()
    (tmp_path / HAR_SUBDIR / "har.npz").write_bytes(b"not a zip")
    said = har_data.warm(str(tmp_path))
    assert said.startswith("the HAR data set not read ahead: ") and "not a readable HAR cache" in said, said
