"""Shell completion as a shell asks for it (`eval "$(_PICLUSTER_COMPLETE=bash_source picluster)"`
installs it): node names from the inventory the command would read, job ids from the records."""

import os

from picluster.jobs.records import JobStore

from conftest import picluster

INVENTORY = '[cluster]\nname = "c"\nuser = "pi"\nnodes = "node[01-03]"\naddresses = "10.9.0.[1-3]"\n'


def complete(words: str, shell: str = "bash", cwd=None, env=None) -> list[str]:
    """What the shell would offer for the last word of ``words`` (an empty last word: after a space)."""
    parts = words.split(" ")
    done = picluster(env=dict(env or os.environ, COMP_WORDS=words, COMP_CWORD=str(len(parts) - 1), _PICLUSTER_COMPLETE=f"{shell}_complete"),
                     cwd=cwd or os.getcwd())
    assert done.returncode == 0 and done.stderr == "", done.stderr
    return [line for line in done.stdout.splitlines() if line]


def test_the_bash_script_a_shell_profile_evals(state):
    done = picluster(env=dict(os.environ, _PICLUSTER_COMPLETE="bash_source"))
    assert done.returncode == 0 and "complete -o nosort -F _picluster_completion picluster" in done.stdout


def test_node_sets_complete_the_inventorys_names_and_all(state, tmp_path):
    inv = tmp_path / "cluster.toml"
    inv.write_text(INVENTORY)
    assert complete(f"picluster exec -i {inv} ") == ["plain,node01", "plain,node02", "plain,node03", "plain,all"]
    assert complete(f"picluster exec -i {inv} node0") == ["plain,node01", "plain,node02", "plain,node03"]
    assert complete(f"picluster nodes reboot -i {inv} node01,node0") == ["plain,node01,node01", "plain,node01,node02", "plain,node01,node03"]
    assert complete(f"picluster provision -i {inv} --replaced node03") == ["plain,node03"]
    # The inventory as the command finds it: PICLUSTER_INVENTORY, else ./picluster.toml.
    assert complete("picluster exec a", env=dict(os.environ, PICLUSTER_INVENTORY=str(inv))) == ["plain,all"]
    (tmp_path / "picluster.toml").write_text(INVENTORY.replace("node[01-03]", "pi[1-2]").replace("10.9.0.[1-3]", "10.9.0.[1-2]"))
    assert complete("picluster exec p", cwd=tmp_path) == ["plain,pi1", "plain,pi2"]
    # None to be read, or one with a mistake: nothing offered, nothing said.
    assert complete("picluster exec n") == []
    inv.write_text("[cluster\n")
    assert complete(f"picluster exec -i {inv} n") == []


def test_job_ids_complete_from_the_records_newest_first_with_name_and_state(state):
    assert complete("picluster logs ") == []
    assert not state.exists()  # asking created no records
    store = JobStore()
    first = store.create("montecarlo", "montecarlo")
    store.finish(first, "COMPLETED")
    second = store.create("har", "har")
    store.finish(second, "FAILED", "a reason")
    assert complete("picluster logs ") == [f"plain,{second}", f"plain,{first}"]
    assert complete(f"picluster cancel {first}") == [f"plain,{first}"]
    # zsh shows each with what it is.
    assert complete("picluster jobs ", shell="zsh") == ["plain", str(second), "har FAILED", "plain", str(first), "montecarlo COMPLETED"]
