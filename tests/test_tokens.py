"""Inventory strings checked by what they become (picluster.model.tokens): the issue's cases, then properties.

Every value that reaches /etc/exports, /etc/fstab, /etc/hosts, nftables, a shell or Ansible must
be one plain token there, or the inventory is refused with the key's name.
"""

import ipaddress
import string
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from picluster.model import tokens
from picluster.model.inventory import Inventory, Node, parse_inventory
from picluster.provision import templates
from picluster.provision.ansible_inventory import ansible_inventory
from picluster.provision.runner import public_key
from picluster.util.errors import UsageError

from conftest import picluster

BASE = {"name": "pi4", "user": "pi", "nodes": "node[01-04]", "addresses": "192.168.1.[16-19]", "subnet": "192.168.1.0/26"}


def parse(**cluster):
    return parse_inventory({"cluster": BASE | cluster})


# -- the cases -------------------------------------------------------------------------

@pytest.mark.parametrize("key,value", [
    ("share_dir", "/srv/picluster\t*(rw,no_root_squash,insecure)"),  # exported the share to every host
    ("data_dir", "/mnt/picluster\tnfs\trw,exec,suid"),  # rewrote the fstab line's options
    ("share_dir", "/srv/pi cluster"),
    ("share_dir", "/srv/picluster\n/ *(rw)"),
    ("share_dir", "/srv/#picluster"),
    ("data_dir", "/mnt/pi\\040cluster"),  # fstab's octal escape
    ("data_dir", "/mnt/$(reboot)"),
    ("share_dir", "/srv/{{ lookup('pipe', 'id') }}"),
    ("share_dir", "/srv/pic\u00e9"),
    ("share_dir", "/srv/a\x00b"),
    ("share_dir", "relative/path"),
    ("share_dir", "/srv/../etc"),
    ("share_dir", "/"),
    ("venv", "venv;reboot"),
    ("venv", "../../etc"),
    ("venv", "-rf"),
    ("data_dir", "/mnt/--bind"),
    ("ssh_key", "/home/me/.ssh/id\tx"),
    ("ssh_key", "/home/me/.ssh/\"id"),
])
def test_paths_with_separators_or_control_characters_are_refused_naming_the_key(key, value):
    with pytest.raises(UsageError) as err:
        parse(**{key: value})
    message = str(err.value)
    assert f"cluster.{key}" in message and "\n" not in message and "\t" not in message


@pytest.mark.parametrize("key,value", [
    ("name", "pi4\n[roles]"), ("user", "pi\tx"), ("user", "Pi"), ("nodes", "node01\t,node02"),
])
def test_names_are_rfc_1123_or_user_names(key, value):
    with pytest.raises(UsageError):
        parse(**{key: value})
    assert tokens.hostname("node01.lab", "n") == "node01.lab"
    for bad in ("node01\n", "node_01", "-node", "node-", "a" * 64, "node01.", ""):
        with pytest.raises(UsageError):
            tokens.hostname(bad, "node name")


def test_good_paths_are_kept_and_normalised():
    inv = parse(share_dir="/srv/pi-cluster_2.0", data_dir="/mnt/picluster/", venv="~/venvs/pc")
    assert str(inv.share_dir) == "/srv/pi-cluster_2.0" and str(inv.data_dir) == "/mnt/picluster"
    assert inv.venv == "~/venvs/pc"


def test_the_renderer_refuses_what_validation_would_have_refused():
    """Safe by construction: an Inventory that skipped parsing still cannot write a tab into /etc/exports."""
    with pytest.raises(UsageError, match=r"share_dir .*exports\.j2"):
        templates.render("exports.j2", share_dir="/srv/x\t*(rw,no_root_squash)", subnet="10.0.0.0/24")
    with pytest.raises(UsageError, match="subnet"):
        templates.render("exports.j2", share_dir="/srv/x", subnet="10.0.0.0/24 *")
    with pytest.raises(UsageError, match="tcp_ports"):
        templates.render("picluster.nft.j2", subnet="10.0.0.0/24", coordinator="10.0.0.5",
                         tcp_ports=["22 } accept; tcp dport { 1"], udp_ports=[111])
    assert "tcp dport { 111, 2049 }" in templates.render("picluster.nft.j2", subnet="10.0.0.0/24", coordinator="10.0.0.5",
                                                         tcp_ports=[111, 2049], udp_ports=[111])


def test_public_key_must_be_one_plain_key_line(tmp_path):
    key = tmp_path / "id"
    key.write_text("not read: the .pub file comes first")
    pub = tmp_path / "id.pub"
    for bad in ('command="reboot" ssh-ed25519 AAAAC3Nz me', "ssh-ed25519 AAAAC3Nz me\nssh-rsa AAAAB3 evil",
                "ssh-ed25519 AAAA\x1b[2J me"):
        pub.write_text(bad)
        with pytest.raises(UsageError, match="not one OpenSSH public key line"):
            public_key(key)
    pub.write_text("ssh-ed25519 AAAAC3NzaC1lZDI1NTE5 me@host\n")
    assert public_key(key) == "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5 me@host"


def test_known_hosts_path_with_spaces_stays_one_ssh_argument(tmp_path):
    import json
    import shlex
    import subprocess

    inv = parse()
    text = ansible_inventory(inv, known_hosts=Path("/tmp/a b -o ProxyCommand=touch x"))
    line = next(line for line in text.splitlines() if "ansible_ssh_common_args" in line)
    args = shlex.split(json.loads(line.split("!unsafe ", 1)[1]))  # as Ansible splits it for ssh
    assert args == ["-o", 'UserKnownHostsFile="/tmp/a b -o ProxyCommand=touch x"', "-o", "StrictHostKeyChecking=yes"]
    # ssh itself reads one file name there, and no ProxyCommand (-G prints the settings, connects nowhere).
    settings = subprocess.run(["ssh", "-G", *args, "10.0.0.1"], capture_output=True, text=True, check=True).stdout
    assert "proxycommand" not in settings and "stricthostkeychecking true" in settings


def test_inventory_file_name_with_a_newline_cannot_inject_yaml(tmp_path):
    inv = parse_inventory({"cluster": BASE}, source=Path("/tmp/x\nall:\n  vars: {evil: 1}\n#"))
    text = ansible_inventory(inv)
    assert text.splitlines()[1].startswith("# from \"/tmp/x\\nall:")
    assert "evil" not in text.split("\n", 2)[2].split("#")[0]


def test_bad_inventory_strings_on_the_command_line_are_one_line_exit_2(tmp_path):
    path = tmp_path / "picluster.toml"
    path.write_text('[cluster]\nname = "c"\nuser = "pi"\nnodes = "n1"\naddresses = "10.0.0.1"\n'
                    'share_dir = "/srv/picluster\\t*(rw,no_root_squash,insecure)"\n')
    for args in (["provision", "-i", path, "--dry-run"], ["inventory", "--ansible", "-i", path]):
        result = picluster(*args, timeout=60)
        assert result.returncode == 2, result.stderr
        lines = result.stderr.strip().splitlines()
        assert len(lines) == 1 and "cluster.share_dir" in lines[0] and "\\t" in lines[0], result.stderr


# -- Ansible: values are data, never templates ----------------------------------------------------

PLAYBOOK = """
- hosts: all
  gather_facts: false
  tasks:
    - name: every variable the roles use, and a shared template rendered as the roles do
      ansible.builtin.debug:
        msg: "KEY={{ coordinator_public_key }} FILE={{ ansible_ssh_private_key_file }} EXPORTS={{ lookup('ansible.builtin.template', 'exports.j2') | trim }}"
"""


def test_ansible_never_evaluates_an_inventory_value(tmp_path):
    """A Jinja expression in a value would run a lookup on the controller; marked !unsafe it is text."""
    marker = tmp_path / "lookup-ran"
    inv = Inventory(name="c", user="pi", nodes=(Node("n1", "10.0.0.1"),), ps=("n1",), workers=("n1",), nfs_master="n1",
                    ssh_key=Path("/keys/{{7*7}}/id"))
    key = f"ssh-ed25519 AAAAC3NzaC1lZDI1NTE5 {{{{ lookup('pipe', 'touch {marker}') }}}}"
    (tmp_path / "inventory.yml").write_text(ansible_inventory(inv, public_key=key))
    (tmp_path / "play.yml").write_text(PLAYBOOK)
    (tmp_path / "templates").symlink_to(templates.TEMPLATE_DIR)
    result = subprocess.run(
        [str(Path(sys.executable).with_name("ansible-playbook")), "-i", "inventory.yml", "play.yml"],
        cwd=tmp_path, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr
    assert not marker.exists(), "Ansible evaluated an inventory value"
    assert f"KEY={key}" in result.stdout
    assert "FILE=/keys/{{7*7}}/id" in result.stdout
    assert "EXPORTS=/srv/picluster 10.0.0.1/32(rw,sync,no_subtree_check,root_squash)" in result.stdout


# -- properties ---------------------------------------------------------------------------------

# What must never survive into a configuration file: separators, comments, quotes, escapes,
# specifiers, expansions and Jinja.
DANGEROUS = set(string.whitespace) | set("#;\"'\\$`%{}()[]<>|&*?!=,") | {chr(c) for c in range(32)} | {"\x7f"}


@given(st.text(max_size=40))
def test_a_node_path_is_accepted_only_as_portable_characters(text):
    try:
        path = tokens.node_path(text, "cluster.share_dir")
    except UsageError as exc:
        assert "cluster.share_dir" in str(exc) and "\n" not in str(exc)
        return
    assert path.startswith("/") and not DANGEROUS & set(path)
    assert all(c in string.ascii_letters + string.digits + "._-/" for c in path)
    assert ".." not in path.split("/") and not any(part.startswith("-") for part in path.split("/"))
    assert tokens.config_word(path, "k") == path  # an accepted path is always a word of every template


@given(st.text(max_size=70))
def test_a_hostname_is_letters_digits_dots_and_inner_hyphens(text):
    try:
        name = tokens.hostname(text, "node name")
    except UsageError:
        return
    assert not DANGEROUS & set(name) and not name.startswith("-") and not name.endswith("-")
    assert tokens.config_word(name, "k") == name


@given(st.one_of(st.text(max_size=30), st.integers(), st.lists(st.integers(0, 65535), max_size=4), st.booleans(), st.none()))
def test_a_config_word_never_carries_syntax(value):
    try:
        word = tokens.config_word(value, "k")
    except UsageError as exc:
        assert "\n" not in str(exc)
        return
    items = word.split(", ") if isinstance(value, list) else [word]
    for item in items:
        assert item and not DANGEROUS & set(item)


@given(st.dictionaries(st.sampled_from(["share_dir", "data_dir", "venv", "name", "user", "ssh_key"]), st.text(max_size=25), max_size=3))
def test_any_inventory_strings_give_a_safe_inventory_or_one_line(values):
    try:
        inv = parse(**values)
    except UsageError as exc:
        assert "\n" not in str(exc)
        return
    for word in (str(inv.share_dir), str(inv.data_dir), inv.name, inv.user, inv.venv):
        assert not DANGEROUS & set(word)
    ipaddress.IPv4Network(inv.cluster_subnet)
    # Whatever got through renders, and Ansible gets it as data.
    templates.render("exports.j2", share_dir=inv.share_dir, subnet=inv.cluster_subnet)
    templates.render("fstab.j2", nfs_server=inv.nodes[0].address, share_dir=inv.share_dir, data_dir=inv.data_dir)
    assert all("!unsafe" in line for line in ansible_inventory(inv).splitlines() if line.startswith("    share_dir"))
