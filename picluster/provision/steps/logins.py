"""Who may log in where, once a cluster has people ([users]) and a queue ([slurm]): a person logs in
on a worker only while a job of theirs runs there, and that login is held in the job (Slurm's
pam_slurm_adopt), so the queue's limits hold for what they type there too and nothing they start
outlives the job.  The controller stays open to them: they log in there to queue.  The inventory's
user (the administrator, who provisions and runs the chores) and root log in everywhere.

Only where jobs are confined (slurm.uncontained finds nothing): adoption places the login in the
job's cgroup, and Slurm requires proctrack/cgroup and task/cgroup for it.  Elsewhere the report
says that logins stay open and why.

The pieces, in the order they are put in place (the last one turns the check on):
- pam_slurm_adopt.so is installed (libpam-slurm-adopt) and sshd uses PAM;
- ACCESS_FILE admits root and the inventory's user before the check (pam_access, sufficient);
- PAM_FILE: pam_access, then pam_slurm_adopt, denying when it cannot adopt;
- pam_systemd off (pam-auth-update): it would move the login out of the job into a user slice;
- sshd's PAM file includes PAM_FILE after Debian's account stack (the check must come last).
Taking a node out of this (no [users] any more) is done by hand: see docs/slurm.md.
"""

from picluster.provision.result import Item, Status
from picluster.provision.steps import Context, action_item, file_item, q
from picluster.provision.steps.slurm import uncontained

SSHD_PAM = "/etc/pam.d/sshd"
PAM_FILE = "/etc/pam.d/picluster-slurm-adopt"
INCLUDE = "@include picluster-slurm-adopt"
AFTER = "@include common-account"  # Debian's and Raspberry Pi OS's sshd: its account stack
ACCESS_FILE = "/etc/security/picluster-access.conf"
# Debian's libpam-slurm-adopt puts it in /lib/security; PAM also looks in the multiarch folders.
MODULE = "/lib/security/pam_slurm_adopt.so /lib/*/security/pam_slurm_adopt.so /usr/lib/*/security/pam_slurm_adopt.so"
PAM_SYSTEMD_PROFILE = "/usr/share/pam-configs/systemd"

PAM_TEXT = """\
# Managed by picluster (provision, [users] with [slurm]): included by /etc/pam.d/sshd after its
# account stack.  root and the cluster's administrator pass (pam_access); anyone else logs in only
# while a job of theirs runs on this node, and the login joins that job (pam_slurm_adopt).
account    sufficient   pam_access.so accessfile={access}
account    required     pam_slurm_adopt.so action_adopt_failure=deny action_generic_failure=deny
"""


def access_text(admin: str) -> str:
    return (f"# Managed by picluster: who logs in on this node without a job here (pam_access; {PAM_FILE}).\n"
            f"+:root {admin}:ALL\n"
            "-:ALL:ALL\n")


def run(ctx: Context):
    inv = ctx.inv
    if inv.slurm is None:
        yield Item("logins", Status.OK, "open on every node to everyone of [users] (no [slurm] to hold logins to jobs)")
        return
    remote = ctx.remote
    included = remote.ok(f"grep -qxF {q(INCLUDE)} {SSHD_PAM}")  # the check is on (the last piece put in place)
    if ctx.node.name == inv.slurm.controller:
        what = "open to everyone of [users]: Slurm's controller, where people log in to queue"
        if included:  # a worker before: the controller now
            yield action_item(ctx, "logins", f"sed -i {q(f'/^{INCLUDE}$/d')} {SSHD_PAM}", f"{what} (the job check removed)")
        else:
            yield Item("logins", Status.OK, what)
        return
    why = uncontained(ctx.shared.facts)
    if why:
        yield Item("logins", Status.OK, "open to everyone of [users]: holding logins to jobs needs confined jobs "
                   "(the slurm step's containment line says why they are not)")
        return
    if not ctx.dry_run:
        if not remote.ok(f"ls {MODULE} 2>/dev/null | grep -q ."):
            yield Item("logins", Status.FAILED, "pam_slurm_adopt.so is not installed (Debian's libpam-slurm-adopt): "
                       "run the packages step (picluster provision --only packages)")
            return
        if not remote.ok("sshd -T 2>/dev/null | grep -qx 'usepam yes'", sudo=True):
            yield Item("logins", Status.FAILED, "sshd runs without PAM (UsePAM no in /etc/ssh/sshd_config): "
                       "set UsePAM yes so that logins can be held to jobs")
            return
        if not included and not remote.ok(f"grep -qxF {q(AFTER)} {SSHD_PAM}"):
            yield Item("logins", Status.FAILED, f"{SSHD_PAM} has no '{AFTER}' line to place the job check after: "
                       f"add '{INCLUDE}' as its last account line by hand")
            return
    yield file_item(ctx, "login_admins", ACCESS_FILE, access_text(inv.user), mode="0644")
    yield file_item(ctx, "login_check", PAM_FILE, PAM_TEXT.format(access=ACCESS_FILE), mode="0644")
    yield _pam_systemd_off(ctx)
    if included:
        yield Item("logins", Status.OK, f"held to jobs: people log in only where a job of theirs runs ({inv.user} and root always)")
    else:
        yield action_item(ctx, "logins", f"sed -i {q(f'/^{AFTER}$/a {INCLUDE}')} {SSHD_PAM}",
                          f"hold logins to jobs: people log in only where a job of theirs runs ({inv.user} and root always)")


def _pam_systemd_off(ctx: Context) -> Item:
    """pam_systemd moves a session into the user's slice, out of the job pam_slurm_adopt put it in
    (Slurm's pam_slurm_adopt page): switched off through Debian's own pam-auth-update."""
    remote = ctx.remote
    if not remote.ok("grep -q pam_systemd /etc/pam.d/common-session"):
        return Item("pam_systemd", Status.OK, "off (a login stays in its job)")
    if not remote.ok(f"test -e {PAM_SYSTEMD_PROFILE}"):
        return Item("pam_systemd", Status.FAILED, "/etc/pam.d/common-session calls pam_systemd, not from pam-auth-update's profile: "
                    "remove that line by hand (it would move logins out of their jobs)")
    item = action_item(ctx, "pam_systemd", "DEBIAN_FRONTEND=noninteractive pam-auth-update --disable systemd",
                       "switch pam_systemd off (pam-auth-update --disable systemd): a login stays in its job")
    if not ctx.dry_run and remote.ok("grep -q pam_systemd /etc/pam.d/common-session"):
        return Item("pam_systemd", Status.FAILED, "pam-auth-update --disable systemd left pam_systemd in /etc/pam.d/common-session")
    return item
