import ipaddress
import resource
import subprocess
from pathlib import Path

import pytest

from picluster.model import nodeset
from picluster.model.inventory import load_inventory, parse_inventory
from picluster.util.errors import UsageError

from conftest import ROOT, command_line, one_line, picluster

GOOD = """
[cluster]
name = "pi16"
user = "pi"
nodes = "node[01-16]"
addresses = "192.168.1.[16-31]"
subnet = "192.168.1.0/24"
tf_port = 2222

[roles]
ps = "node11"
worker = "node[01-10,12-16]"
nfs_master = "node11"
"""


def write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "picluster.toml"
    path.write_text(text)
    return path


def test_good_inventory(tmp_path):
    inv = load_inventory(write(tmp_path, GOOD))
    assert len(inv.nodes) == 16
    assert inv.node("node11").address == "192.168.1.26"
    assert inv.ps == ("node11",)
    assert len(inv.workers) == 15 and "node11" not in inv.workers
    assert inv.nfs_master == "node11"
    assert inv.cluster_subnet == ipaddress.IPv4Network("192.168.1.0/24")


def test_defaults_and_explicit_nodes(tmp_path):
    inv = load_inventory(write(tmp_path, """
[cluster]
name = "tiny"
user = "pi"
[[node]]
name = "alpha"
address = "10.0.0.5"
[[node]]
name = "beta"
address = "10.0.0.6"
"""))
    assert inv.ps == ("alpha",) and inv.workers == ("beta",) and inv.nfs_master == "alpha"
    assert inv.cluster_subnet.supernet_of(ipaddress.IPv4Network("10.0.0.4/30"))
    assert inv.tf_port == 2222 and str(inv.data_dir) == "/mnt/picluster"


@pytest.mark.parametrize("nodes,ps", [(1, "node01"), (2, "node01"), (17, "node01"), (64, "node01")])
def test_without_roles_one_ps_on_a_node_of_its_own(tmp_path, nodes, ps):
    """The sync default's all-reduce needs the ps only to introduce the workers: 17 nodes train on 16."""
    inv = load_inventory(write(tmp_path, f"""
[cluster]
name = "c"
user = "pi"
nodes = "node[01-{nodes:02d}]"
addresses = "10.0.0.[1-{nodes}]"
"""))
    assert nodeset.fold(inv.ps) == ps
    assert inv.nfs_master == "node01"
    if nodes > 1:
        assert not set(inv.ps) & set(inv.workers) and len(inv.ps) + len(inv.workers) == nodes


@pytest.mark.parametrize("change,message", [
    (("nodes = \"node[01-16]\"", "nodes = \"node[01-15],node01\""), "duplicate node name 'node01'"),
    (("addresses = \"192.168.1.[16-31]\"", "addresses = \"192.168.1.[16-30],192.168.1.16\""), "duplicate address 192.168.1.16"),
    (("nodes = \"node[01-16]\"", "nodes = \"node[01-15],bad_name\""), "not a valid hostname"),
    (("nodes = \"node[01-16]\"", "nodes = \"node[01-15],-edge\""), "not a valid hostname"),
    (("nodes = \"node[01-16]\"", "nodes = \"node[16-01]\""), "runs backwards"),
    (("addresses = \"192.168.1.[16-31]\"", "addresses = \"192.168.1.[16-30]\""), "16 names but cluster.addresses has 15"),
    (("addresses = \"192.168.1.[16-31]\"", "addresses = \"192.168.1.[250-265]\""), "not an IPv4 address"),
    (("subnet = \"192.168.1.0/24\"", "subnet = \"10.0.0.0/8\""), "does not contain node[01-16]"),
    (("tf_port = 2222", "tf_port = 2222\ncolour = \"red\""), "unknown key 'colour' in [cluster]"),
    (("tf_port = 2222", "tf_port = 70000"), "tf_port must be a port number"),
    (("ps = \"node11\"", "ps = \"node99\""), "roles.ps: node99 not in the node list"),
    (("nfs_master = \"node11\"", "nfs_master = \"node[11-12]\""), "exactly one node"),
    (("user = \"pi\"", "user = \"pi; rm -rf /\""), "not a valid user name"),
    (("tf_port = 2222", "tf_port = 2222\n[slurm]\ncontroler = \"node01\""),
     "unknown key 'controler' in [slurm] (known: accounting, controller, default_time, mail_prog, max_time, partition, scheduler)"),
        (("tf_port = 2222", "tf_port = 2222\n[slurm]\nmax_time = \"1 day\""), "slurm.max_time '1 day': use minutes, MM:SS, HH:MM:SS"),
        (("tf_port = 2222", "tf_port = 2222\n[slurm]\ndefault_time = 30"), "slurm.default_time 30: use minutes"),
        (("tf_port = 2222", "tf_port = 2222\n[slurm]\ndefault_time = \"2-00\""), "slurm.default_time 2-00 is longer than slurm.max_time 1-00:00:00"),
    (("tf_port = 2222", "tf_port = 2222\n[slurm]\naccounting = \"yes\""), "slurm.accounting 'yes' must be true or false"),
    (("tf_port = 2222", "tf_port = 2222\n[slurm]\nscheduler = \"fifo\""), 'slurm.scheduler \'fifo\' must be "backfill" or "builtin" (first in, first out)'),
    (("tf_port = 2222", "tf_port = 2222\n[slurm]\nmail_prog = \"mail\""), "slurm.mail_prog 'mail' must be an absolute path"),
    (("tf_port = 2222", "tf_port = 2222\n[slurm]\nmail_prog = \"/usr/bin/mail -s\""), "slurm.mail_prog '/usr/bin/mail -s' contains ' '"),
    (("tf_port = 2222", "tf_port = 2222\n[slurm]\ncontroller = \"node99\""), "slurm.controller 'node99' is not a node of the inventory"),
    (("tf_port = 2222", "tf_port = 2222\n[slurm]\ncontroller = 3"), "slurm.controller 3 is not a node"),
    (("tf_port = 2222", "tf_port = 2222\n[slurm]\npartition = \"pis Nodes=ALL\""), "slurm.partition 'pis Nodes=ALL' must be letters"),
    (("[cluster]", "slurm = true\n[cluster]"), "[slurm] must be a table"),
])
def test_invalid_inventories_name_the_problem(tmp_path, change, message):
    old, new = change
    assert old in GOOD
    with pytest.raises(UsageError) as err:
        load_inventory(write(tmp_path, GOOD.replace(old, new)))
    assert message in str(err.value)
    assert "\n" not in str(err.value)


def test_slurm_table_is_optional_and_its_controller_defaults_to_the_nfs_master(tmp_path):
    assert load_inventory(write(tmp_path, GOOD)).slurm is None
    inv = load_inventory(write(tmp_path, GOOD + "\n[slurm]\n"))
    assert inv.slurm is not None and (inv.slurm.controller, inv.slurm.partition) == ("node11", "picluster")
    assert inv.slurm.scheduler == "backfill" and inv.slurm.mail_prog == ""  # no mail
    inv = load_inventory(write(tmp_path, GOOD + '\n[slurm]\ncontroller = "node02"\npartition = "pis"\nscheduler = "builtin"\n'))
    assert inv.slurm is not None and (inv.slurm.controller, inv.slurm.partition, inv.slurm.scheduler) == ("node02", "pis", "builtin")
    inv = load_inventory(write(tmp_path, GOOD + '\n[slurm]\nmail_prog = "/usr/bin/mail"\n'))
    assert inv.slurm is not None and inv.slurm.mail_prog == "/usr/bin/mail"


def test_unreadable_and_invalid_toml(tmp_path):
    with pytest.raises(UsageError, match="no such file"):
        load_inventory(tmp_path / "missing.toml")
    with pytest.raises(UsageError, match="invalid TOML"):
        load_inventory(write(tmp_path, "[cluster\nname="))
    with pytest.raises(UsageError, match=r"missing \[cluster\]"):
        load_inventory(write(tmp_path, "[roles]\n"))


@pytest.mark.parametrize("text,message", [
    ("a = " + "[" * 5000 + "]" * 5000, "nested too deeply"),  # tomllib recursed into a RecursionError traceback
    ("a = " + "{b = " * 5000 + "1" + "}" * 5000, "nested too deeply"),
    ("# " + "x" * (2 * 1024 * 1024), "larger than 1024 KiB"),
])
def test_hostile_toml_is_one_line(tmp_path, text, message):
    path = tmp_path / "picluster.toml"
    path.write_text(text)
    with pytest.raises(UsageError, match=message) as err:
        load_inventory(path)
    assert "\n" not in str(err.value)


def test_a_device_is_not_read_to_its_end():
    """`-i /dev/zero` was read until memory ran out: in a child capped at 1 GiB, so a regression
    fails quickly (MemoryError) instead of eating the machine's memory."""
    def cap():
        resource.setrlimit(resource.RLIMIT_AS, (1 << 30, 1 << 30))

    result = subprocess.run([*command_line(), "inventory", "--ansible", "-i", "/dev/zero"],
                            capture_output=True, text=True, timeout=120, preexec_fn=cap, cwd=ROOT)
    one_line(result, 2, "inventory /dev/zero: larger than 1024 KiB")


def test_the_shipped_example_is_the_docs_and_describes_a_16_pi_cluster():
    """examples/picluster.toml is what docs/cluster.md shows; both must stay a valid inventory."""
    from picluster.model.clusterspec import from_inventory

    from conftest import ROOT

    example = ROOT / "examples" / "picluster.toml"
    readme = (ROOT / "docs" / "cluster.md").read_text()
    assert f"```toml\n{example.read_text()}```" in readme
    inv = load_inventory(example)
    assert [n.name for n in inv.nodes][:2] == ["node01", "node02"] and len(inv.nodes) == 16
    assert inv.node("node16").address == "192.168.1.31"
    layout = from_inventory(inv)
    assert [t.label for t in layout.ps] == ["ps:0"] and len(layout.workers) == 15
    assert layout.workers[0].address == "192.168.1.17:2222"


def test_the_first_cluster_example_is_the_page_s_and_a_five_line_inventory_of_four_pis(monkeypatch):
    """examples/first-cluster.toml, shown whole by docs/first-cluster.md: its .local names resolve
    (here through a stand-in for the Pis' mDNS) to four nodes, node01 the ps and NFS master."""
    import socket

    from picluster.model.clusterspec import from_inventory

    from conftest import ROOT

    example = ROOT / "examples" / "first-cluster.toml"
    page = (ROOT / "docs" / "first-cluster.md").read_text()
    settings = [line for line in example.read_text().splitlines() if line and not line.startswith("#")]
    assert f"```toml\n{chr(10).join(settings)}\n```" in page
    assert len(settings) == 6  # [cluster] and five keys
    names = {f"node0{i}.local": f"192.168.1.{15 + i}" for i in range(1, 5)}
    monkeypatch.setattr(socket, "getaddrinfo", lambda host, *a, **k: [(socket.AF_INET, socket.SOCK_STREAM, 6, "", (names[host], 0))])
    inv = load_inventory(example)
    first = inv.nodes[0]
    assert (first.name, first.address, first.host) == ("node01", "192.168.1.16", "node01.local") and len(inv.nodes) == 4
    layout = from_inventory(inv)
    assert [t.node for t in layout.ps] == ["node01"] and [t.node for t in layout.workers] == ["node02", "node03", "node04"]
    assert inv.nfs_master == "node01" and inv.user == "pi"


ALICE = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOdD0pZwRK6Bjq0n6e1r2Yh2Vq0oGx3c8a1vWbq2Zk9a alice@laptop"
BOB = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIB0bB0bB0bB0bB0bB0bB0bB0bB0bB0bB0bB0bB0bB0bB bob"


def test_users_map_names_to_keys_or_tables_and_move_the_runtime_out_of_the_home(tmp_path):
    inv = load_inventory(write(tmp_path, GOOD + f'\n[users]\nalice = "{ALICE}"\nbob = {{ key = "{BOB}", uid = 2002 }}\n'))
    assert [(u.name, u.key, u.uid) for u in inv.users] == [("alice", ALICE, None), ("bob", BOB, 2002)]
    assert inv.venv == "/opt/picluster-venv"  # every account runs it; a home is its owner's
    assert load_inventory(write(tmp_path, GOOD)).venv == "picluster-venv" and load_inventory(write(tmp_path, GOOD)).users == ()
    given = GOOD.replace("tf_port = 2222", 'tf_port = 2222\nvenv = "/srv/venv"') + f'\n[users]\nalice = "{ALICE}"\n'
    assert load_inventory(write(tmp_path, given)).venv == "/srv/venv"


@pytest.mark.parametrize("users,message", [
    (f'alice = "{ALICE}"\nbob = {{ key = "{BOB}", uid = 2001 }}\ncarol = {{ key = "{BOB}", uid = 2001 }}',
     "users.carol.uid 2001 is users.bob's too: every person needs a uid of their own"),
    (f'alice = "{ALICE}"\nalice = "{BOB}"', "invalid TOML"),  # a duplicate name
    (f'pi = "{ALICE}"', "users.pi is cluster.user, the account picluster itself logs in as"),
    (f'slurm = "{ALICE}"', "users.slurm: 'slurm' is a system account's name; choose another name"),
    (f'"Alice Smith" = "{ALICE}"', "[users] name 'Alice Smith' is not a valid user name"),
    ('alice = "AAAAC3Nza alice"', "users.alice key is not one OpenSSH public key line"),
    (f'alice = "command=\\"sh\\" {ALICE}"', "users.alice key is not one OpenSSH public key line"),
    (f'alice = {{ key = "{ALICE}", uid = 0 }}', "users.alice.uid 0 must be a number from 1000 to 59999"),
    (f'alice = {{ key = "{ALICE}", uid = "2001" }}', "users.alice.uid '2001' must be a number from 1000 to 59999"),
    (f'alice = {{ key = "{ALICE}", home = "/root" }}', "unknown key 'home' in users.alice (known: key, uid)"),
    ('alice = { uid = 2001 }', "users.alice.key is missing"),
    ('alice = 2001', "users.alice must be their SSH public key"),
])
def test_bad_users_are_one_line_naming_the_key(tmp_path, users, message):
    with pytest.raises(UsageError) as err:
        load_inventory(write(tmp_path, GOOD + "\n[users]\n" + users + "\n"))
    assert message in str(err.value) and "\n" not in str(err.value), str(err.value)


def test_a_runtime_in_the_admins_home_is_refused_with_users(tmp_path):
    text = GOOD.replace("tf_port = 2222", 'tf_port = 2222\nvenv = "picluster-venv"') + f'\n[users]\nalice = "{ALICE}"\n'
    with pytest.raises(UsageError, match=r"cluster.venv 'picluster-venv' is in pi's home, which the accounts of \[users\] cannot use"):
        load_inventory(write(tmp_path, text))


def test_a_duplicate_user_through_the_cli_is_exit_2_and_one_line(tmp_path):
    path = write(tmp_path, GOOD + f'\n[slurm]\n[users]\nbob = {{ key = "{BOB}", uid = 2001 }}\ncarol = {{ key = "{BOB}", uid = 2001 }}\n')
    one_line(picluster("provision", "-i", path, "--dry-run"), 2, "users.carol.uid 2001 is users.bob's too")
    path.write_text(GOOD + f'\n[users]\nbob = "{BOB}"\n')
    one_line(picluster("inventory", "-i", path, "--ansible"), 2, "[users] (accounts, keys, work folders) is set up by 'picluster provision' only")
    one_line(picluster("provision", "-i", path, "--venv", "my-venv", "--dry-run"), 2,
             "--venv my-venv: with [users], the runtime must be where every account can run it: give an absolute path")


def test_node_addresses_may_be_host_names_resolved_once_as_the_inventory_is_read(monkeypatch):
    """node01.local (mDNS), a DNS name or an /etc/hosts entry: looked up once, as the inventory is
    read.  (The resolver stands in for the Pis' mDNS here; test_exec_lab.py resolves names for real.)"""
    import socket

    table = {"node01.local": "192.168.1.16", "node02.local": "192.168.1.17"}
    asked = []

    def resolver(host, port, family=0, type=0, proto=0, flags=0):
        asked.append((host, family))
        if host not in table:
            raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")
        return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", (table[host], 0))]

    monkeypatch.setattr(socket, "getaddrinfo", resolver)
    cluster = {"name": "c", "user": "alice", "nodes": "node[01-02]", "addresses": "node[01-02].local"}
    inv = parse_inventory({"cluster": cluster})
    assert [(n.name, n.address, n.host) for n in inv.nodes] == [("node01", "192.168.1.16", "node01.local"),
                                                                ("node02", "192.168.1.17", "node02.local")]
    assert asked == [("node01.local", socket.AF_INET), ("node02.local", socket.AF_INET)]
    assert str(inv.cluster_subnet) == "192.168.1.16/31"
    with pytest.raises(UsageError) as missing:
        parse_inventory({"cluster": {**cluster, "nodes": "node[01-03]", "addresses": "node[01-03].local"}})
    assert str(missing.value).endswith("node node03: address 'node03.local' does not resolve (Name or service not known): check "
                                       "the name (a .local name needs mDNS on this machine: Debian's libnss-mdns), or give the "
                                       "node's IPv4 address")
    twice = {"name": "c", "user": "alice", "node": [{"name": "a", "address": "node01.local"}, {"name": "b", "address": "192.168.1.16"}]}
    with pytest.raises(UsageError, match=r"duplicate address 192\.168\.1\.16 \(nodes a and b\)"):
        parse_inventory({"cluster": {k: v for k, v in twice.items() if k != "node"}, "node": twice["node"]})
    # Numbers that are not an address are refused as such, never handed to a resolver (10.1 would be 10.0.0.1).
    for bad in ("10.1", "192.168.1.256"):
        with pytest.raises(UsageError, match="is not an IPv4 address"):
            parse_inventory({"cluster": {**cluster, "nodes": "node01", "addresses": bad}})
    assert len(asked) == 6  # 2 + 3 + 1 above: the numbers asked nothing
