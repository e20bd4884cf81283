"""Provisioning progress: the lines printed as each step ends (folded by node set and outcome), and
the live table of which step each node set is in and for how long."""

from picluster.views.steps import StepProgress, finished_lines

from render import console, render, text


def test_finished_lines_fold_nodes_that_ended_alike_with_the_slowest_time():
    results = {"node01": ("changed", 38.2), "node02": ("failed", 3.4), "node03": ("ok", 41.0), "node04": ("skipped", 0.1)}
    assert finished_lines("packages", results) == [
        "node[01,03]: packages: done in 41 s",
        "node02: packages: failed after 3 s",
        "node04: packages: skipped",
    ]


class Clock:
    def __init__(self):
        self.now = 1000.0

    def __call__(self):
        return self.now


def test_a_line_per_finished_step_off_a_terminal_and_nothing_before_it_ends():
    out, clock = console(width=60), Clock()
    with StepProgress(out, ["facts", "packages"], clock=clock) as progress:
        assert not progress.live
        progress.step_started("facts", ["node01", "node02", "node03"])
        progress.node_finished("node02", "facts", "failed", 3.0)
        progress.node_finished("node03", "facts", "ok", 1.2)
        assert text(out) == ""  # node01 is still at it
        progress.node_finished("node01", "facts", "ok", 2.0)
        progress.step_started("packages", ["node01", "node03"])
        progress.node_finished("node03", "packages", "changed", 40.6)
        progress.node_finished("node01", "packages", "changed", 38.0)
    assert text(out) == (
        "node[01,03]: facts: done in 2 s\n"  # in inventory order, not the order they finished in
        "node02: facts: failed after 3 s\n"
        "node[01,03]: packages: done in 41 s\n"
    )


def test_the_live_table_shows_each_node_set_its_step_state_and_time():
    clock = Clock()
    progress = StepProgress(console(width=80, terminal=True), ["facts", "hostname", "packages"], clock=clock)
    assert progress.live
    progress.step_started("facts", ["node01", "node02", "node03", "node04"])
    for node, status in (("node01", "ok"), ("node02", "ok"), ("node03", "ok"), ("node04", "failed")):
        progress.node_finished(node, "facts", status, 1.0)
    progress.step_started("packages", ["node01", "node02", "node03"])
    clock.now += 41.4
    progress.node_finished("node02", "packages", "changed", 12.0)
    rows = [" ".join(line.strip("│┃ ").split()) for line in render(progress.render(), width=80).splitlines()]
    assert rows[0] == "picluster provision: step 3/3 packages"
    assert "node[01,03] │ packages │ running │ 41 s" in rows
    assert "node02 │ packages │ done │ 12 s" in rows
    assert "node04 │ facts │ stopped" in rows
