"""Per-node, per-step results, and what they add up to."""

import enum
from dataclasses import dataclass, field

from picluster.model import nodeset


class Status(enum.Enum):
    OK = "ok"
    CHANGED = "changed"
    FAILED = "failed"
    SKIPPED = "skipped"


# Worst first: a step's status is the worst of its items'.
_RANK = {Status.FAILED: 0, Status.CHANGED: 1, Status.OK: 2, Status.SKIPPED: 3}


@dataclass(frozen=True)
class Item:
    """One thing a step checked or did on one node: ("gpu_mem", CHANGED, "gpu_mem=16 in ...")."""

    name: str
    status: Status
    detail: str = ""

    def label(self) -> str:
        if self.status in (Status.SKIPPED, Status.FAILED) and self.detail:
            return f"{self.status.value} ({self.detail})"
        return self.status.value


@dataclass
class StepResult:
    step: str
    items: list[Item] = field(default_factory=list)

    @property
    def status(self) -> Status:
        if not self.items:
            return Status.OK
        return min((i.status for i in self.items), key=_RANK.__getitem__)

    def count(self, status: Status) -> int:
        return sum(1 for i in self.items if i.status is status)


@dataclass
class NodeReport:
    name: str
    steps: list[StepResult] = field(default_factory=list)
    unreachable: bool = False
    failure: str | None = None  # why the node stopped, when it did
    seconds: float = 0.0

    def step(self, name: str) -> StepResult | None:
        for s in self.steps:
            if s.step == name:
                return s
        return None

    @property
    def failed(self) -> bool:
        return self.failure is not None or any(s.status is Status.FAILED for s in self.steps)

    @property
    def changes(self) -> int:
        return sum(s.count(Status.CHANGED) for s in self.steps)

    def outcome(self, dry_run: bool = False) -> str:
        """One phrase for the summary: "unreachable", "failed (why)", "changed (3)", "ok"."""
        if self.unreachable:
            return self.failure if self.failure else "unreachable"  # "unreachable: nothing listens on port 22"
        if self.failed:
            return f"failed ({self.first_failure()})"
        if self.changes:
            return f"{'would change' if dry_run else 'changed'} ({self.changes})"
        return "ok"

    def first_failure(self) -> str:
        if self.failure:
            return self.failure
        for s in self.steps:
            for i in s.items:
                if i.status is Status.FAILED:
                    return f"{s.step} {i.name}: {i.detail}" if i.detail else f"{s.step} {i.name}"
        return "unknown"


def folded_summary(reports: list[NodeReport], dry_run: bool = False) -> list[str]:
    """Nodes grouped by outcome: ["node[01-02,04]: ok", "node03: unreachable: why"]."""
    groups: dict[str, list[str]] = {}
    for report in reports:
        groups.setdefault(report.outcome(dry_run), []).append(report.name)
    return [f"{nodeset.fold(names)}: {outcome}" for outcome, names in groups.items()]


def folded_skips(reports: list[NodeReport]) -> list[str]:
    """Skipped items grouped by reason: ["nfs-client mount: skipped (no NFS ...): node[01-04]"]."""
    groups: dict[str, list[str]] = {}
    for report in reports:
        for s in report.steps:
            for i in s.items:
                if i.status is Status.SKIPPED:
                    groups.setdefault(f"{s.step} {i.name}: {i.label()}", []).append(report.name)
    return [f"{key}: {nodeset.fold(names)}" for key, names in groups.items()]


def folded_items(reports: list[NodeReport], name: str, status: Status) -> list[str]:
    """One item's outcomes grouped by detail: ["node[02-04]: munge_key: repaired: ..."]."""
    groups: dict[str, list[str]] = {}
    for report in reports:
        for s in report.steps:
            for i in s.items:
                if i.name == name and i.status is status:
                    groups.setdefault(i.detail, []).append(report.name)
    return [f"{nodeset.fold(names)}: {name}: {detail}" for detail, names in groups.items()]
