"""`picluster provision` without hosts: templates, file edits, facts, results, CLI input, Ansible syntax."""

import json
import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import jinja2
import pytest
import yaml

from picluster.lab import keys
from picluster.model import tokens
from picluster.model.inventory import parse_inventory
from picluster.provision import facts, templates
from picluster.provision.ansible_inventory import ansible_inventory
from picluster.provision.result import Item, NodeReport, Status, StepResult, folded_skips, folded_summary
from picluster.provision.runner import STEP_NAMES, parse_only, public_key, run_order
from picluster.provision.steps import managed_line, slurm
from picluster.provision.steps.firewall import rules_text
from picluster.provision.steps.hostname import BEGIN, END, hosts_text
from picluster.provision.steps.nfs import nfsd_threads
from picluster.provision.steps.raspi import gpu_mem_text
from picluster.util.errors import ClusterError, UsageError

from conftest import picluster

ROOT = Path(__file__).resolve().parents[1]
INV = {
    "cluster": {
        "name": "pi4", "user": "pi", "nodes": "node[01-04]", "addresses": "192.168.1.[16-19]",
        "subnet": "192.168.1.0/26",
    },
}  # fmt: skip


def inv():
    return parse_inventory(INV)


# -- templates ----------------------------------------------------------------------------------

TEMPLATE_VARS = {
    "exports.j2": {"share_dir": "/srv/picluster", "subnet": "192.168.1.0/26"},
    "nfs.conf.j2": {"nfsd_threads": 16, "mountd_port": 20048},
    "nfs-kernel-server.j2": {"nfsd_threads": 16, "mountd_port": 20048},
    "sunrpc.conf.j2": {"slot_table_entries": 128},
    "sunrpc-sysctl.conf.j2": {"slot_table_entries": 128},
    "fstab.j2": {"nfs_server": "192.168.1.16", "share_dir": "/srv/picluster", "data_dir": "/mnt/picluster"},
    "picluster.nft.j2": {
        "subnet": "192.168.1.0/26", "coordinator": "192.168.7.2", "tcp_ports": [111, 2049], "udp_ports": [111, 2049],
    },
    "slurm.conf.j2": {
        "cluster_name": "pi4", "slurm_controller": "node01", "slurm_controller_address": "192.168.1.16",
        "slurmctld_port": 6817, "slurmd_port": 6818, "srun_ports": "60001-60100", "slurm_scheduler": "backfill",
        "job_ports": "2224-2287", "def_mem_per_cpu": 420, "proctrack": "proctrack/cgroup", "task_plugin": "task/cgroup",
        "jobacct_gather": "jobacct_gather/cgroup", "slurm_mail_prog": "/bin/true",
    },
    "slurm-contain.conf.j2": {},
    "slurm-node.conf.j2": {"node": "node02", "address": "192.168.1.17", "cpus": 4, "memory": 3792},
    "slurm-partition.conf.j2": {"slurm_partition": "picluster", "default_time": "0-01:00:00", "max_time": "1-00:00:00"},
    "slurm-accounting.conf.j2": {"slurm_controller_address": "192.168.1.16", "slurmdbd_port": 6819},
    "slurmdbd.conf.j2": {"dbd_host": "node01", "dbd_port": 6819, "database": "slurm_acct_db", "db_user": "slurm",
                         "password": "0123456789abcdef0123456789abcdef0123456789abcdef"},
    "cgroup.conf.j2": {"cgroup_plugin": "cgroup/v2", "constrain": "yes"},
    "picluster-node.service.j2": {"user": "pi", "start_script": "/home/pi/.local/state/picluster/node/start.sh"},
    "picluster-profile.sh.j2": {"venv": "/opt/picluster-venv", "inventory": "/etc/picluster/picluster.toml"},
}  # fmt: skip
# Template variables the Ansible inventory does not carry: the roles read them on each node
# (coordinator, the nodes' sizes and cgroups, the user's home) or loop over the nodes (node, address).
FROM_THE_NODE = {"coordinator", "node", "address", "cpus", "memory", "cgroup_plugin", "user", "start_script",
                 "def_mem_per_cpu", "proctrack", "task_plugin", "jobacct_gather", "constrain"}
# slurmdbd.conf is written by `picluster provision` only (the Ansible role refuses accounting):
# its password never enters an inventory file.
PROVISION_ONLY = {"dbd_host", "dbd_port", "database", "db_user", "password", "venv", "inventory"}
SLURM_INV = {**INV, "slurm": {}}


def test_every_template_is_covered_and_renders_like_jinja2():
    names = sorted(p.name for p in templates.TEMPLATE_DIR.glob("*.j2"))
    assert names == sorted(TEMPLATE_VARS)
    env = jinja2.Environment(keep_trailing_newline=True, undefined=jinja2.StrictUndefined)
    for name, variables in TEMPLATE_VARS.items():
        ours = templates.render(name, **variables)
        # Ansible's inventory carries each value as the word the renderer substitutes (lists joined).
        words = {k: tokens.config_word(v, k) for k, v in variables.items()}
        theirs = env.from_string(templates.template_path(name).read_text()).render(**words)
        assert ours == theirs, name
        assert "{{" not in ours


def test_template_lines():
    assert templates.render("exports.j2", **TEMPLATE_VARS["exports.j2"]) == (
        "/srv/picluster 192.168.1.0/26(rw,sync,no_subtree_check,root_squash)\n"
    )
    assert templates.render("fstab.j2", **TEMPLATE_VARS["fstab.j2"]) == (
        "192.168.1.16:/srv/picluster /mnt/picluster nfs defaults,_netdev,lookupcache=positive 0 0\n"
    )
    defaults = templates.render("nfs-kernel-server.j2", nfsd_threads=16, mountd_port=20048)
    assert "\nRPCNFSDCOUNT=16\n" in defaults
    conf = templates.render("nfs.conf.j2", nfsd_threads=16, mountd_port=20048)
    assert "\n[nfsd]\n" in conf and "\nthreads=16\n" in conf and "\n[mountd]\n" in conf and "\nport=20048\n" in conf
    sunrpc = templates.render("sunrpc.conf.j2", slot_table_entries=128)
    assert "\noptions sunrpc tcp_slot_table_entries=128\n" in sunrpc
    # The kernel's default maximum is 65536: a max of 128 would lower it, not raise anything.
    assert "options sunrpc tcp_max_slot_table_entries" not in sunrpc
    sysctl = templates.render("sunrpc-sysctl.conf.j2", slot_table_entries=128)
    assert "\nsunrpc.tcp_slot_table_entries = 128\n" in sysctl and "max" not in sysctl.split("#")[-1]


def test_renderer_refuses_missing_values_and_other_jinja():
    with pytest.raises(ClusterError, match="no value for"):
        templates.render_text("{{ a }} {{ b }}", {"a": 1})
    with pytest.raises(ClusterError, match="only"):
        templates.render_text("{% if a %}x{% endif %}", {"a": 1})
    assert templates.render_text("{{a}}-{{  a  }}", {"a": 7}) == "7-7"


def test_nfsd_threads_at_least_one_per_node():
    assert nfsd_threads(4) == 8  # never below the default
    assert nfsd_threads(16) == 16
    assert nfsd_threads(20) == 20


def test_firewall_rules_name_the_subnet_the_coordinator_and_ports():
    text = rules_text(inv(), "192.168.7.2")
    assert "ip saddr 192.168.1.0/26 tcp dport { 111, 2049, 2222, 2223, 19100, 20048, 23300-23363 } accept" in text
    assert "ip saddr 192.168.7.2 tcp dport { 111, 2049, 2222, 2223, 19100, 20048, 23300-23363 } accept" in text
    assert "ip saddr 192.168.7.2 udp dport { 111, 2049, 20048 } accept" in text
    assert "tcp dport { 111, 2049, 2222, 2223, 19100, 20048, 23300-23363 } drop" in text
    assert "dport 22" not in text and ", 22," not in text
    # An IPv6 (or unknown) session source: only the cluster's addresses.
    assert "ip saddr 192.168.1.0/26 udp dport" in rules_text(inv(), "fe80::1")
    assert "fe80" not in rules_text(inv(), "fe80::1") and "ip saddr  " not in rules_text(inv(), "")
    # Whatever agent_port says is what is admitted (the default is 19100, not node_exporter's 9100).
    moved = parse_inventory({"cluster": {**INV["cluster"], "agent_port": 9200}})
    assert "{ 111, 2049, 2222, 2223, 9200, 20048, 23300-23363 }" in rules_text(moved, "192.168.7.2")


# -- file edits -----------------------------------------------------------------------------------

def test_hosts_text_sets_loopback_name_and_lists_every_node_once():
    before = "127.0.0.1\tlocalhost\n\n127.0.1.1\t\traspberrypi\n"
    nodes = inv().nodes
    after = hosts_text(before, "node02", nodes)
    assert "127.0.1.1\tnode02\n" in after and "raspberrypi" not in after
    assert after.count(BEGIN) == 1 and after.count(END) == 1
    assert "192.168.1.19\tnode04\n" in after
    assert hosts_text(after, "node02", nodes) == after  # idempotent
    fewer = hosts_text(after, "node02", nodes[:2])
    assert "node04" not in fewer and fewer.count(BEGIN) == 1


def test_hosts_text_adds_a_missing_loopback_line():
    assert hosts_text("127.0.0.1 localhost\n", "n1", inv().nodes[:1]).startswith("127.0.0.1 localhost\n127.0.1.1\tn1\n")


def test_gpu_mem_replaced_or_appended_for_all_boards():
    assert gpu_mem_text("a=1\ngpu_mem=64\n") == "a=1\ngpu_mem=16\n"
    # Only in [all] (or before any section) does it apply to every board.
    assert gpu_mem_text("a=1\n[cm4]\ngpu_mem=64\n") == "a=1\n[cm4]\ngpu_mem=64\n[all]\ngpu_mem=16\n"
    assert gpu_mem_text("[all]\n") == "[all]\ngpu_mem=16\n"
    once = gpu_mem_text("x=1\n[pi4]\ny=2\n")
    assert gpu_mem_text(once) == once


def test_managed_line_replaces_every_match_with_one_line():
    same = lambda line: line.startswith("/srv ")
    assert managed_line("# c\n/srv a\n/other b\n/srv c\n", "/srv new", same) == "# c\n/srv new\n/other b\n"
    assert managed_line(None, "/srv new", same) == "/srv new\n"
    assert managed_line("x", "/srv new", same) == "x\n/srv new\n"


# -- facts ------------------------------------------------------------------------------------------

def test_facts_of_a_bookworm_pi():
    f = facts.parse(
        "id=debian\ncodename=bookworm\npretty=Debian GNU/Linux 12 (bookworm)\nrpi_issue=yes\narch=aarch64\n"
        "model=Raspberry Pi 4 Model B Rev 1.5\nboot_firmware=yes\nboot_legacy=yes\nraspi_config=/usr/bin/raspi-config\n"
        "systemd=yes\nnfsd_module=yes\nhostname=raspberrypi\nhome=/home/pi\n"
    )
    assert f.pi_os and f.is_pi and f.boot_dir == "/boot/firmware" and f.nfs_server_kernel and not f.nfs_client_kernel
    assert f.summary() == "Raspberry Pi OS bookworm, aarch64, Raspberry Pi 4 Model B Rev 1.5, boot /boot/firmware"
    facts.check_supported(f)


def test_facts_of_a_bullseye_pi_and_plain_debian():
    old = facts.parse("id=raspbian\ncodename=bullseye\narch=armv7l\nmodel=Raspberry Pi 3 Model B Plus Rev 1.3\n")
    assert old.pi_os and old.boot_dir == "/boot"
    pc = facts.parse("id=debian\ncodename=bookworm\narch=x86_64\nmodel=\nboot_firmware=yes\n")
    assert not pc.is_pi and pc.boot_dir is None and not pc.pi_os
    facts.check_supported(pc)


def test_facts_name_nfs_utils_network_python_and_the_coordinator():
    f = facts.parse(
        "id=debian\ncodename=bookworm\narch=x86_64\nnfsconf=/usr/sbin/nfsconf\nnfs_utils=1:2.6.2-4\n"
        "network=systemd-networkd\nwait_online=systemd-networkd-wait-online.service\npython=3.11.2\nglibc=2.36\n"
        "coordinator=10.213.5.1\n"
    )
    assert (f.nfsconf, f.network, f.wait_online) == ("/usr/sbin/nfsconf", "systemd-networkd", "systemd-networkd-wait-online.service")
    assert (f.python, f.glibc, f.coordinator) == ("3.11.2", "2.36", "10.213.5.1")
    bare = facts.parse("id=raspbian\ncodename=bullseye\nnfsconf=\nnetwork=dhcpcd\ncoordinator=\n")
    assert bare.nfsconf is None and bare.wait_online is None and bare.network == "dhcpcd" and bare.coordinator == ""


@pytest.mark.parametrize(
    "text, message",
    [
        ("id=ubuntu\ncodename=noble\npretty=Ubuntu 24.04\n", "unsupported OS Ubuntu 24.04"),
        ("id=raspbian\ncodename=buster\n", "unsupported Raspberry Pi OS release buster"),
        ("id=raspbian\ncodename=bullseye\npython=3.9.2\n", r"python3 3\.9\.2 on the node: picluster needs Python 3\.11 or newer on every node"),
    ],
)
def test_unsupported_os(text, message):
    with pytest.raises(ClusterError, match=message):
        facts.check_supported(facts.parse(text))


# -- results and steps ---------------------------------------------------------------------------------

def _report(name, *statuses, unreachable=False, failure=None):
    step = StepResult("nfs-client", [Item(f"i{n}", s, "no NFS support in this kernel") for n, s in enumerate(statuses)])
    return NodeReport(name, [step], unreachable=unreachable, failure=failure)


def test_step_status_is_the_worst_item():
    assert StepResult("x", [Item("a", Status.OK), Item("b", Status.SKIPPED)]).status is Status.OK
    assert StepResult("x", [Item("a", Status.OK), Item("b", Status.CHANGED)]).status is Status.CHANGED
    assert StepResult("x", [Item("a", Status.CHANGED), Item("b", Status.FAILED)]).status is Status.FAILED
    assert StepResult("x", [Item("a", Status.SKIPPED)]).status is Status.SKIPPED


def test_folded_summary_groups_nodes_by_outcome():
    reports = [
        _report("node01", Status.OK),
        _report("node02", Status.OK),
        _report("node03", unreachable=True, failure="unreachable: no answer within 5 s"),
        _report("node04", Status.OK),
        _report("node05", Status.CHANGED, Status.CHANGED),
        _report("node07", unreachable=True, failure="unreachable: no answer within 5 s"),
    ]
    assert folded_summary(reports) == [
        "node[01-02,04]: ok",
        "node[03,07]: unreachable: no answer within 5 s",
        "node05: changed (2)",
    ]
    assert folded_summary(reports[4:5], dry_run=True) == ["node05: would change (2)"]
    skipped = [_report("node01", Status.SKIPPED), _report("node02", Status.SKIPPED)]
    assert folded_skips(skipped) == ["nfs-client i0: skipped (no NFS support in this kernel): node[01-02]"]


def test_parse_only():
    assert parse_only(None) is None
    assert parse_only("firewall,hostname") == ("hostname", "firewall")  # in run order
    assert set(STEP_NAMES) >= {"facts", "nfs-server", "nfs-client", "runtime"}
    with pytest.raises(UsageError, match="unknown step nfs"):
        parse_only("hostname,nfs")
    with pytest.raises(UsageError):
        parse_only(",")


def test_slurm_steps_run_only_for_an_inventory_with_slurm():
    assert run_order(None, slurm=True, users=True) == STEP_NAMES and STEP_NAMES[-2:] == ("slurm", "queue")
    assert run_order(None, slurm=False, users=True) == STEP_NAMES[:-2]
    assert run_order(None, slurm=False) == tuple(s for s in STEP_NAMES[:-2] if s != "users")
    with pytest.raises(UsageError, match="--only users: the inventory has no \\[users\\] table"):
        run_order(parse_only("users"), slurm=True)
    assert run_order(parse_only("queue"), slurm=True) == ("facts", "queue")
    with pytest.raises(UsageError, match=r"^--only queue: the inventory has no \[slurm\] table"):
        run_order(parse_only("firewall,queue"), slurm=False)


def test_only_a_slurm_step_without_slurm_is_one_line_exit_2(tmp_path):
    path = tmp_path / "picluster.toml"
    path.write_text(tomli_w_free(INV))
    result = picluster("provision", "-i", path, "--only", "slurm")
    assert_one_line_error(result, 2, "--only slurm: the inventory has no [slurm] table")


def test_public_key_from_pub_file_or_private_key(tmp_path):
    pair = keys.make_keypair(tmp_path / "id_ed25519", "me@coordinator")
    assert public_key(pair.private_path) == pair.public_line
    pair.public_path.unlink()
    derived = public_key(pair.private_path)
    assert derived.split()[:2] == pair.public_line.split()[:2]
    with pytest.raises(UsageError, match="no such file"):
        public_key(tmp_path / "nope")
    assert public_key(None) is None


class _AnsibleLoader(yaml.SafeLoader):
    """YAML as Ansible reads it: ``!unsafe`` marks a string that is never templated."""


_AnsibleLoader.add_constructor("!unsafe", lambda loader, node: loader.construct_scalar(node))


def load_ansible_yaml(text: str):
    return yaml.load(text, Loader=_AnsibleLoader)  # a SafeLoader with one more tag


def test_ansible_inventory_is_yaml_with_the_groups_and_template_variables(tmp_path, state):
    data = load_ansible_yaml(ansible_inventory(parse_inventory(SLURM_INV), known_hosts=tmp_path / "kh", public_key="ssh-ed25519 AAAA x"))
    hosts = data["all"]["hosts"]
    assert list(hosts) == ["node01", "node02", "node03", "node04"]
    assert hosts["node03"]["ansible_host"] == "192.168.1.18"
    assert list(data["all"]["children"]["nfs_server"]["hosts"]) == ["node01"]
    assert list(data["all"]["children"]["worker"]["hosts"]) == ["node02", "node03", "node04"]
    v = data["all"]["vars"]
    for name, variables in TEMPLATE_VARS.items():
        for key in set(variables) - FROM_THE_NODE - PROVISION_ONLY:
            assert key in v, (name, key)
    assert v["subnet"] == "192.168.1.0/26" and v["nfs_server"] == "192.168.1.16" and v["nfsd_threads"] == 8
    assert v["ansible_ssh_common_args"] == f"-o 'UserKnownHostsFile=\"{tmp_path / 'kh'}\"' -o StrictHostKeyChecking=yes"
    # Without --known-hosts: the policy of picluster's own connections, in OpenSSH's words.
    default = load_ansible_yaml(ansible_inventory(parse_inventory(SLURM_INV)))["all"]["vars"]["ansible_ssh_common_args"]
    assert default == (f"-o 'UserKnownHostsFile=\"{state / 'known_hosts'}\" \"{Path('~/.ssh/known_hosts').expanduser()}\"' "
                       "-o StrictHostKeyChecking=accept-new")
    # This machine's copy of the cluster's munge key: named, never made by writing an inventory
    # (the role takes the controller's, or makes the first one).
    key = Path(v["munge_key_file"])
    assert key == state / "slurm" / "pi4" / "munge.key" and not key.exists()
    assert v["slurm_controller"] == "node01" and v["slurm_partition"] == "picluster"
    assert "6817" in v["tcp_ports"] and "60001-60100" in v["tcp_ports"]
    # Times as D-HH:MM:SS: YAML 1.1 (Ansible's) reads an unquoted 1:00:00 as the number 3600.
    assert (v["default_time"], v["max_time"]) == ("0-01:00:00", "1-00:00:00")
    assert "slurm_controller" not in load_ansible_yaml(ansible_inventory(inv()))["all"]["vars"]


# -- slurm --------------------------------------------------------------------------------------------

def _slurm_ctx(sizes: dict[str, tuple[int, int, str]], **more):
    shared = SimpleNamespace(facts={n: facts.Facts(**{**BASE_FACTS, "cpus": c, "mem_mb": m, "cgroup": g, **more})
                                    for n, (c, m, g) in sizes.items()})
    return SimpleNamespace(inv=parse_inventory(SLURM_INV), shared=shared)


BASE_FACTS = {k: v for k, v in facts.parse("id=debian\ncodename=bookworm\n").__dict__.items()}
CONFINING = {"systemd": True, "cgroup_controllers": ("cpuset", "cpu", "io", "memory", "pids")}


def test_slurm_conf_lists_every_node_with_its_size_then_one_partition():
    ctx = _slurm_ctx({"node01": (4, 3792, "v2"), "node02": (4, 3792, "v2"), "node03": (4, 1848, "v2"), "node04": (2, 905, "v2")})
    text = slurm.conf_text(ctx)
    lines = text.splitlines()
    # RealMemory: MemTotal less 5 %, at least 64 MiB; the partition's limits are the inventory's defaults.
    assert lines[-5:] == [
        "NodeName=node01 NodeAddr=192.168.1.16 CPUs=4 RealMemory=3603 State=UNKNOWN",
        "NodeName=node02 NodeAddr=192.168.1.17 CPUs=4 RealMemory=3603 State=UNKNOWN",
        "NodeName=node03 NodeAddr=192.168.1.18 CPUs=4 RealMemory=1756 State=UNKNOWN",
        "NodeName=node04 NodeAddr=192.168.1.19 CPUs=2 RealMemory=841 State=UNKNOWN",
        "PartitionName=picluster Nodes=ALL Default=YES DefaultTime=0-01:00:00 MaxTime=1-00:00:00 State=UP",
    ]
    for line in ("ClusterName=pi4", "SlurmctldHost=node01(192.168.1.16)", "AuthType=auth/munge", "SrunPortRange=60001-60100",
                 "SchedulerType=sched/backfill", "SelectType=select/cons_tres", "MpiParams=ports=2224-2287",
                 # The smallest share: node04's 841 MiB over 2 CPUs.
                 "DefMemPerCPU=420",
                 # These facts name no controllers and no systemd: not confined.
                 "ProctrackType=proctrack/linuxproc", "TaskPlugin=task/none", "JobAcctGatherType=jobacct_gather/linux",
                 # No [slurm] mail_prog: mail asked of Slurm goes nowhere (Slurm's default, /bin/mail, is not on a Pi).
                 "MailProg=/bin/true"):
        assert line in lines, line
    assert not any(line.startswith("PrologFlags") for line in lines)  # Contain needs proctrack/cgroup
    mailing = SimpleNamespace(inv=parse_inventory({**INV, "slurm": {"mail_prog": "/usr/bin/mail"}}), shared=ctx.shared)
    assert "MailProg=/usr/bin/mail" in slurm.conf_text(mailing).splitlines()
    assert slurm.cgroup_plugin(ctx) == "cgroup/v2"
    assert slurm.cgroup_plugin(_slurm_ctx({"node01": (1, 1, "v1"), "node02": (1, 1, "v1")})) == "cgroup/v1"
    assert slurm.cgroup_plugin(_slurm_ctx({"node01": (1, 1, "v1"), "node02": (1, 1, "v2")})) == "autodetect"
    assert "\nConstrainRAMSpace=no\n" in slurm.cgroup_text(ctx)


def test_jobs_are_confined_only_where_every_node_can_confine_them():
    ctx = _slurm_ctx({f"node0{i}": (4, 3792, "v2") for i in range(1, 5)}, **CONFINING)
    lines = slurm.conf_text(ctx).splitlines()
    for line in ("ProctrackType=proctrack/cgroup", "TaskPlugin=task/cgroup", "JobAcctGatherType=jobacct_gather/cgroup",
                 "PrologFlags=Contain"):
        assert line in lines, line
    cgroup = slurm.cgroup_text(ctx)
    for line in ("ConstrainCores=yes", "ConstrainRAMSpace=yes", "ConstrainSwapSpace=yes", "AllowedSwapSpace=0"):
        assert f"\n{line}\n" in cgroup, line
    assert slurm._containment(ctx).detail.startswith("jobs confined to their cores and memory")
    # One node short of a controller (a Pi whose memory cgroup is off), one without systemd, one on v1:
    # every node falls back (one slurm.conf), and the report names each and why.
    nodes = {f"node0{i}": (4, 3792, "v2") for i in range(1, 5)}
    ctx = _slurm_ctx(nodes, **CONFINING)
    ctx.shared.facts["node02"] = facts.Facts(**{**ctx.shared.facts["node02"].__dict__, "cgroup_controllers": ("cpuset", "cpu")})
    ctx.shared.facts["node03"] = facts.Facts(**{**ctx.shared.facts["node03"].__dict__, "systemd": False})
    ctx.shared.facts["node04"] = facts.Facts(**{**ctx.shared.facts["node04"].__dict__, "cgroup": "v1", "cgroup_controllers": ()})
    assert "ProctrackType=proctrack/linuxproc" in slurm.conf_text(ctx).splitlines()
    assert slurm._containment(ctx).detail == (
        "jobs tracked through their parents, not confined (proctrack/linuxproc): node02: cgroup v2 without the memory controller; "
        "node03: no systemd to delegate slurmd a cgroup; node04: cgroup v1, not v2")


def test_slurm_sizes_srun_ports_and_memory_from_the_cluster():
    assert slurm.srun_ports(3) == "60001-60100"  # never fewer than 100
    assert slurm.srun_ports(64) == "60001-60520"  # two 64-node jobs' 65 sruns, 4 ports each
    assert [slurm.real_memory(m) for m in (905, 1848, 3792, 7812)] == [841, 1756, 3603, 7422]


def test_facts_give_a_slurm_node_its_cpus_memory_and_cgroups():
    f = facts.parse("id=debian\ncodename=bookworm\ncpus=4\nmem_kb=3883464\ncgroup=v2\ncgroup_controllers=cpuset cpu io memory pids\n")
    assert (f.cpus, f.mem_mb, f.cgroup, f.cgroup_controllers) == (4, 3792, "v2", ("cpuset", "cpu", "io", "memory", "pids"))
    odd = facts.parse("id=debian\ncpus=four\nmem_kb=-1\ncgroup=v3\n")
    assert (odd.cpus, odd.mem_mb, odd.cgroup, odd.cgroup_controllers) == (0, 0, "", ())


def test_firewall_admits_slurm_only_with_a_slurm_table():
    text = rules_text(parse_inventory(SLURM_INV), "192.168.7.2")
    assert "ip saddr 192.168.1.0/26 tcp dport { 111, 2049, 2222, 2223, 19100, 20048, 23300-23363, 2224-2287, 6817, 6818, 60001-60100 } accept" in text
    assert "tcp dport { 111, 2049, 2222, 2223, 19100, 20048, 23300-23363, 2224-2287, 6817, 6818, 60001-60100 } drop" in text
    assert "6817" not in rules_text(inv(), "192.168.7.2")


# -- CLI input ---------------------------------------------------------------------------------------------

BAD_INVENTORIES = {
    "duplicate name": ('[[node]]\nname = "n1"\naddress = "10.0.0.1"\n[[node]]\nname = "n1"\naddress = "10.0.0.2"\n',
                       "duplicate node name 'n1'"),
    "duplicate address": ('[[node]]\nname = "n1"\naddress = "10.0.0.1"\n[[node]]\nname = "n2"\naddress = "10.0.0.1"\n',
                          "duplicate address 10.0.0.1"),
    "invalid hostname": ('[[node]]\nname = "bad_name"\naddress = "10.0.0.1"\n', "is not a valid hostname"),
    "subnet": ('[[node]]\nname = "n1"\naddress = "10.0.0.1"\n[[node]]\nname = "n2"\naddress = "10.0.1.9"\n',
               "does not contain n2"),
}  # fmt: skip


def tomli_w_free(data: dict) -> str:
    """INV as TOML (its values are strings only)."""
    return "".join(f"[{table}]\n" + "".join(f"{k} = {json.dumps(v)}\n" for k, v in values.items()) for table, values in data.items())


def assert_one_line_error(result, code, needle):
    assert result.returncode == code, (result.returncode, result.stdout, result.stderr)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("picluster: error: ") and needle in lines[0], lines[0]


@pytest.mark.parametrize("case", sorted(BAD_INVENTORIES))
def test_bad_inventory_is_one_line_exit_2(tmp_path, case):
    body, needle = BAD_INVENTORIES[case]
    subnet = 'subnet = "10.0.0.0/24"\n' if case == "subnet" else ""
    path = tmp_path / "picluster.toml"
    path.write_text(f'[cluster]\nname = "c"\nuser = "pi"\n{subnet}\n{body}')
    for args in (["provision", "-i", path], ["inventory", "--ansible", "-i", path]):
        assert_one_line_error(picluster(*args, timeout=60), 2, needle)


def test_provision_needs_an_inventory_and_known_steps(tmp_path, monkeypatch):
    monkeypatch.delenv("PICLUSTER_INVENTORY", raising=False)
    assert_one_line_error(picluster("provision", timeout=60), 2, "needs an inventory")
    path = tmp_path / "picluster.toml"
    path.write_text('[cluster]\nname = "c"\nuser = "pi"\nnodes = "n1"\naddresses = "10.0.0.1"\n')
    assert_one_line_error(picluster("provision", "-i", path, "--only", "nfs", timeout=60), 2, "unknown step nfs")
    missing_key = path.read_text().replace('user = "pi"', 'user = "pi"\nssh_key = "/nonexistent/key"')
    path.write_text(missing_key)
    assert_one_line_error(picluster("provision", "-i", path, timeout=60), 2, "cluster.ssh_key /nonexistent/key: no such file")


def test_ansible_playbook_syntax_check(tmp_path):
    out = tmp_path / "inventory.yml"
    out.write_text(ansible_inventory(inv(), public_key="ssh-ed25519 AAAA x"))
    result = subprocess.run(
        [str(Path(sys.executable).with_name("ansible-playbook")), "-i", str(out), "site.yml", "--syntax-check"],
        cwd=ROOT / "ansible", capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr
    assert "playbook: site.yml" in result.stdout


def test_ansible_lint_passes_the_production_profile():
    # As `./dev lint` runs it: in ansible/, offline (no Galaxy install, schema download or version
    # check), with this venv first on PATH for the ansible-playbook its syntax check runs.
    lint = Path(sys.executable).with_name("ansible-lint")
    result = subprocess.run(
        [str(lint), "--offline", "--nocolor", "--profile", "production"],
        cwd=ROOT / "ansible", capture_output=True, text=True, timeout=300,
        env=dict(os.environ, PATH=f"{lint.parent}{os.pathsep}{os.environ.get('PATH', '')}"),
    )  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr


def test_ansible_templates_are_the_shared_ones():
    links = sorted((ROOT / "ansible" / "roles").glob("*/templates/*.j2"))
    # written by `picluster provision` only (accounting, [users])
    assert {p.name for p in links} == set(TEMPLATE_VARS) - {"slurmdbd.conf.j2", "picluster-profile.sh.j2"}
    for link in links:
        assert link.is_symlink() and link.resolve() == templates.template_path(link.name).resolve(), link


def test_the_kernel_command_line_gets_the_memory_cgroup_and_keeps_its_words():
    from picluster.provision.steps.raspi import cmdline_text

    pi = "console=serial0,115200 console=tty1 root=PARTUUID=1-02 rootfstype=ext4 fsck.repair=yes rootwait\n"
    assert cmdline_text(pi) == pi[:-1] + " cgroup_enable=memory cgroup_memory=1\n"
    assert cmdline_text(cmdline_text(pi)) == cmdline_text(pi)
    assert cmdline_text("a cgroup_disable=memory cgroup_memory=1 b") == "a cgroup_memory=1 b cgroup_enable=memory\n"
    assert cmdline_text("a\r\nb\n\n") == "a b cgroup_enable=memory cgroup_memory=1\n"  # one line, as the firmware reads it


def _users_contexts(users: str, passwd: dict[str, str], groups: dict[str, str] | None = None):
    """Contexts for users.prepare: each node answers getent passwd and group from the tables given."""
    from picluster.provision.steps import Shared
    from picluster.provision.steps import users as users_step

    inv = parse_inventory({"cluster": {"name": "c", "user": "pi", "nodes": "node[1-3]", "addresses": "10.0.0.[1-3]"},
                           "users": users})
    shared = Shared(public_key=None)

    def node(name):
        def run(command, check=True):
            table = (groups or {}) if command == "getent group" else passwd
            return SimpleNamespace(stdout=table.get(name, ""), exited=0)
        return SimpleNamespace(inv=inv, node=SimpleNamespace(name=name), remote=SimpleNamespace(run=run), shared=shared)

    contexts = [node(n) for n in ("node1", "node2", "node3")]
    users_step.prepare(contexts)
    return shared.users


KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOdD0pZwRK6Bjq0n6e1r2Yh2Vq0oGx3c8a1vWbq2Zk9a x"
PI = "pi:x:1000:1000::/home/pi:/bin/bash\n"


def test_a_person_gets_one_uid_on_every_node_kept_given_or_free_everywhere():
    # Free on every node: 2001 is taken on node2 by someone else, and as a group on node3.
    decided = _users_contexts({"alice": KEY, "bob": KEY, "carol": {"key": KEY, "uid": 2005}},
                              {"node1": PI, "node2": PI + "dave:x:2001:2001::/home/dave:/bin/sh\n", "node3": PI},
                              {"node3": "staff:x:2002:\n"})
    assert decided == {"alice": 2003, "bob": 2004, "carol": 2005}
    # An account that exists keeps its number, wherever it exists.
    assert _users_contexts({"alice": KEY}, {"node2": PI + "alice:x:2500:2500::/home/alice:/bin/bash\n"}) == {"alice": 2500}


def test_a_uid_the_nodes_disagree_on_or_another_holds_is_named():
    split = _users_contexts({"alice": KEY}, {"node1": "alice:x:2001:2001::/h:/bin/sh\n", "node3": "alice:x:2002:2002::/h:/bin/sh\n"})
    assert split["alice"] == ("alice has different uids on the nodes (2001 on node1, 2002 on node3): give users.alice.uid "
                              "and make the accounts agree (usermod -u)")
    given = _users_contexts({"alice": {"key": KEY, "uid": 2010}}, {"node2": "alice:x:2001:2001::/h:/bin/sh\n"})
    assert given["alice"].startswith("users.alice.uid is 2010, but alice is uid 2001 on node2: give uid = 2001")
    held = _users_contexts({"alice": {"key": KEY, "uid": 2010}}, {"node3": "eve:x:2010:2010::/h:/bin/sh\n"})
    assert held["alice"] == "uid 2010 for alice is eve's on node3: give users.alice.uid another number"
    group = _users_contexts({"alice": {"key": KEY, "uid": 2010}}, {}, {"node1": "alice:x:3000:\n"})
    assert group["alice"] == "group alice is gid 3000 on node1, not 2010: remove or renumber that group (groupmod -g)"


def test_logins_are_held_to_jobs_only_on_workers_where_jobs_are_confined():
    from picluster.provision.steps import logins

    inv = parse_inventory({**SLURM_INV, "users": {"alice": KEY}})
    confined = {n.name: facts.Facts(**{**BASE_FACTS, "cpus": 4, "mem_mb": 3792, "cgroup": "v2", **CONFINING}) for n in inv.nodes}

    def decided(node: str, node_facts, inventory=inv, included=False):
        asked = []
        remote = SimpleNamespace(ok=lambda command, **_: asked.append(command) or included, run=lambda command, **_: asked.append(command))
        ctx = SimpleNamespace(inv=inventory, node=inventory.node(node), shared=SimpleNamespace(facts=node_facts), dry_run=False,
                              remote=remote)
        return [(i.name, i.status, i.detail) for i in logins.run(ctx)]

    # The controller stays open: people log in there to queue; a job check left from when it was
    # a worker is taken out.
    assert decided("node01", confined) == [("logins", Status.OK, "open to everyone of [users]: Slurm's controller, where people log in to queue")]
    assert decided("node01", confined, included=True) == [
        ("logins", Status.CHANGED, "open to everyone of [users]: Slurm's controller, where people log in to queue (the job check removed)")]
    # Jobs not confined (cgroup v1 on one node): a login cannot be placed in a job, so logins stay open, said so.
    mixed = {**confined, "node03": facts.Facts(**{**confined["node03"].__dict__, "cgroup": "v1"})}
    assert decided("node02", mixed)[0][2].startswith("open to everyone of [users]: holding logins to jobs needs confined jobs")
    no_queue = parse_inventory({**INV, "users": {"alice": KEY}})
    assert decided("node02", confined, no_queue)[0][2].startswith("open on every node to everyone of [users] (no [slurm]")
    # Who passes without a job: root and the inventory's user, nobody else.
    assert logins.access_text("pi").splitlines()[1:] == ["+:root pi:ALL", "-:ALL:ALL"]
    pam = [line.split() for line in logins.PAM_TEXT.format(access=logins.ACCESS_FILE).splitlines() if not line.startswith("#")]
    assert pam == [["account", "sufficient", "pam_access.so", f"accessfile={logins.ACCESS_FILE}"],
                   ["account", "required", "pam_slurm_adopt.so", "action_adopt_failure=deny", "action_generic_failure=deny"]]
