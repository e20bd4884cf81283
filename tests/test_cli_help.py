"""The command line's help reads one way, and --workers and --nodes mean one thing each.

One style: each option's help is a sentence (a capital, or a literal value the option takes
followed by a colon, and a full stop), then ``[default: X]`` as click writes it; a range sits in
the metavar as ``INTEGER 1-64`` or ``INTEGER >=1``.  --workers counts worker tasks, --nodes
machines (Monte-Carlo's nodes each run one worker); the other spelling is answered with the right
option.
"""

import re

import click
import pytest

from picluster.cli import _register, app
from picluster.cli.options import Option

from conftest import picluster

# A help may open with a value the option takes, then a colon: "convlstm: filters per convolution."
_LITERAL_OPENING = re.compile(r"('[a-z]+'|[a-z][a-z-]*): ")


def _commands(cmd=None, path=("picluster",)):
    _register()
    cmd = cmd or app
    yield path, cmd
    if isinstance(cmd, click.Group):
        for name, sub in sorted(cmd.commands.items()):
            yield from _commands(sub, (*path, name))


def _options():
    for path, cmd in _commands():
        for param in cmd.params:
            if isinstance(param, click.Option) and not param.hidden and param.name not in ("help", "version"):
                yield " ".join(path), param


def test_every_option_is_piclusters_own_so_its_default_reads_one_way():
    """Click puts a default written in words in parentheses ("[default: (free ports)]"), a literal
    one not; picluster's Option shows both plainly."""
    strays = [f"{where} {'/'.join(p.opts)}" for where, p in _options() if not isinstance(p, Option)]
    assert strays == []


def test_every_option_help_is_a_sentence_with_its_default_in_one_place():
    wrong = []
    for where, p in _options():
        text, name = p.help or "", f"{where} {'/'.join(p.opts)}"
        if not text:
            wrong.append(f"{name}: no help")
            continue
        if not (text[0].isupper() or _LITERAL_OPENING.match(text)):
            wrong.append(f"{name}: starts {text[:20]!r}")
        if not text.endswith("."):
            wrong.append(f"{name}: no full stop: {text[-20:]!r}")
        if re.search(r"default:|\[default", text, re.IGNORECASE):
            wrong.append(f"{name}: a default in the text (give show_default): {text!r}")
    assert wrong == []


def test_help_pages_show_ranges_and_defaults_one_way():
    """No click IntRange ("INTEGER RANGE ... [0<=x<=1000]"), no float-formatted bound
    ("1-9.22337e+18"), no parenthesised default."""
    for path, cmd in _commands():
        ctx = click.Context(cmd, info_name=" ".join(path))
        page = cmd.get_help(ctx)
        for bad in ("RANGE", "<=x", "x<=", "x>=", "e+1", "[default: ("):
            assert bad not in page, f"{' '.join(path)} --help shows {bad!r}:\n{page}"


def test_typed_help_pages_as_a_user_sees_them():
    limit = picluster("jobs", "--help").stdout
    assert re.search(r"--limit INTEGER >=1 +The newest N jobs\. +\[default: 50\]", limit), limit
    up = " ".join(picluster("cluster", "up", "--help").stdout.split())
    assert "--port INTEGER 1024-65535 First port: the tasks' ports, then the agent's (local cluster). [default: free ports]" in up, up
    har = " ".join(picluster("train", "har", "--help").stdout.split())
    assert "--layers INTEGER The model's depth: convlstm's convolution blocks (1-7), resbidir's stacked residual blocks (1-16). [default: 3]" in har
    launch = " ".join(picluster("launch", "--help").stdout.split())
    assert "--restart-limit INTEGER 0-1000 Restarts for the whole job" in launch and "[default: 0]" in launch


@pytest.mark.parametrize("args,answer", [
    (("train", "har", "--nodes", "4"), "train har counts worker tasks: give --workers 4"),
    (("cluster", "up", "--nodes", "3"), "cluster up counts tasks: give --workers 3"),
    (("run", "montecarlo", "--workers", "4"), "run montecarlo counts nodes, each drawing on one worker task: give --nodes 4"),
    (("submit", "--workers", "4", "--", "hostname"), "submit counts the job's nodes, its ps nodes among them: give --nodes N"),
    (("lab", "up", "--workers", "3"), "lab up counts hosts: give --nodes 3"),
], ids=lambda v: " ".join(v) if isinstance(v, tuple) else "")
def test_the_other_spelling_is_answered_with_the_right_option(state, args, answer):
    result = picluster(*args, timeout=60)
    assert result.returncode == 2, result.stderr
    assert result.stderr.startswith(f"picluster: error: {answer}"), result.stderr
    assert len(result.stderr.strip().splitlines()) == 1 and "Traceback" not in result.stderr
    assert not (state / "local").exists(), "nothing is started"


def test_hidden_spellings_stay_out_of_the_help():
    assert "--nodes" not in picluster("train", "har", "--help").stdout
    assert "--workers" not in picluster("run", "montecarlo", "--help").stdout


def test_too_few_workers_is_answered_in_the_commands_own_option_and_leaves_no_run_folder(state, tmp_path):
    """train counts --workers, Monte-Carlo --nodes (node n1's ps draws too): the refusal names the
    option the user typed, and a training refused before it started leaves no empty run folder."""
    inv = tmp_path / "picluster.toml"
    inv.write_text('[cluster]\nname="c"\nuser="pi"\nnodes="n[1-2]"\naddresses="10.9.0.[1-2]"\n')
    train = picluster("train", "har", "-i", inv, "--workers", "3", timeout=120)
    assert train.returncode == 2 and "picluster: error: --workers 3 is more than the 1 worker of the inventory: give --workers 1 or fewer" in train.stderr, train.stderr
    assert not (state / "runs").exists() or list((state / "runs").iterdir()) == []
    run = picluster("run", "montecarlo", "-i", inv, "--nodes", "3", timeout=60)
    assert run.returncode == 2, run.stderr
    assert "picluster: error: --nodes 3 is more than the 2 nodes with a TensorFlow server of the inventory: give --nodes 2 or fewer" in run.stderr
