"""What a provisioning run shows: one row per set of nodes with identical results, as ClusterShell's
`clush -b` folds identical output, then the skips and outcomes folded by node set.

A row lists only the steps that did not end ok, so 16 nodes read at 80 columns: the usual run
is two rows (the NFS master, node[02-16]), and a node that differs gets a row of its own.
"""

from rich.console import Console
from rich.table import Table

from picluster.model import nodeset
from picluster.provision.result import NodeReport, Status, StepResult, folded_items, folded_skips, folded_summary

_STYLE = {Status.OK: "green", Status.CHANGED: "yellow", Status.FAILED: "bold red", Status.SKIPPED: "dim"}


def step_text(result: StepResult) -> str | None:
    """"hostname 2" (changes), "nfs-client skipped", "runtime failed: why"; None when ok."""
    status = result.status
    if status is Status.OK:
        return None
    if status is Status.CHANGED:
        return f"{result.step} {result.count(Status.CHANGED)}"
    if status is Status.FAILED:
        why = next((i.detail for i in result.items if i.status is Status.FAILED and i.detail), "")
        return f"{result.step} failed" + (f": {why}" if why else "")
    return f"{result.step} {status.value}"


def _styled(result: StepResult) -> str:
    text = step_text(result)
    return f"[{_STYLE[result.status]}]{_escape(text)}[/]" if text else ""


def result_text(report: NodeReport, dry_run: bool) -> str:
    """The row's short outcome; why a node failed is in its steps."""
    if report.unreachable:
        return "unreachable"
    if report.failed:
        return "failed"
    if report.changes:
        return f"{'would change' if dry_run else 'changed'} {report.changes}"
    return "ok"


def fold_rows(reports: list[NodeReport], steps: list[str], dry_run: bool = False) -> list[list[NodeReport]]:
    """Nodes grouped by identical results (outcome and every step's status and counts), in the
    order of each group's first node."""
    groups: dict[tuple, list[NodeReport]] = {}
    for report in reports:
        cells = []
        for step in steps:
            result = report.step(step)
            cells.append(None if result is None else (result.status, *(result.count(s) for s in Status)))
        groups.setdefault((report.outcome(dry_run), tuple(cells)), []).append(report)
    return list(groups.values())


def _seconds(group: list[NodeReport]) -> str:
    low, high = min(r.seconds for r in group), max(r.seconds for r in group)
    return f"{low:.1f}s" if f"{low:.1f}" == f"{high:.1f}" else f"{low:.1f}-{high:.1f}s"


def table(reports: list[NodeReport], steps: list[str], dry_run: bool = False) -> Table:
    grid = Table(title="picluster provision" + (" (dry run: nothing changed)" if dry_run else ""))
    grid.add_column("nodes", no_wrap=True)
    grid.add_column("result", no_wrap=True)
    grid.add_column("steps not ok (" + ("changes planned" if dry_run else "changes") + ")", ratio=1)
    grid.add_column("time", justify="right", no_wrap=True)
    for group in fold_rows(reports, steps, dry_run):
        first = group[0]
        texts = [_styled(r) for r in (first.step(s) for s in steps) if r is not None]
        if first.unreachable and first.failure and not any(first.failure in t for t in texts):
            texts.append(f"[bold red]{_escape(first.failure)}[/]")  # said once: the failed step usually says it
        style = "bold red" if first.failed else "yellow" if first.changes else "green"
        grid.add_row(
            nodeset.fold(r.name for r in group),
            f"[{style}]{result_text(first, dry_run)}[/]",
            ", ".join(t for t in texts if t) or "[green]none[/]",
            _seconds(group),
        )
    return grid


def show(console: Console, reports: list[NodeReport], steps: list[str], dry_run: bool = False) -> None:
    if dry_run:
        show_plan(console, reports)
    console.print(table(reports, steps, dry_run))
    if not dry_run:  # a host key changed on our word is said in full: the user checks the fingerprint
        for report in reports:
            for item in (i for s in report.steps for i in s.items if i.name == "host_key" and i.status is Status.CHANGED):
                console.print(f"{report.name}: {item.detail}", markup=False, highlight=False, soft_wrap=True)
        # Which nodes had their munge key installed, repaired or rotated, from where, and this machine's copy.
        for line in folded_items(reports, "munge_key", Status.CHANGED) + folded_items(reports, "munge_copy", Status.CHANGED):
            console.print(line, markup=False, highlight=False, soft_wrap=True)
    # One line each, never wrapped: a log or a grep sees a node set and its outcome together.
    for line in folded_skips(reports):
        console.print(line, markup=False, highlight=False, soft_wrap=True)
    for line in folded_summary(reports, dry_run):
        console.print(line, markup=False, highlight=False, soft_wrap=True)


def show_plan(console: Console, reports: list[NodeReport]) -> None:
    """A dry run's plan: every item that would change, per node reached (an unreachable one has no
    plan: the summary's line says why, once)."""
    for report in reports:
        if report.unreachable:
            continue
        planned = [(s.step, i) for s in report.steps for i in s.items if i.status is Status.CHANGED]
        console.print(f"{report.name}: {len(planned)} change(s) planned", markup=False, highlight=False)
        for step, item in planned:
            console.print(f"  {step} {item.name}: {item.detail}", markup=False, highlight=False)


def _escape(text: str) -> str:
    return text.replace("[", "\\[")
