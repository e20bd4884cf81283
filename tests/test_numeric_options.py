"""Numbers from the command line and from config.json: finite, plainly written, within a stated range.

The issue's cases (``--layers 1000``, ``--lr inf``, ``--l2 nan``, ``provision --timeout nan``,
``--samples '1e8 '``) are refused in one line before anything starts; the properties check every
TrainConfig field and every numeric click type against arbitrary input.
"""

import json
import math
from dataclasses import fields

import click
import pytest
from hypothesis import given
from hypothesis import strategies as st

from picluster.cli.options import Count, Real, Whole
from picluster.jobs.har.config import RESBIDIR_ONLY, TrainConfig
from picluster.util.errors import UsageError

from conftest import picluster

NUMERIC = [f for f in fields(TrainConfig) if "range" in f.metadata]


def assert_one_line_exit_2(result, needle):
    assert result.returncode == 2, (result.returncode, result.stderr)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("picluster: error: ") and needle in lines[0], result.stderr
    assert "Traceback" not in result.stderr


@pytest.mark.parametrize("args,needle", [
    (["--layers", "1000"], "--layers 1000 must be a whole number from 1 to 16"),
    (["--lr", "inf"], "'inf' is not a finite decimal number"),
    (["--l2", "nan"], "'nan' is not a finite decimal number"),
    (["--l2", "inf"], "'inf' is not a finite decimal number"),
    (["--l2", "1e400"], "is not a finite number"),
    (["--lr", "0"], "--lr 0.0 must be in (0, 1]"),
    (["--keep-prob", "1.5"], "--keep-prob 1.5 must be in (0, 1]"),
    (["--hidden", "100000"], "--hidden 100000 must be a whole number from 1 to 1,024"),
    (["--epochs", "1e3"], "'1e3' is not a whole number"),
    (["--batch", " 100"], "' 100' is not a whole number"),
    (["--seed", "99999999999"], "--seed 99999999999 must be a whole number from 0 to 2,147,483,647"),
    (["--workers", "65"], "--workers 65 must be a whole number from 1 to 64"),
])
def test_train_refuses_bad_numbers_before_anything_starts(state, args, needle):
    result = picluster("train", "har", *args, timeout=60)
    assert_one_line_exit_2(result, needle)
    assert not (state / "runs").exists(), "a run directory was made for a refused run"


@pytest.mark.parametrize("args,needle", [
    (["run", "montecarlo", "--samples", "1e8 "], "'1e8 ' is not a number"),
    (["run", "montecarlo", "--samples", "1__0"], "is not a number"),
    (["run", "montecarlo", "--samples", "１e8"], "is not a number"),
    (["provision", "--timeout", "nan"], "'nan' is not a finite decimal number"),
    (["provision", "--timeout", "inf"], "is not a finite decimal number"),
    (["top", "--interval", "nan"], "is not a finite decimal number"),
    (["lab", "up", "--timeout", "nan"], "is not a finite decimal number"),
    # click's IntRange took int()'s spaces, underscores and non-ASCII digits: these started a cluster.
    (["cluster", "up", "--workers", "٣"], "is not a whole number"),
    (["cluster", "up", "--ps", " 1"], "' 1' is not a whole number"),
    (["provision", "--fanout", "1_6"], "'1_6' is not a whole number"),
    (["lab", "up", "--nodes", "2 "], "'2 ' is not a whole number"),
    (["cluster", "up", "--port", "70000"], "70000 is above the maximum 65535"),
])
def test_other_numeric_options_refuse_stray_characters_and_non_finite_values(state, args, needle):
    assert_one_line_exit_2(picluster(*args, timeout=60), needle)


# -- properties ---------------------------------------------------------------------------------

ANY_VALUE = st.one_of(st.integers(-2**70, 2**70), st.floats(allow_nan=True, allow_infinity=True), st.booleans(),
                      st.text(max_size=5), st.none())


@given(st.sampled_from(NUMERIC), ANY_VALUE)
def test_every_numeric_training_option_is_finite_and_in_its_stated_range(f, value):
    try:
        model = "resbidir" if f.name in RESBIDIR_ONLY else "convlstm"
        config = TrainConfig(**{f.name: value}, model=model, bidir=f.name not in ("hidden", "rnn_hidden"),
                             standalone=f.name == "threads")
    except UsageError as exc:
        message = str(exc)
        assert "\n" not in message
        assert (f.metadata.get("flag") or "--" + f.name.replace("_", "-")) in message or "--batch" in message
        return
    got = getattr(config, f.name)
    low, high, low_open, high_open = f.metadata["range"]
    assert not isinstance(got, bool) and math.isfinite(got)
    assert (low < got if low_open else low <= got) and (got < high if high_open else got <= high)
    assert type(got) is f.type


@given(st.sampled_from([f.name for f in fields(TrainConfig)]),
       st.recursive(st.one_of(st.none(), st.booleans(), st.integers(), st.floats(), st.text(max_size=4)),
                    lambda inner: st.one_of(st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=3), inner, max_size=3)),
                    max_leaves=10))
def test_config_json_with_one_field_replaced_loads_or_names_the_field(tmp_path_factory, name, value):
    data = json.loads(TrainConfig().to_json())
    data[name] = value
    path = tmp_path_factory.mktemp("run") / "config.json"
    path.write_text(json.dumps(data))
    try:
        config = TrainConfig.load(path)
    except UsageError as exc:
        assert "\n" not in str(exc) and str(path) in str(exc)
        assert repr(name) in str(exc) or "--" in str(exc), str(exc)  # cross-field rules name the options
        return
    assert getattr(config, name) == value and json.loads(config.to_json()) == data


TEXT = st.one_of(st.text(max_size=12), st.from_regex(r"\A[ +-]?[0-9_.eE]{1,10}[ ]?\Z"))


@given(TEXT)
def test_the_click_number_types_accept_only_plain_finite_numbers(text):
    for kind in (Count(), Real(), Whole()):
        try:
            value = kind.convert(text, None, None)
        except click.BadParameter:
            continue
        assert text == text.strip() and text.isascii() and "nan" not in text.lower() and "inf" not in text.lower()
        assert math.isfinite(value)
        if isinstance(kind, Count):
            assert isinstance(value, int) and value >= 1 and float(text.replace("_", "")) == pytest.approx(value)
        elif isinstance(kind, Whole):
            assert value == int(text)
        else:
            assert value == float(text)


def test_the_documented_ranges_are_the_declared_ones():
    from conftest import ROOT

    text = (ROOT / "docs" / "untrusted-input.md").read_text()
    for f in NUMERIC:
        low, high, low_open, high_open = f.metadata["range"]
        flag = f.metadata.get("flag") or "--" + f.name.replace("_", "-")
        shown = (f"{'(' if low_open else '['}{low:g}, {high:g}{')' if high_open else ']'}" if f.type is float
                 else f"{low:,} to {high:,}")
        assert f"| `{flag}` | {shown} | {f.default} |" in text, flag
