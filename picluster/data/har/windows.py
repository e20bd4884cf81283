"""A set of labelled windows: X (n, 128, 9) float32, y (n,) int 0..5, subject (n,) volunteer 1..30."""

from dataclasses import dataclass

import numpy as np

from picluster.data.har.spec import CHANNELS, WINDOW


@dataclass(frozen=True)
class Windows:
    x: np.ndarray
    y: np.ndarray
    subject: np.ndarray

    def __post_init__(self) -> None:
        n = len(self.y)
        if self.x.shape != (n, WINDOW, len(CHANNELS)) or self.subject.shape != (n,) or self.y.shape != (n,):
            raise ValueError(f"inconsistent windows: x {self.x.shape}, y {self.y.shape}, subject {self.subject.shape}")

    def __len__(self) -> int:
        return len(self.y)

    def of_subjects(self, subjects) -> "Windows":
        keep = np.isin(self.subject, np.asarray(list(subjects)))
        return Windows(self.x[keep], self.y[keep], self.subject[keep])

    def without_subjects(self, subjects) -> "Windows":
        keep = ~np.isin(self.subject, np.asarray(list(subjects)))
        return Windows(self.x[keep], self.y[keep], self.subject[keep])

    @staticmethod
    def empty() -> "Windows":
        return Windows(
            np.zeros((0, WINDOW, len(CHANNELS)), np.float32), np.zeros(0, np.int64), np.zeros(0, np.int64)
        )

    @staticmethod
    def concat(parts: list["Windows"]) -> "Windows":
        if not parts:
            return Windows.empty()
        return Windows(
            np.concatenate([p.x for p in parts]).astype(np.float32, copy=False),
            np.concatenate([p.y for p in parts]).astype(np.int64, copy=False),
            np.concatenate([p.subject for p in parts]).astype(np.int64, copy=False),
        )
