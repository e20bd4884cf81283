"""Job progress beside the node panel: what is done, how fast, and when it will end."""

from dataclasses import dataclass

from rich.console import Group
from rich.progress_bar import ProgressBar
from rich.table import Table
from rich.text import Text

from picluster.model.nodestats import NodeRow
from picluster.views.panel import nodes_table


@dataclass
class JobProgress:
    title: str
    done: float
    total: float
    elapsed_s: float
    unit: str = "samples"
    detail: str = ""  # e.g. "epoch 3/20  step 120  val acc 91.2 %"

    @property
    def eta_s(self) -> float | None:
        if self.done <= 0 or self.done >= self.total:
            return None
        return self.elapsed_s * (self.total - self.done) / self.done

    def line(self) -> str:
        """The same facts as one plain log line."""
        pct = 100.0 * self.done / self.total if self.total else 100.0
        eta = f", ETA {self.eta_s:.0f} s" if self.eta_s is not None else ""
        detail = f"  {self.detail}" if self.detail else ""
        return f"{self.title}: {pct:5.1f} % ({self.done:,.0f}/{self.total:,.0f} {self.unit}), {self.elapsed_s:.1f} s{eta}{detail}"


def job_panel(progress: JobProgress, rows: list[NodeRow] | None) -> Group:
    head = Table.grid(padding=(0, 1))
    head.add_row(
        Text(progress.title, style="bold"),
        ProgressBar(total=progress.total or 1, completed=progress.done, width=30),
        Text(progress.line().split(": ", 1)[1]),
    )
    parts = [head]
    if rows is not None:
        parts.append(nodes_table(rows))
    return Group(*parts)
