"""`picluster exec` against test hosts: one command on a node set over real SSH, each line after
its node's name as clush prints it, or folded (-b) as clush -b folds them; node sets with
ClusterShell's operators, the inventory's groups and -x; failures named per node, exit code 1
when any node failed."""

import os

import pytest

from picluster.lab import Lab

from conftest import picluster

pytestmark = pytest.mark.lab


@pytest.fixture(scope="module")
def exec_lab(lab_support, tmp_path_factory):
    lab = Lab(nodes=3)
    lab.up()
    try:
        lab.inventory = lab.write_inventory(tmp_path_factory.mktemp("exec") / "picluster.toml")
        yield lab
    finally:
        lab.down()


def test_each_line_after_its_node_and_a_node_set_as_clush_takes_it(exec_lab):
    # The lab's roles: ps node01, workers node[02-03].  Each node's lines come as it ends, in any order.
    typed = picluster("exec", "-i", exec_lab.inventory, "@workers!node03", "--", "hostname; echo second line")
    assert typed.returncode == 0 and typed.stderr == "", typed.stderr
    assert typed.stdout == "node02: node02\nnode02: second line\n"
    spared = picluster("exec", "-i", exec_lab.inventory, "node[01-03]", "-x", "@workers", "--", "hostname")
    assert spared.returncode == 0 and spared.stdout == "node01: node01\n", spared.stderr
    every = picluster("exec", "-i", exec_lab.inventory, "all", "--", "hostname")
    assert sorted(every.stdout.splitlines()) == ["node01: node01", "node02: node02", "node03: node03"]


def test_identical_outputs_fold_under_one_node_set_and_different_ones_stay_apart(exec_lab):
    same = picluster("exec", "-i", exec_lab.inventory, "all", "-b", "--", "uname", "-s")
    assert same.returncode == 0 and same.stderr == "", same.stderr
    assert same.stdout == "---------------\nnode[01-03] (3)\n---------------\nLinux\n"

    # A pipe in one quoted argument, as ssh passes it; node02 differs from the other two.
    mixed = picluster("exec", "-i", exec_lab.inventory, "node[01-03]", "-b", "--", "hostname | sed 's/node0[13]/other/'")
    assert mixed.returncode == 0, mixed.stderr
    assert mixed.stdout.splitlines() == ["---------------", "node[01,03] (2)", "---------------", "other",
                                         "----------", "node02 (1)", "----------", "node02"]


def test_nodes_that_fail_are_named_with_their_exit_codes_and_sudo_runs_as_root(exec_lab):
    script = 'case $(hostname) in node01) echo fine;; *) echo "no such thing" >&2; exit 3;; esac'
    done = picluster("exec", "-i", exec_lab.inventory, "all", "--", script)
    assert done.returncode == 1
    assert done.stdout == "node01: fine\n"  # each node's stderr goes to stderr, after its name too
    assert sorted(done.stderr.splitlines()[:2]) == ["node02: no such thing", "node03: no such thing"]
    assert done.stderr.splitlines()[2:] == ["picluster: node[02-03]: exited with exit code 3"]
    gathered = picluster("exec", "-i", exec_lab.inventory, "all", "-B", "--", script)  # stderr folded too
    assert gathered.returncode == 1
    assert gathered.stdout.splitlines() == ["----------", "node01 (1)", "----------", "fine",
                                            "---------------", "node[02-03] (2)", "---------------", "no such thing"]
    assert gathered.stderr.splitlines() == ["picluster: node[02-03]: exited with exit code 3"]

    root = picluster("exec", "-i", exec_lab.inventory, "node02", "--sudo", "--", "id", "-un")
    assert root.returncode == 0 and root.stdout == "node02: root\n", root.stdout + root.stderr
    user = picluster("exec", "-i", exec_lab.inventory, "node02", "--", "id", "-un")
    assert user.stdout == f"node02: {exec_lab.user.name}\n"


def test_an_unreachable_node_is_named_and_the_others_still_answer(exec_lab):
    exec_lab.make_unreachable("node03")
    try:
        done = picluster("exec", "-i", exec_lab.inventory, "all", "-b", "--timeout", "10", "--", "echo", "up")
    finally:
        exec_lab.restore("node03")
    assert done.returncode == 1
    assert done.stdout == "---------------\nnode[01-02] (2)\n---------------\nup\n"
    (line,) = done.stderr.splitlines()
    assert line.startswith("picluster: node03: ") and "Traceback" not in done.stderr, done.stderr


def test_bad_input_is_one_line_and_asks_no_node(exec_lab, tmp_path):
    for args, needle in [(("node09", "--", "true"), "names node09, not in the inventory"),
                         (("node[3-1]", "--", "true"), "[3-1] runs backwards"),
                         (("node[01-03]!node3", "--", "true"), "names node3, not in the inventory"),
                         (("all",), "Missing argument 'COMMAND...'")]:
        done = picluster("exec", "-i", exec_lab.inventory, *args)
        assert done.returncode == 2 and done.stdout == "", done.stdout
        (line,) = done.stderr.splitlines()
        assert line.startswith("picluster: error: ") and needle in line, line
    env = {k: v for k, v in os.environ.items() if k != "PICLUSTER_INVENTORY"}
    alone = picluster("exec", "all", "--", "true", env=env, cwd=tmp_path)  # no picluster.toml there
    assert alone.returncode == 2 and alone.stderr.startswith("picluster: error: 'picluster exec' needs an inventory"), alone.stderr


def test_nodes_the_inventory_names_by_host_name_are_reached_through_this_machines_resolver(exec_lab, tmp_path):
    """addresses = "node[01-03].picluster.test": looked up by the C library's resolver, as a Pi's
    node01.local is through mDNS.  The lookup reads a hosts file of this test's own (nss_wrapper,
    Debian's libnss-wrapper, loaded into the CLI it runs), so no resolver off this machine is asked."""
    hosts = tmp_path / "hosts"
    hosts.write_text("".join(f"{exec_lab.host(name).address} {name}.picluster.test\n" for name in ("node01", "node02", "node03")))
    path = tmp_path / "picluster.toml"
    text = exec_lab.inventory.read_text()
    given = next(line for line in text.splitlines() if line.startswith("addresses = "))
    path.write_text(text.replace(given, 'addresses = "node[01-03].picluster.test"'))
    env = dict(os.environ, LD_PRELOAD="libnss_wrapper.so", NSS_WRAPPER_HOSTS=str(hosts),
               NSS_WRAPPER_PASSWD="/etc/passwd", NSS_WRAPPER_GROUP="/etc/group")
    done = picluster("exec", "-i", path, "all", "-b", "--", "hostname", env=env)
    assert done.returncode == 0, done.stderr
    assert [line for line in done.stdout.splitlines() if not line.startswith("-")] == [
        "node01 (1)", "node01", "node02 (1)", "node02", "node03 (1)", "node03"]
    # Provisioning by name: it connects to each node and plans (nothing to change for the ssh step).
    planned = picluster("provision", "-i", path, "--dry-run", "--only", "ssh", env=env)
    assert planned.returncode == 0 and "failed" not in planned.stdout, planned.stdout + planned.stderr
    # A name the hosts file does not hold: one line naming the node and the name, nothing asked of
    # any node.  The C library then asks DNS: in a network namespace of its own, which no packet leaves.
    hosts.write_text(hosts.read_text().replace("node03.picluster.test", "elsewhere.picluster.test"))
    missing = picluster("exec", "-i", path, "all", "--", "true", env=env, how=("unshare", "--net", "--"))
    assert missing.returncode == 2 and missing.stdout == "", missing.stdout
    (line,) = missing.stderr.splitlines()
    assert "node node03: address 'node03.picluster.test' does not resolve" in line, line


def test_data_har_copies_the_data_set_to_the_nfs_masters_share(exec_lab, tmp_path):
    """`picluster data har -i` on a machine where data_dir is no folder (the share not mounted, as
    on a first cluster's laptop): prepared in this machine's data directory, then copied over SSH
    into the NFS master's share_dir.  A share the inventory's user cannot write (these hosts are not
    provisioned) is one line naming it and what to run, and nothing half written is left there."""
    env = dict(os.environ, PICLUSTER_DATA_DIR=str(tmp_path / "data"))
    refused = picluster("data", "har", "-i", exec_lab.inventory, "--no-subjects", env=env, timeout=300)
    assert refused.returncode == 1, refused.stdout + refused.stderr
    (line,) = refused.stderr.splitlines()
    assert line.startswith("picluster: error: node01:/srv/picluster/har/har.npz: cannot write it (") and \
        line.endswith("): is the share there? run 'picluster provision'"), line
    left = picluster("exec", "-i", exec_lab.inventory, "node01", "--", "ls -A /srv/picluster/har 2>/dev/null; true")
    assert "picluster-new" not in left.stdout, left.stdout

    owned = picluster("exec", "-i", exec_lab.inventory, "node01", "--sudo", "--", f"chown {exec_lab.user.name} /srv/picluster")
    assert owned.returncode == 0, owned.stderr  # as provisioning makes the share its user's
    try:
        done = picluster("data", "har", "-i", exec_lab.inventory, "--no-subjects", env=env, timeout=300)
        assert done.returncode == 0, done.stderr
        assert "copied to node01:/srv/picluster/har/har.npz, which every node reads at /mnt/picluster/har" in " ".join(done.stdout.split())
        local = tmp_path / "data" / "har" / "har.npz"
        there = picluster("exec", "-i", exec_lab.inventory, "node01", "--", "sha256sum /srv/picluster/har/har.npz")
        import hashlib

        assert hashlib.sha256(local.read_bytes()).hexdigest() in there.stdout, there.stdout
        again = picluster("data", "har", "-i", exec_lab.inventory, "--no-subjects", env=env, timeout=300)
        assert again.returncode == 0 and "already prepared" in again.stdout
        # The nodes read data_dir, which these hosts do not share with node01's export: not seen
        # there, so it is copied again (a cluster's NFS makes them one).
        assert "copied to" in again.stdout
    finally:
        picluster("exec", "-i", exec_lab.inventory, "node01", "--sudo", "--", "rm -rf /srv/picluster/har && chown root /srv/picluster")


def test_v_shows_the_commands_run_over_ssh_and_q_only_the_result(exec_lab):
    """-v (on the group or the command): each connection and each command as run on its node,
    Fabric's way ("[node02] sudo: id -un"), on stderr; the result on stdout is unchanged.  The
    lab's own tools (ip, nft, tc) and provisioning's steps the same way."""
    done = picluster("-v", "exec", "-i", exec_lab.inventory, "node[01-02]", "--sudo", "--", "id", "-un")
    assert done.returncode == 0, done.stderr
    assert sorted(done.stdout.splitlines()) == ["node01: root", "node02: root"]  # each line after its node, as it comes
    lines = done.stderr.splitlines()
    for node in ("node01", "node02"):
        address = exec_lab.host(node).address
        assert f"[{node}] connect: {exec_lab.user.name}@{address}:22" in lines, done.stderr
        assert f"[{node}] sudo: id -un" in lines, done.stderr
    assert picluster("exec", "-i", exec_lab.inventory, "node[01-02]", "--sudo", "--", "id", "-un").stderr == ""

    planned = picluster("provision", "-i", exec_lab.inventory, "--dry-run", "--only", "ssh", "--known-hosts", exec_lab.known_hosts_path, "-v")
    assert planned.returncode == 0, planned.stdout + planned.stderr
    said = planned.stderr.splitlines()
    assert "[node03] step: ssh (dry run: nothing is changed)" in said
    assert any(line.startswith("[node03] sudo: ") for line in said), planned.stderr
    quiet = picluster("provision", "-i", exec_lab.inventory, "--dry-run", "--only", "ssh", "--known-hosts", exec_lab.known_hosts_path, "-q")
    assert quiet.returncode == 0 and quiet.stderr == "", quiet.stderr
    assert ": facts: done" not in quiet.stdout and quiet.stdout.endswith("node[01-03]: would change (1)\n")  # the steps' progress gone, the result kept
    assert ": facts: done" in picluster("provision", "-i", exec_lab.inventory, "--dry-run", "--only", "ssh",
                                        "--known-hosts", exec_lab.known_hosts_path).stdout

    status = picluster("lab", "status", "--name", exec_lab.id, "-v")
    assert status.returncode == 0 and "[local] run: ip -j netns list" in status.stderr.splitlines(), status.stderr
