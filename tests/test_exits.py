"""Processes that died: exit status in words, log tails, one line folded by node and cause."""

from picluster.cluster.exits import Exit, Exited, file_tail, status_text, tail_lines, telling_line

MISSING = "/home/pi/venv/bin/python: Error while finding module specification for 'picluster.cluster.server' (ModuleNotFoundError: No module named 'picluster')"


def test_status_in_words():
    assert status_text(1) == "exit code 1"
    assert status_text(0) == "exit code 0"
    assert status_text(-9) == "killed by SIGKILL"
    assert status_text(137) == "exit code 137 (SIGKILL)"
    assert status_text(143) == "exit code 143 (SIGTERM)"
    assert status_text(None) == "exit status unknown"


def test_tails_skip_blank_lines_and_keep_the_last(tmp_path):
    assert tail_lines("a\n\nb\n  \nc\nd\n", 3) == ("b", "c", "d")
    log = tmp_path / "x.log"
    log.write_text("".join(f"line {i}\n" for i in range(10000)))
    assert file_tail(log, 2) == ("line 9998", "line 9999")
    assert file_tail(tmp_path / "missing.log") == ()


def test_the_telling_line_is_the_last_error():
    assert telling_line(["Traceback", "  File x", "ValueError: bad", "exiting"]) == "ValueError: bad"
    assert telling_line(["started", "done"]) == "done"
    assert telling_line([]) == "no output"
    assert telling_line(["sh: 1: /opt/venv/bin/python: not found"]).endswith("not found")


def test_same_cause_on_many_nodes_folds_to_one_part():
    exits = [Exit(f"node{i:02d}", label, 1, (MISSING,)) for i, label in ((1, "ps:0"), (2, "worker:0"), (3, "worker:1"), (4, "worker:2"))]
    exits.append(Exit("node05", "worker:3", -9, ("step 10",)))
    err = Exited("cluster up", exits)
    text = str(err)
    assert text.startswith("cluster up: node[01-04]: ps:0,worker:[0-2] exited during start-up (exit code 1): ")
    assert "No module named 'picluster'" in text
    assert "; node05: worker:3 exited during start-up (killed by SIGKILL): step 10" in text
    assert err.exit_code == 1 and "\n" not in text
    # The tail said no more than the cause: nothing to repeat under the line.
    assert err.details == ()


def test_details_hold_each_distinct_tail_once():
    tail = ("Traceback (most recent call last):", '  File "x.py", line 3', "ZeroDivisionError: division by zero")
    err = Exited("job 3 failed", [Exit("node02", "worker:0", 1, tail), Exit("node03", "worker:1", 1, tail)], when="", then="not retried")
    assert str(err) == "job 3 failed: node[02-03]: worker:[0-1] exited (exit code 1): ZeroDivisionError: division by zero; not retried"
    assert err.details == ("last lines of the log of node[02-03] worker:[0-1]:", *(f"  {line}" for line in tail))
