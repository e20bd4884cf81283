"""What a provisioning run shows: per node a row of step statuses, then folded node sets."""

from rich.console import Console
from rich.table import Table

from picluster.provision.result import NodeReport, Status, folded_skips, folded_summary

_STYLE = {Status.OK: "green", Status.CHANGED: "yellow", Status.FAILED: "bold red", Status.SKIPPED: "dim"}


def _cell(report: NodeReport, step: str, dry_run: bool) -> str:
    result = report.step(step)
    if result is None:
        return "-"
    status = result.status
    text = "would change" if (dry_run and status is Status.CHANGED) else status.value
    if status is Status.CHANGED:
        text += f" ({result.count(Status.CHANGED)})"
    return f"[{_STYLE[status]}]{text}[/]"


def show(console: Console, reports: list[NodeReport], steps: list[str], dry_run: bool = False) -> None:
    if dry_run:
        show_plan(console, reports)
    table = Table(title="picluster provision" + (" (dry run: nothing changed)" if dry_run else ""))
    table.add_column("node")
    for step in steps:
        table.add_column(step)
    table.add_column("time", justify="right")
    for report in reports:
        table.add_row(report.name, *[_cell(report, s, dry_run) for s in steps], f"{report.seconds:.1f}s")
    console.print(table)
    for line in folded_skips(reports):
        console.print(line, markup=False, highlight=False)
    for line in folded_summary(reports, dry_run):
        console.print(line, markup=False, highlight=False)


def show_plan(console: Console, reports: list[NodeReport]) -> None:
    """A dry run's plan: every item that would change, per node."""
    for report in reports:
        planned = [(s.step, i) for s in report.steps for i in s.items if i.status is Status.CHANGED]
        console.print(f"{report.name}: {len(planned)} change(s) planned", markup=False, highlight=False)
        for step, item in planned:
            console.print(f"  {step} {item.name}: {item.detail}", markup=False, highlight=False)
