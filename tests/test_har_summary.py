"""The summary tables, rendered to a fixed-width console."""

import numpy as np

from picluster.data.har.dataset import from_train_test
from picluster.data.har.spec import CLASSES
from picluster.data.har.summary import show_summary
from picluster.data.har.windows import Windows

from render import console, text


def _windows(labels_subjects):
    y = np.array([c for c, _ in labels_subjects], np.int64)
    s = np.array([v for _, v in labels_subjects], np.int64)
    return Windows(np.zeros((len(y), 128, 9), np.float32), y, s)


def _render(data, width=80, **kwargs) -> list[str]:
    out = console(width)
    show_summary(out, data, **kwargs)
    return [" ".join(line.split()) for line in text(out).splitlines()]


def _data():
    # WALKING: 2 train (volunteer 1), 1 val (volunteer 5), 1 test (volunteer 2); LAYING: 1 test.
    train = _windows([(0, 1), (0, 1), (0, 5)])
    test = _windows([(0, 2), (5, 2)])
    return from_train_test(train, test, "synthetic-source")


def test_class_table_beside_uci_counts():
    lines = _render(_data())
    assert "source: synthetic-source" in lines
    # class, train, val, test, UCI train, Δ (train+val vs UCI train), UCI test, Δ test
    assert "WALKING 2 1 1 1226 -99.8% 496 -99.8%" in lines
    assert "LAYING 0 0 1 1407 -100.0% 537 -99.8%" in lines
    assert "total 2 1 2 7352 -100.0% 2947 -99.9%" in lines
    for name in CLASSES:
        assert any(line.startswith(name + " ") for line in lines), name


def test_subject_table_shows_split_and_uci_count():
    lines = _render(_data())
    assert "1 train 2 347 -99.4%" in lines
    assert "5 val 1 302 -99.7%" in lines
    assert "2 test 2 302 -99.3%" in lines
    assert "3 - 0 341 -100.0%" in lines  # a volunteer with no windows is still listed
    assert not any(line.startswith("volunteer") for line in _render(_data(), per_subject=False))


def test_equal_counts_show_no_sign_and_nothing_is_cut_at_80_columns():
    train = _windows([(0, 1)] * 1226)
    data = from_train_test(train, _windows([(0, 2)] * 496), "x")
    text = "\n".join(_render(data, width=80))
    assert "WALKING 1226 0 496 1226 0.0% 496 0.0%" in text
    assert "…" not in text
