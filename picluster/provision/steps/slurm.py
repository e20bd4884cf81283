"""Steps 10 and 11, with a [slurm] table: Slurm as the cluster's queue, then read back from it.

slurm (every node): munge's key (one per cluster, kept by the controller: munge.py), one slurm.conf
rendered from the inventory and every node's facts (Slurm refuses nodes whose files differ, and
a node given its own file becomes a one-node cluster), cgroup.conf, then munged, slurmctld on the
controller and slurmd, each restarted when a file it reads changed.

queue (the controller): what the running system says, never what was written: `scontrol ping`,
every node serving in `sinfo` (registered: idle, or running users' jobs; nodes take a few seconds
to register), `srun` on every idle node returning each one's host name, and, where jobs are
confined, a step over its memory stopped by Slurm and a step's detached child gone with it.  A
node running jobs is not waited for: provisioning a busy cluster reads back what it can.

Under systemd the daemons are Debian's units, enabled at boot.  A test host has no init: there
the same daemons are started directly and found again through their pid files in the host's own
/run (a shared PID namespace makes `pgrep` see every host's processes).
"""

import re
import time

from picluster.cluster.allocation import SINFO_NODES, not_serving, scontrol_nodes, sinfo_states
from picluster.model import nodeset, tokens
from picluster.provision import templates
from picluster.provision.result import Item, Status
from picluster.provision.steps import Context, accounting, file_item, munge, q
from picluster.provision.steps.daemon import Daemon, keep_up
from picluster.util.errors import PiclusterError

SLURM_CONF = "/etc/slurm/slurm.conf"
CGROUP_CONF = "/etc/slurm/cgroup.conf"
SLURMCTLD_PORT = 6817
SLURMD_PORT = 6818
# srun listens on ports of this range for its tasks' I/O: "a single srun opens 4 listening ports"
# (slurm.conf(5), SrunPortRange; 2 more per 48 nodes past 48).  A picluster job runs from its
# batch node one srun per node (clients, tasks) plus its servers' step, so the range holds two
# jobs the size of the cluster launched from one node at once, and never fewer than 100 ports.
SRUN_PORT_FIRST = 60001
SRUN_PORTS_PER_STEP = 4
# A job's servers take two ports Slurm reserves for their step (srun --resv-ports, MpiParams=ports):
# slurmctld never gives the same port of a node to two steps at once, so jobs sharing a node never
# collide.  The range sits above tf_port + 1 (the servers `cluster up` keeps) and holds this many
# jobs' servers on one node at once.
JOB_PORT_PAIRS = 32
# RealMemory: MemTotal less this headroom, so a kernel that reports a few MiB less after an upgrade
# does not make slurmctld drain the node ("Low RealMemory"), and the OS keeps room beside the jobs.
HEADROOM_MB, HEADROOM_SHARE = 64, 20  # at least 64 MiB, else 1/20 (5 %) of MemTotal
# Jobs are confined (proctrack/cgroup, task/cgroup) where every node has cgroup v2 with these
# controllers and systemd to delegate a subtree to slurmd (Slurm 22.05's cgroup/v2 asks systemd
# for its scope); elsewhere they are tracked through their parents and not confined.
CONTAIN_CONTROLLERS = ("cpuset", "memory")
REGISTER_WAIT = 60.0  # seconds for every slurmd to register as idle
PING_WAIT = 30.0  # seconds for slurmctld to answer scontrol ping
ACCOUNTED_WAIT = 30.0  # seconds for a job's record to reach slurmdbd
TESTED = "22.05"  # Debian 12's Slurm, and Raspberry Pi OS bookworm's: what slurm.conf is written for
NO_MAIL = "/bin/true"  # MailProg without [slurm] mail_prog: mail asked of Slurm goes nowhere, the job runs
VERSION = re.compile(r"\b\d{2}\.\d{2}\.\d+\b")  # slurmd -V: "slurm-wlm 22.05.8"


MUNGED = Daemon("munged", "munge", "/run/munge/munged.pid", "/var/log/munge/munged.log",
                "install -d -o munge -g munge -m 0755 /run/munge && runuser -u munge -- /usr/sbin/munged")
SLURMCTLD = Daemon("slurmctld", "slurmctld", "/run/slurmctld.pid", "/var/log/slurm/slurmctld.log",
                   "install -d -o slurm -g slurm -m 0755 /var/lib/slurm/slurmctld /var/log/slurm && /usr/sbin/slurmctld")
SLURMD = Daemon("slurmd", "slurmd", "/run/slurmd.pid", "/var/log/slurm/slurmd.log",
                "install -d -m 0755 /var/lib/slurm/slurmd && install -d -o slurm -g slurm -m 0755 /var/log/slurm && /usr/sbin/slurmd")


def packages(ctx: Context) -> list[str]:
    """What the packages step installs for Slurm on this node (nothing without [slurm])."""
    slurm = ctx.inv.slurm
    if slurm is None:
        return []
    controller = ctx.node.name == slurm.controller
    adopt = ["libpam-slurm-adopt"] if ctx.inv.users and not controller else []  # logins held to jobs (logins.py)
    return ["munge", "slurmd", "slurm-client", *(["slurmctld"] if controller else []), *adopt, *accounting.packages(ctx)]


def srun_ports(nodes: int) -> str:
    """SrunPortRange for a cluster of ``nodes``: two whole-cluster jobs' sruns on one node."""
    count = max(100, 2 * SRUN_PORTS_PER_STEP * (nodes + 1))
    return f"{SRUN_PORT_FIRST}-{SRUN_PORT_FIRST + count - 1}"


def job_ports(inv) -> str:
    """MpiParams=ports: the range Slurm reserves job servers' ports from."""
    return f"{inv.tf_port + 2}-{inv.tf_port + 1 + 2 * JOB_PORT_PAIRS}"


def real_memory(mem_mb: int) -> int:
    """A node's RealMemory in slurm.conf: MemTotal less the headroom."""
    return mem_mb - max(HEADROOM_MB, mem_mb // HEADROOM_SHARE)


def def_mem_per_cpu(facts) -> int:
    """DefMemPerCPU: what a job that gives no --mem gets per CPU, the smallest node's share, so a
    job without --mem takes its CPUs' part of a node, not the whole node."""
    return min(real_memory(f.mem_mb) // f.cpus for f in facts.values())


def uncontained(facts) -> dict[str, str]:
    """Node -> why jobs cannot be confined there (no cgroup v2, a controller off, no systemd)."""
    why = {}
    for name, f in sorted(facts.items()):
        missing = [c for c in CONTAIN_CONTROLLERS if c not in f.cgroup_controllers]
        if f.cgroup != "v2":
            why[name] = f"cgroup {f.cgroup}, not v2" if f.cgroup else "no cgroup file system"
        elif missing:
            why[name] = f"cgroup v2 without the {' and '.join(missing)} controller"
        elif not f.systemd:
            why[name] = "no systemd to delegate slurmd a cgroup"
    return why


def plugins(contained: bool) -> dict[str, str]:
    """slurm.conf's tracking, confinement and accounting plugins, confined or not."""
    if contained:
        return {"proctrack": "proctrack/cgroup", "task_plugin": "task/cgroup",
                "jobacct_gather": "jobacct_gather/cgroup"}
    return {"proctrack": "proctrack/linuxproc", "task_plugin": "task/none", "jobacct_gather": "jobacct_gather/linux"}


def firewall_ports(inv) -> list[int | str]:
    """The TCP ports Slurm listens on, and those Slurm reserves for the servers jobs start (above
    the ones `cluster up` keeps), for the firewall (the cluster and the coordinator only)."""
    if inv.slurm is None:
        return []
    dbd = [accounting.SLURMDBD_PORT] if inv.slurm.accounting else []  # sacct and sacctmgr on any node ask slurmdbd
    return [job_ports(inv), SLURMCTLD_PORT, SLURMD_PORT, *dbd, srun_ports(len(inv.nodes))]


def prepare(contexts: list[Context]) -> None:
    """Before the step runs on any node: which munge key is the cluster's (munge.py)."""
    try:
        decision = munge.prepare(contexts)
    except PiclusterError as exc:  # the keeper stopped answering, this machine's copy cannot be written
        decision = munge.ClusterKey(error=f"the cluster's munge key: {exc}")
    contexts[0].shared.munge = decision


def template_vars(inv) -> dict[str, object]:
    """slurm.conf.j2's and slurm-partition.conf.j2's variables from the inventory (Ansible's inventory
    carries the same; the role works out the ones from the nodes' facts as conf_text does)."""
    assert inv.slurm is not None
    return {
        "slurm_controller": inv.slurm.controller,
        "slurm_controller_address": inv.node(inv.slurm.controller).address,
        "slurm_partition": inv.slurm.partition,
        "slurm_scheduler": inv.slurm.scheduler,
        "slurmctld_port": SLURMCTLD_PORT,
        "slurmd_port": SLURMD_PORT,
        "srun_ports": srun_ports(len(inv.nodes)),
        "job_ports": job_ports(inv),
        # Written as D-HH:MM:SS whatever form the inventory gave: Ansible's YAML would read 1:00:00 as 3600.
        "default_time": tokens.slurm_duration(tokens.slurm_seconds(inv.slurm.default_time, "slurm.default_time")),
        "max_time": tokens.slurm_duration(tokens.slurm_seconds(inv.slurm.max_time, "slurm.max_time")),
        "slurm_accounting": "yes" if inv.slurm.accounting else "no",  # a word: Ansible reads it with | bool
        "slurm_mail_prog": inv.slurm.mail_prog or NO_MAIL,
        "slurmdbd_port": accounting.SLURMDBD_PORT,
    }


def cgroup_plugin(ctx: Context) -> str:
    """The version every node mounts; autodetect (slurmd's default) when they differ."""
    kinds = {f.cgroup for f in ctx.shared.facts.values()}
    return {frozenset({"v1"}): "cgroup/v1", frozenset({"v2"}): "cgroup/v2"}.get(frozenset(kinds), "autodetect")


def conf_text(ctx: Context) -> str:
    inv, facts = ctx.inv, ctx.shared.facts
    variables = template_vars(inv)
    contained = not uncontained(facts)
    head = templates.render("slurm.conf.j2", cluster_name=inv.name, def_mem_per_cpu=def_mem_per_cpu(facts),
                            **plugins(contained), **variables)
    # Confined, each job holds an extern step on its nodes, where pam_slurm_adopt places a login (logins.py).
    head += templates.render("slurm-contain.conf.j2") if contained else ""
    nodes = "".join(
        templates.render("slurm-node.conf.j2", node=n.name, address=n.address, cpus=facts[n.name].cpus,
                         memory=real_memory(facts[n.name].mem_mb))
        for n in inv.nodes
    )  # fmt: skip
    counted = templates.render("slurm-accounting.conf.j2", **variables) if variables["slurm_accounting"] == "yes" else ""
    return head + counted + nodes + templates.render("slurm-partition.conf.j2", **variables)


def cgroup_text(ctx: Context) -> str:
    return templates.render("cgroup.conf.j2", cgroup_plugin=cgroup_plugin(ctx),
                            constrain="yes" if not uncontained(ctx.shared.facts) else "no")


def run(ctx: Context):
    inv = ctx.inv
    assert inv.slurm is not None  # run_order runs this step only with [slurm]
    missing = [n.name for n in inv.nodes if n.name not in ctx.shared.facts]
    if missing:
        # slurm.conf lists every node's CPUs and memory: a partial file would differ from the next one.
        yield Item("slurm_conf", Status.FAILED, f"no facts from {', '.join(missing)}: slurm.conf needs every node's")
        return
    unsized = [n for n, f in ctx.shared.facts.items() if f.cpus < 1 or f.mem_mb < 1]
    if unsized:
        yield Item("slurm_conf", Status.FAILED, f"{unsized[0]} did not report its CPUs and memory (nproc, /proc/meminfo)")
        return
    small = [n for n, f in ctx.shared.facts.items() if real_memory(f.mem_mb) < f.cpus]
    if small:
        yield Item("slurm_conf", Status.FAILED, f"{small[0]} has {ctx.shared.facts[small[0]].mem_mb} MiB: too little for Slurm's "
                   f"{HEADROOM_MB} MiB headroom and a MiB per CPU")
        return
    if not ctx.facts.cgroup:
        yield Item("cgroups", Status.FAILED, "no cgroup file system on /sys/fs/cgroup: slurmd cannot start without one")
        return
    yield _version(ctx)
    items, key_changed = munge.install(ctx)
    yield from items
    if any(i.status is Status.FAILED for i in items):
        return  # munged would refuse every other node's credentials
    conf = file_item(ctx, "slurm_conf", SLURM_CONF, conf_text(ctx))
    yield conf
    cgroup = file_item(ctx, "cgroup_conf", CGROUP_CONF, cgroup_text(ctx))
    yield cgroup
    yield _containment(ctx)
    slurm_changed = Status.CHANGED in (conf.status, cgroup.status)
    yield from keep_up(ctx, MUNGED, key_changed)
    if ctx.node.name == inv.slurm.controller and inv.slurm.accounting:
        kept = list(accounting.controller(ctx))  # before slurmctld, which sends slurmdbd its records
        yield from kept
        if any(i.status is Status.FAILED for i in kept):
            return
    elif ctx.node.name == inv.slurm.controller:
        yield from accounting.retired(ctx)
    if ctx.node.name == inv.slurm.controller:
        if inv.slurm.mail_prog and not ctx.dry_run and not ctx.remote.ok(f"test -x {q(inv.slurm.mail_prog)}"):
            yield Item("mail", Status.FAILED, f"slurm.mail_prog {inv.slurm.mail_prog} is not a program on {ctx.node.name}: "
                       "install a mail program there (e.g. bsd-mailx with a mail server), or remove mail_prog")
        yield from keep_up(ctx, SLURMCTLD, slurm_changed or key_changed)
    yield from keep_up(ctx, SLURMD, slurm_changed or key_changed)


def _containment(ctx: Context) -> Item:
    """Whether jobs are confined, and where not, why (the same for every node: one slurm.conf)."""
    why = uncontained(ctx.shared.facts)
    if not why:
        return Item("containment", Status.OK, "jobs confined to their cores and memory (proctrack/cgroup, task/cgroup; cgroup v2)")
    reasons = "; ".join(f"{nodes}: {reason}" for reason, nodes in nodeset.fold_by(why).items())  # in node order
    return Item("containment", Status.OK, f"jobs tracked through their parents, not confined (proctrack/linuxproc): {reasons}")


def _version(ctx: Context) -> Item:
    """The installed Slurm, reported: slurm.conf is written for Debian 12's 22.05, and another
    release may read it otherwise (the queue step checks that every node runs the same one)."""
    out = ctx.remote.run("/usr/sbin/slurmd -V", check=False)  # sbin: not on a user's PATH
    found = VERSION.search(out.stdout)
    if found is None:
        if ctx.dry_run:
            return Item("version", Status.SKIPPED, "dry run: slurmd is not installed yet")
        return Item("version", Status.FAILED, f"slurmd -V: {(out.stdout + out.stderr).strip() or 'no answer'}")
    version = found.group(0)
    if not version.startswith(f"{TESTED}."):
        return Item("version", Status.OK, f"slurm {version}: not the {TESTED} this configuration is tested with (Debian 12); "
                    "check the queue step and docs/slurm.md")
    return Item("version", Status.OK, f"slurm {version}")


def queue(ctx: Context):
    """Read back on the controller, once every node's daemons have had their step."""
    slurm = ctx.inv.slurm
    assert slurm is not None  # run_order runs this step only with [slurm]
    if ctx.node.name != slurm.controller:
        yield Item("queue", Status.SKIPPED, f"read back on the controller, {slurm.controller}")
        return
    if ctx.dry_run:
        yield Item("queue", Status.SKIPPED, "dry run: nothing was started to read back")
        return
    remote = ctx.remote
    deadline = time.monotonic() + PING_WAIT  # a slurmctld just (re)started loads its state, and with accounting asks slurmdbd
    while ((ping := remote.run("scontrol ping", check=False)).exited != 0 or "UP" not in ping.stdout) and time.monotonic() < deadline:
        time.sleep(1.0)
    if ping.exited != 0 or "UP" not in ping.stdout:
        yield Item("controller", Status.FAILED, f"scontrol ping: {(ping.stdout + ping.stderr).strip() or 'no answer'}")
        return
    yield Item("controller", Status.OK, ping.stdout.strip())
    names = [n.name for n in ctx.inv.nodes]
    deadline = time.monotonic() + REGISTER_WAIT
    while True:
        # Registered and serving: idle, or running jobs (a busy cluster is provisioned too).
        states = _states(ctx)
        waiting = not_serving(states) | {n: "unknown to slurmctld" for n in names if n not in states}
        if not waiting or time.monotonic() > deadline:
            break
        time.sleep(1.0)
    if waiting:
        reasons = "; ".join(f"{n} {s}" for n, s in sorted(waiting.items()))
        yield Item("nodes", Status.FAILED, f"not serving after {REGISTER_WAIT:.0f} s: {reasons}")
        return
    idle = [n for n in names if states[n] == "idle"]
    busy = {n: states[n] for n in names if n not in idle}
    if not busy:
        yield Item("nodes", Status.OK, f"{len(names)} idle in partition {slurm.partition}")
    else:
        listed = "; ".join(f"{nodes} {state}" for state, nodes in sorted(nodeset.fold_by(busy).items()))
        yield Item("nodes", Status.OK, f"{len(names)} serving in partition {slurm.partition}: {listed} (running jobs)")
    versions = _versions(ctx)
    if len(set(versions.values())) > 1:
        mine = versions.get(ctx.node.name, "?")
        other = {n: v for n, v in versions.items() if v != mine}
        listed = "; ".join(f"{nodes} {v}" for v, nodes in sorted(nodeset.fold_by(other).items()))
        yield Item("versions", Status.FAILED, f"slurmd versions differ: {slurm.controller} runs {mine}, {listed}")
        return
    if not idle:
        yield Item("srun", Status.SKIPPED, "every node is running jobs: no step was tried")
        return
    # Only where nothing runs: a step never waits behind users' jobs (--immediate: the nodes may
    # have been taken since sinfo answered).
    ran = remote.run(f"srun --nodes={len(idle)} --nodelist={q(nodeset.fold(idle))} --ntasks-per-node=1 --time=1 "
                     f"--immediate=60 --job-name=picluster-check hostname", check=False, timeout=120)
    seen = sorted(ran.stdout.split())
    if ran.exited != 0 or seen != sorted(idle):
        why = (ran.stderr.strip().splitlines() or [f"got {' '.join(seen) or 'nothing'}"])[-1]
        yield Item("srun", Status.FAILED, f"srun on {len(idle)} nodes: {why}")
        return
    if busy:
        yield Item("srun", Status.OK, f"hostname ran on the {len(idle)} idle nodes ({nodeset.fold(idle)}); {nodeset.fold(busy)} not tried (running jobs)")
    else:
        yield Item("srun", Status.OK, f"hostname ran on all {len(names)} nodes")
    if slurm.accounting:
        yield _accounted(ctx)
    yield from _confinement(ctx)


def _accounted(ctx: Context) -> Item:
    """The check step just run is in slurmdbd's records (sacct), and priorities use fair share."""
    remote = ctx.remote
    deadline = time.monotonic() + ACCOUNTED_WAIT
    while True:  # slurmctld sends its records as it can: seconds, not at once
        listed = remote.run("sacct --noheader --parsable2 --allocations --name=picluster-check --starttime=now-600 "
                            "--format=JobID,State", check=False)
        done = [line.split("|") for line in listed.stdout.splitlines() if line.endswith("|COMPLETED")]
        if done or time.monotonic() > deadline:
            break
        time.sleep(1.0)
    if not done:
        why = (listed.stderr.strip().splitlines() or ["no record of it"])[-1]
        return Item("accounting", Status.FAILED, f"sacct does not list the check step's job: {why}")
    config = remote.run("scontrol show config", check=False).stdout
    if not re.search(r"^PriorityType\s*=\s*priority/multifactor$", config, re.MULTILINE):
        return Item("accounting", Status.FAILED, "slurmctld does not run priority/multifactor (fair share)")
    return Item("accounting", Status.OK, f"sacct lists the check job {done[-1][0]} (COMPLETED); priorities by fair share (priority/multifactor)")


# What confinement promises, tried with two short steps: one over its memory, one whose child
# leaves its process tree (setsid), as a job's daemon would.
OOM_STEP = "python3 -c 'b = bytearray(256 * 2**20)'"  # 256 MiB under a 32 MiB limit
# slurmstepd: "Detected 1 oom_kill event in StepId=..."; srun: "task 0: Out Of Memory"
OOM_SAID = re.compile(r"oom[-_ ]kill|out of memory", re.IGNORECASE)
DETACHED = "sleep 86399"  # the detached child's command line, anchored in pgrep
CHECK = "srun --nodes=1 --ntasks=1 --time=1 --immediate=60 --job-name=picluster-check"


def _confinement(ctx: Context):
    if uncontained(ctx.shared.facts):
        yield Item("confined", Status.SKIPPED, "jobs are not confined here (the slurm step's containment line says why)")
        return
    remote = ctx.remote
    hog = remote.run(f"{CHECK} --mem=32M {OOM_STEP}", check=False, timeout=120)
    if hog.exited == 0 or not OOM_SAID.search(hog.stdout + hog.stderr):
        why = (hog.stderr.strip().splitlines() or [f"exit status {hog.exited}"])[-1]
        yield Item("memory", Status.FAILED, f"a step over its --mem was not stopped by Slurm: {why}")
        return
    yield Item("memory", Status.OK, "a step over its --mem (32M) was stopped by Slurm (oom-kill event)")
    ran = remote.run(f"{CHECK} sh -c {q(f'setsid -f {DETACHED}; echo $SLURMD_NODENAME')}", check=False, timeout=120)
    node = ran.stdout.strip()
    if ran.exited != 0 or node not in {n.name for n in ctx.inv.nodes}:
        yield Item("processes", Status.FAILED, f"the detaching step did not run: {(ran.stderr.strip().splitlines() or ['no output'])[-1]}")
        return
    look = f"{CHECK} --nodelist={q(node)} pgrep -f {q('^' + DETACHED + '$')}"
    deadline = time.monotonic() + 15.0
    while remote.run(look, check=False, timeout=120).exited == 0:  # still there: Slurm ends a step's leftovers
        if time.monotonic() > deadline:
            remote.run(f"{CHECK} --nodelist={q(node)} pkill -f {q('^' + DETACHED + '$')}", check=False, timeout=120)
            yield Item("processes", Status.FAILED, f"a step's detached child outlived it on {node} (killed now)")
            return
        time.sleep(1.0)
    yield Item("processes", Status.OK, f"a step's detached child (setsid) ended with the step on {node}")


def _versions(ctx: Context) -> dict[str, str]:
    """Node -> the slurmd version it registered with (scontrol's Version=)."""
    nodes = scontrol_nodes(ctx.remote.run("scontrol -o show node", check=False).stdout)
    return {f["NodeName"]: f["Version"] for f in nodes if f.get("NodeName") and f.get("Version")}


def _states(ctx: Context) -> dict[str, str]:
    """Node -> state (and reason, when it has one) as slurmctld sees it."""
    return sinfo_states(ctx.remote.run(SINFO_NODES, check=False).stdout)
