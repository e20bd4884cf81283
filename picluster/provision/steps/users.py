"""The people of [users]: an account on every node with the same uid and gid, their SSH key, a work
folder on the share, and what lets them use picluster from their own shell on any node.

- The account: uid as the inventory gives it, else the one the account already has (the same on
  every node that has it), else the first number from FIRST_UID up that is free on every node;
  its own group with the uid as gid.  Decided once for all nodes (``prepare``) before any node
  changes, because NFS and munge's credentials carry numbers: a person must be one number everywhere.
- Their key: authorized_keys holds the inventory's key line, exactly (the inventory is the truth).
- Their work folder: ``<share_dir>/users/<name>``, 0700, made on the NFS master (root cannot make
  it through a mount, the export squashes root); the inventory's user gets one too.  Slurm jobs
  submitted through picluster write their output there (jobs/slurm/batch.py).
- Where they may log in: on a worker only while a job of theirs runs there (logins.py).
- picluster for everyone: the runtime is cluster.venv, outside any home with [users]; a login shell
  finds it on PATH (/etc/profile.d), with the cluster's inventory (a copy at INVENTORY_COPY), so
  ``picluster submit``, ``jobs``, ``logs`` and ``cancel`` typed on the controller need no -i.

An account a later inventory no longer lists is left as it is: removing a person's files is the
administrator's decision (``userdel -r``), not a side effect of provisioning.
"""

from picluster.provision import templates
from picluster.provision.result import Item, Status
from picluster.provision.steps import Context, action_item, file_item, logins, q
from picluster.util.errors import ClusterError

FIRST_UID = 2001  # above the first accounts an image makes (1000: pi), below Debian's 59999
INVENTORY_COPY = "/etc/picluster/picluster.toml"
PROFILE = "/etc/profile.d/picluster.sh"
WORK_MODE = "700"  # stat's %a form


def prepare(contexts: list[Context]) -> None:
    """Each person's uid, or why none can be given: in ctx.shared.users (name -> uid or message)."""
    if not contexts or not contexts[0].inv.users:
        return
    inv = contexts[0].inv
    passwd: dict[str, dict[str, int]] = {}  # node -> account name -> uid
    groups: dict[str, dict[str, int]] = {}  # node -> group name -> gid
    for ctx in contexts:
        passwd[ctx.node.name] = _ids(ctx.remote.run("getent passwd", check=False).stdout)
        groups[ctx.node.name] = _ids(ctx.remote.run("getent group", check=False).stdout)
    decided: dict[str, int | str] = {}
    taken = {u.uid for u in inv.users if u.uid is not None}
    for user in inv.users:
        have = {node: names[user.name] for node, names in passwd.items() if user.name in names}
        if user.uid is not None:
            wrong = {node: uid for node, uid in have.items() if uid != user.uid}
            if wrong:
                node, uid = sorted(wrong.items())[0]
                decided[user.name] = (f"users.{user.name}.uid is {user.uid}, but {user.name} is uid {uid} on {node}: "
                                      f"give uid = {uid} in the inventory, or change the account there (usermod -u)")
                continue
            uid = user.uid
        elif len(set(have.values())) > 1:
            decided[user.name] = (f"{user.name} has different uids on the nodes ({_by_node(have)}): give users.{user.name}.uid "
                                  "and make the accounts agree (usermod -u)")
            continue
        elif have:
            uid = next(iter(have.values()))
        else:
            used = taken | {i for names in passwd.values() for i in names.values()} | {i for g in groups.values() for i in g.values()}
            uid = next(i for i in range(FIRST_UID, 60000) if i not in used)
        taken.add(uid)
        clash = _holder(passwd, uid, user.name) or _holder(groups, uid, user.name)
        group = {node: g[user.name] for node, g in groups.items() if user.name in g and g[user.name] != uid}
        if clash:
            decided[user.name] = f"uid {uid} for {user.name} is {clash[1]}'s on {clash[0]}: give users.{user.name}.uid another number"
        elif group:
            node, gid = sorted(group.items())[0]
            decided[user.name] = f"group {user.name} is gid {gid} on {node}, not {uid}: remove or renumber that group (groupmod -g)"
        else:
            decided[user.name] = uid
    for ctx in contexts:
        ctx.shared.users = decided


def _ids(text: str) -> dict[str, int]:
    """name -> number from getent passwd or group lines."""
    out = {}
    for line in text.splitlines():
        fields = line.split(":")
        if len(fields) >= 3 and fields[2].isdigit():
            out[fields[0]] = int(fields[2])
    return out


def _holder(table: dict[str, dict[str, int]], number: int, name: str) -> tuple[str, str] | None:
    """(node, other name) holding `number` on some node, other than `name`."""
    for node in sorted(table):
        for other, value in table[node].items():
            if value == number and other != name:
                return node, other
    return None


def _by_node(uids: dict[str, int]) -> str:
    return ", ".join(f"{uid} on {node}" for node, uid in sorted(uids.items()))


def run(ctx: Context):
    inv = ctx.inv
    if not inv.users:
        yield Item("users", Status.SKIPPED, "no [users] in the inventory")
        return
    made = [inv.user]
    for user in inv.users:
        account = _account(ctx, user.name, ctx.shared.users.get(user.name, "not decided: the users step's prepare did not run"), user.key)
        if account.status is not Status.FAILED:
            made.append(user.name)
        yield account
    if ctx.is_master:
        for name in made:  # not for a person whose account could not be made: that is said above
            yield _work_folder(ctx, name)
    # The inventory's venv, as jobs' batch scripts put it on PATH (absolute with [users]: inventory.py).
    yield file_item(ctx, "profile", PROFILE, templates.render("picluster-profile.sh.j2", venv=inv.venv, inventory=INVENTORY_COPY))
    if inv.source is None:
        yield Item("inventory", Status.SKIPPED, "no inventory file to copy")
        return
    try:
        text = inv.source.read_text()
    except OSError as exc:
        raise ClusterError(f"cannot read {inv.source}: {exc.strerror}") from None
    if not ctx.dry_run and not ctx.remote.ok(f"test -d {q(INVENTORY_COPY.rsplit('/', 1)[0])}"):
        ctx.remote.run(f"install -d -m 0755 {q(INVENTORY_COPY.rsplit('/', 1)[0])}", sudo=True)
    yield file_item(ctx, "inventory", INVENTORY_COPY, text)
    yield from logins.run(ctx)


def _account(ctx: Context, name: str, uid: int | str, key: str) -> Item:
    if isinstance(uid, str):
        return Item(name, Status.FAILED, uid)
    remote = ctx.remote
    found = remote.run(f"getent passwd {q(name)}", check=False).stdout.strip().split(":")
    home = found[5] if len(found) >= 7 else f"/home/{name}"
    done = []
    if len(found) < 7:
        # '*': no password at all, yet not locked (sshd refuses a locked account even a key login).
        remote_cmd = (f"(getent group {q(name)} >/dev/null || groupadd -g {uid} {q(name)}) && "
                      f"useradd -m -u {uid} -g {uid} -s /bin/bash -p '*' -c 'picluster user' {q(name)}")
        if not ctx.dry_run:
            remote.run(remote_cmd, sudo=True)
        done.append(f"account uid {uid}")
    elif int(found[2]) != uid or int(found[3]) != uid:
        return Item(name, Status.FAILED, f"{name} is uid {found[2]} gid {found[3]} here, not {uid}: renumber it (usermod -u {uid} -g {uid})")
    keys = f"{home}/.ssh/authorized_keys"
    if ctx.dry_run and done:
        return Item(name, Status.CHANGED, f"would make {name} (uid {uid}) with their key")
    if not ctx.dry_run and not remote.ok(f"test -d {q(home)}/.ssh", sudo=True):
        remote.run(f"install -d -m 0700 -o {q(name)} -g {q(name)} {q(home)}/.ssh", sudo=True)
    if remote.write(keys, key + "\n", mode="0600", owner=name, group=name):
        done.append("key")
    if done:
        return Item(name, Status.CHANGED, f"{'would write' if ctx.dry_run else 'made'} {name}: {', '.join(done)}")
    return Item(name, Status.OK, f"{name} uid {uid}, key in place")


def _work_folder(ctx: Context, name: str) -> Item:
    path = f"{ctx.inv.share_dir}/users/{name}"
    remote = ctx.remote
    have = remote.out(f"stat -c '%U %a' {q(path)} 2>/dev/null || true", sudo=True)
    if have == f"{name} {WORK_MODE}":
        return Item(f"work {name}", Status.OK, f"{path} ({name}, 0{WORK_MODE})")
    parent = f"{ctx.inv.share_dir}/users"
    return action_item(ctx, f"work {name}",
                       f"install -d -m 0755 {q(parent)} && install -d -m 0{WORK_MODE} -o {q(name)} -g $(id -g {q(name)}) {q(path)}",
                       f"make {path} ({name}, 0{WORK_MODE})")
