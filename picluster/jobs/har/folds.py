"""Validation by volunteer: which training volunteers validate a run, and leave-volunteers-out folds.

A run validates on the prepared data's validation volunteers unless ``--val-volunteers`` names
others; they must be training volunteers, so the test volunteers stay out of every choice.
Cross-validation (benchmarks/har_study.py --cv) trains once per fold with that fold as the
validation volunteers: the folds split the training volunteers (train and validation splits
together) into K disjoint groups; with K = 5 over UCI HAR's 21 training volunteers, one fold
is exactly the prepared validation split (spec.VALIDATION_SUBJECTS is every fifth from the third).
"""

import numpy as np

from picluster.data.har.dataset import HarData, checksum
from picluster.data.har.spec import TEST_SUBJECTS, TRAIN_SUBJECTS
from picluster.util.errors import UsageError


def parse(text: str) -> tuple[int, ...]:
    """'3,11,19' -> (3, 11, 19); '' -> () (the data's own validation split).  ValueError says what is wrong."""
    if text == "":
        return ()
    parts = [p.strip() for p in text.split(",")]
    if not any(parts):
        raise ValueError("names no volunteer: give training volunteers like 3,11,19, or leave it out for the data's own")
    wrong = next((p for p in parts if not p.isdigit()), None)
    if wrong is not None:
        raise ValueError(f"{wrong!r} is not a volunteer number: give training volunteers like 3,11,19")
    volunteers = tuple(int(p) for p in parts)
    test = [v for v in volunteers if v in TEST_SUBJECTS]
    if test:
        raise ValueError(f"volunteer {test[0]} is a test volunteer: the test set is never used for choices; "
                         f"give training volunteers ({_span(TRAIN_SUBJECTS)})")
    other = [v for v in volunteers if v not in TRAIN_SUBJECTS]
    if other:
        raise ValueError(f"volunteer {other[0]} is not one of UCI HAR's training volunteers ({_span(TRAIN_SUBJECTS)})")
    if len(set(volunteers)) < len(volunteers):
        raise ValueError("names a volunteer twice")
    return volunteers


def folds(volunteers, k: int) -> list[tuple[int, ...]]:
    """K disjoint groups covering ``volunteers`` (sorted): fold f is every K-th from the f-th."""
    ordered = sorted(set(int(v) for v in volunteers))
    if not 2 <= k <= len(ordered):
        raise UsageError(f"--folds {k}: must be from 2 to the {len(ordered)} training volunteers")
    return [tuple(ordered[f::k]) for f in range(k)]


def training_volunteers(data: HarData) -> tuple[int, ...]:
    """The volunteers of the train and validation splits: what folds may be made of."""
    return tuple(sorted(set(np.unique(data.subject_train).tolist()) | set(np.unique(data.subject_val).tolist())))


def revalidate(data: HarData, volunteers: tuple[int, ...], where: str = "") -> HarData:
    """The same windows with ``volunteers`` as the validation split and the other training
    volunteers as the training split; the test split untouched.  () leaves the data as it is."""
    if not volunteers:
        return data
    subject = np.concatenate([data.subject_train, data.subject_val])
    absent = [v for v in volunteers if not np.any(subject == v)]
    if absent:
        raise UsageError(f"--val-volunteers: volunteer {absent[0]} has no windows in {where or 'the prepared data'}; "
                         f"its training volunteers are {','.join(map(str, training_volunteers(data)))}")
    x = np.concatenate([data.x_train, data.x_val])
    y = np.concatenate([data.y_train, data.y_val])
    val = np.isin(subject, np.asarray(volunteers))
    if val.all():
        raise UsageError("--val-volunteers names every training volunteer: none would be left to train on")
    arrays = {"x_train": x[~val], "y_train": y[~val], "subject_train": subject[~val],
              "x_val": x[val], "y_val": y[val], "subject_val": subject[val],
              "x_test": data.x_test, "y_test": data.y_test, "subject_test": data.subject_test}
    return HarData(**arrays, source=data.source, checksum=checksum(arrays))


def _span(volunteers) -> str:
    return ",".join(map(str, volunteers))
