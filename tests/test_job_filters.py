"""`jobs` and `cancel` choose jobs as squeue and sacct do: --state in Slurm's names or squeue's
short forms, any case; --user; --name (a pattern); --since (a time ago, or ISO 8601)."""

from datetime import datetime

import pytest
from hypothesis import given
from hypothesis import strategies as st

from picluster.jobs.filters import STATES, Filter, chosen, since_moment, state_names
from picluster.util.errors import UsageError

pytestmark = pytest.mark.unit

NOW = 1_800_000_000.0


def test_states_in_either_of_squeues_forms_any_case_comma_separated_or_repeated():
    assert state_names(["running"]) == ["RUNNING"]
    assert state_names(["R,pd", "Cd"]) == ["RUNNING", "PENDING", "COMPLETED"]
    assert state_names(["CA", "f", "TO", "oom", "node_fail"]) == ["CANCELLED", "FAILED", "TIMEOUT", "OUT_OF_MEMORY", "NODE_FAIL"]
    assert {"PENDING", "RUNNING", "COMPLETED", "FAILED", "CANCELLED"} <= set(STATES)  # picluster's own records use these five
    for bad in ("runing", "", "R,,PD", "all"):
        with pytest.raises(UsageError, match=r"^--state .*: not a job state; give one of PENDING, RUNNING, COMPLETED, FAILED, CANCELLED, TIMEOUT"):
            state_names([bad])


def test_a_filter_takes_what_each_option_says_and_all_of_them_at_once():
    picked = chosen(["r,pd"], ["alice"], ["har*"], "2h", now=NOW)
    assert picked.takes("RUNNING", "alice", "har-3", None)
    assert picked.takes("PENDING", "alice", "har", NOW - 3600)
    assert not picked.takes("COMPLETED", "alice", "har", None)
    assert not picked.takes("RUNNING", "bob", "har", None)
    assert not picked.takes("RUNNING", "alice", "montecarlo", None)
    assert not picked.takes("RUNNING", "alice", "har", NOW - 3 * 3600)  # ended before --since
    assert picked.describe().startswith("state PENDING,RUNNING, user alice, name har*, since ")
    assert not Filter() and Filter().takes("ANY", "anyone", "anything", 0.0)
    assert chosen(users=["alice,bob"]).users == frozenset({"alice", "bob"})


def test_since_takes_a_time_ago_or_an_iso_date():
    assert since_moment("30m", NOW) == NOW - 1800
    assert since_moment("2h", NOW) == since_moment("now-2hours", NOW) == since_moment("2 hours", NOW) == NOW - 7200
    assert since_moment("3d", NOW) == NOW - 3 * 86400 and since_moment("1w", NOW) == NOW - 7 * 86400
    assert since_moment("2026-12-01", NOW) == datetime(2026, 12, 1).timestamp()
    assert since_moment("2026-12-01T14:00", NOW) == datetime(2026, 12, 1, 14).timestamp()
    assert since_moment("2026-12-01T14:00:00+00:00", NOW) == 1796133600.0
    for bad in ("yesterday", "2h ago", "-1h", "2026-13-01", "1y"):
        with pytest.raises(UsageError, match=r"^--since .*: give a time ago \(30m, 2h, 3d, 1w\) or a date or time in ISO 8601"):
            since_moment(bad, NOW)


def test_user_and_name_values_are_checked():
    for bad in ("", "a b", "x;y", "-rf"):
        with pytest.raises(UsageError, match=r"^--user .*: not a user name"):
            chosen(users=[bad])
    with pytest.raises(UsageError, match=r"^--name 'a\\nb': give a job's name"):
        chosen(names=["a\nb"])


@given(st.text(max_size=40))
def test_any_since_text_is_a_moment_or_one_usage_error(text):
    try:
        moment = since_moment(text, NOW)
    except UsageError as exc:
        assert str(exc).startswith("--since ") and "\n" not in str(exc).replace(repr(text), "")
    else:
        assert isinstance(moment, float)
