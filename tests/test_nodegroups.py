"""The inventory's nodes by node set: its roles as ClusterShell groups (@ps, @workers, @nfs,
@controller, @all), -x, and names it lacks refused, on the command line as users type them."""

import os

import pytest
from test_cli_input import assert_one_line_usage_error

from picluster.model.inventory import parse_inventory
from picluster.model.nodegroups import groups, select
from picluster.util.errors import UsageError

from conftest import picluster

# Nothing listens on these loopback addresses: a command that reached for a node would fail there.
INVENTORY = """\
[cluster]
name = "t"
user = "pi"
nodes = "node[01-07]"
addresses = "127.0.1.[1-7]"

[roles]
ps = "node[01-02]"
worker = "node[03-07]"
nfs_master = "node01"

[slurm]
controller = "node02"
"""


def inventory(text: str = INVENTORY):
    import tomllib

    return parse_inventory(tomllib.loads(text))


def test_the_roles_are_groups():
    assert groups(inventory()) == {"all": [f"node0{i}" for i in range(1, 8)], "ps": ["node01", "node02"],
                                   "workers": ["node03", "node04", "node05", "node06", "node07"], "nfs": ["node01"],
                                   "controller": ["node02"]}
    assert "controller" not in groups(inventory(INVENTORY.split("[slurm]")[0]))  # no Slurm, no controller


@pytest.mark.parametrize("pattern,exclude,names", [
    ("all", (), [f"node0{i}" for i in range(1, 8)]),
    ("@all", (), [f"node0{i}" for i in range(1, 8)]),
    ("node[01-04]!node03", (), ["node01", "node02", "node04"]),
    ("@workers!node03", (), ["node04", "node05", "node06", "node07"]),
    ("@workers", ("node03",), ["node04", "node05", "node06", "node07"]),
    ("all", ("@ps", "node07"), ["node03", "node04", "node05", "node06"]),  # -x given twice, a group among them
    ("@all!@ps", ("node0[5-7]!node05",), ["node03", "node04", "node05"]),  # -x takes an expression too
    ("@ps^@nfs,@controller", (), ["node02"]),
    ("node[07,03]", (), ["node03", "node07"]),  # in inventory order
])
def test_select_takes_expressions_groups_and_exclusions(pattern, exclude, names):
    assert select(inventory(), pattern, exclude) == names


@pytest.mark.parametrize("pattern,exclude,says", [
    ("node[01-09]", (), r"^node set 'node\[01-09\]' names node\[08-09\], not in the inventory t \(its nodes: node\[01-07\]; "
                        r"its groups: @all, @controller, @nfs, @ps, @workers\)$"),
    ("all!node01", (), r"names all, not in the inventory t .*; every node is @all in an expression\)$"),
    ("@worker", (), r"^node set '@worker': no group @worker \(the groups: @all, @controller, @nfs, @ps, @workers\)$"),
    ("@ps", ("node3",), r"^-x 'node3' names node3, not in the inventory t"),  # a mistyped exclusion spares nothing: refused
    ("@ps", ("node[01-02",), r"^-x: node set 'node\[01-02': missing bracket"),
    ("@ps", ("@ps",), r"^node set '@ps' less -x @ps leaves no node$"),
])
def test_what_select_refuses_is_one_line(pattern, exclude, says):
    with pytest.raises(UsageError, match=says):
        select(inventory(), pattern, exclude)


def test_a_role_is_a_node_set_too(tmp_path):
    inv = inventory(INVENTORY.replace('worker = "node[03-07]"', 'worker = "node[01-07]!node[01-02]"'))
    assert inv.workers == ("node03", "node04", "node05", "node06", "node07")
    with pytest.raises(UsageError, match=r"roles.ps: node set 'node\[01-2\]': \[01-2\] pads one end"):
        inventory(INVENTORY.replace('ps = "node[01-02]"', 'ps = "node[01-2]"'))
    with pytest.raises(UsageError, match=r"cluster.nodes: node set 'node\[07,01-06\]': write \[07,01-06\] upwards"):
        inventory(INVENTORY.replace('nodes = "node[01-07]"', 'nodes = "node[07,01-06]"'))  # paired with addresses by position


def test_node_sets_on_the_command_line_with_x_and_groups_before_any_node_is_asked(tmp_path):
    path = tmp_path / "picluster.toml"
    path.write_text(INVENTORY)
    shown = picluster("nodes", "upgrade", "@workers!node04", "-x", "node07", "-i", path, "--dry-run", timeout=60)
    assert shown.returncode == 0, shown.stderr
    assert shown.stdout.splitlines()[0] == "would upgrade node[03,05-06] in this order (1 at a time, each checked back before the next):"
    for args, says in [(("exec", "node[01-04]!node09", "--", "true"), "node set 'node[01-04]!node09' names node09, not in the inventory t"),
                       (("exec", "node[01-2]", "--", "true"), "[01-2] pads one end and not the other"),
                       (("exec", "@all", "-x", "@workers", "-x", "@ps", "--", "true"), "leaves no node"),
                       (("exec", "all", "-b", "-B", "--", "true"), "give -b or -B, not both"),
                       (("nodes", "reboot", "@wokers", "--dry-run"), "no group @wokers (the groups: @all, @controller, @nfs, @ps, @workers)"),
                       (("nodes", "shutdown", "all", "-x", "node9", "--dry-run"), "-x 'node9' names node9, not in the inventory t"),
                       (("provision", "--replaced", "node[01-03]^node[02-09]", "--dry-run"), "names node[08-09], not in the inventory t"),
                       (("submit", "--nodelist", "@workers", "-x", "@all", "--", "true"), "--nodelist: node set '@workers' less -x @all leaves no node")]:
        split = args.index("--") if "--" in args else len(args)  # -i before the command
        done = picluster(*args[:split], "-i", path, *args[split:], timeout=60)
        assert_one_line_usage_error(done)
        assert says in done.stderr and done.stdout == "", done.stderr


def test_no_groups_conf_is_read_and_no_group_command_runs(tmp_path):
    """ClusterShell's own groups (groups.conf, which may run commands) play no part: the groups are
    the inventory's, held in memory."""
    marker = tmp_path / "ran"
    config = tmp_path / "clustershell"
    config.mkdir()
    (config / "groups.conf").write_text(f"[Main]\ndefault: site\n\n[site]\nmap: touch {marker}; echo node[01-07]\n"
                                        f"list: touch {marker}; echo workers\nall: touch {marker}; echo node[01-07]\n")
    path = tmp_path / "picluster.toml"
    path.write_text(INVENTORY)
    env = dict(os.environ, CLUSTERSHELL_CFGDIR=str(config))
    shown = picluster("nodes", "reboot", "@workers", "-i", path, "--dry-run", env=env, timeout=60)
    assert shown.returncode == 0, shown.stderr
    assert shown.stdout.splitlines()[0].startswith("would reboot node[03-07] in this order")
    refused = picluster("nodes", "reboot", "@site:workers", "-i", path, "--dry-run", env=env, timeout=60)
    assert_one_line_usage_error(refused)
    assert "no group source 'site'" in refused.stderr
    assert not marker.exists()
