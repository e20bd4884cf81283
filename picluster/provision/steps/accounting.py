"""Slurm's accounting, with ``[slurm] accounting = true``: slurmdbd and Debian's MariaDB on the
controller, so every job is recorded (``sacct``) and priorities follow each user's past use (fair
share, priority/multifactor in slurm.conf).

On the controller, before slurmctld (which sends its records to slurmdbd):

1. MariaDB running (listening on the controller's loopback only, as Debian ships it);
2. a database user ``slurm`` for the database ``slurm_acct_db``, with a password made on this
   machine and kept there 0600 (``password_path``), or the one the controller's slurmdbd.conf
   already holds (a second coordinator takes it, as it takes the munge key);
3. slurmdbd.conf, 0600 and owned by slurm, installed through ``Remote.put_secret``: the password
   never appears in a command line, a temporary file another account can read, or a report;
4. slurmdbd running, and the cluster, the account ``picluster`` and the inventory's user
   registered (``sacctmgr``): slurm.conf enforces associations, so an unregistered user's job is
   refused at submission.
"""

import hashlib
import os
import re
import secrets
import time
from pathlib import Path

from picluster.provision import templates
from picluster.provision.result import Item, Status
from picluster.provision.steps import Context, action_item, q
from picluster.provision.steps.daemon import Daemon, keep_down, keep_up
from picluster.util import atomic, paths

SLURMDBD_CONF = "/etc/slurm/slurmdbd.conf"
SLURMDBD_PORT = 6819
DATABASE = "slurm_acct_db"
DB_USER = "slurm"
ACCOUNT = "picluster"  # every user's default account: fair share is then between users
PASSWORD_BYTES = 24
ANSWER_WAIT = 60.0  # seconds for slurmdbd to answer once started
# Debian's units; without init, mariadbd does not detach: setsid does.
MARIADB = Daemon("mariadbd", "mariadb", "/run/mysqld/mysqld.pid", "/var/log/mysql/error.log",
                 "install -d -o mysql -g mysql -m 0755 /run/mysqld && "
                 "setsid -f /usr/sbin/mariadbd --user=mysql --pid-file=/run/mysqld/mysqld.pid "
                 "--log-error=/var/log/mysql/error.log >/dev/null 2>&1 < /dev/null")
SLURMDBD = Daemon("slurmdbd", "slurmdbd", "/run/slurmdbd.pid", "/var/log/slurm/slurmdbd.log",
                  "install -d -o slurm -g slurm -m 0755 /var/log/slurm && /usr/sbin/slurmdbd")
_PASS_LINE = re.compile(r"^StoragePass=(\S+)$", re.MULTILINE)
_PASSWORD = re.compile(r"[0-9a-f]{16,128}")  # what picluster makes; anything else is not taken


def packages(ctx: Context) -> list[str]:
    slurm = ctx.inv.slurm
    if slurm is None or not slurm.accounting or ctx.node.name != slurm.controller:
        return []
    return ["mariadb-server", "slurmdbd"]


def retired(ctx: Context):
    """Accounting off on a controller that had it: slurmdbd stopped (slurmctld no longer sends it
    anything), its records kept in MariaDB, which is left as it is (it may serve more than Slurm)."""
    stopped = keep_down(ctx, SLURMDBD, "accounting is off ([slurm] accounting = false)")
    yield stopped
    if stopped.status is Status.CHANGED and ctx.remote.ok("test -x /usr/sbin/mariadbd"):
        yield Item("mariadb", Status.OK, "left running with the records: 'sudo systemctl disable --now mariadb' frees its memory")


def password_path(inv) -> Path:
    """This machine's copy of the database password, beside the cluster's munge key."""
    return paths.state_dir() / "slurm" / inv.name / "slurmdbd.password"


def native_hash(password: str) -> str:
    """MariaDB's mysql_native_password hash: compared with mysql.user's, the password itself is
    never sent to the node to check it."""
    return "*" + hashlib.sha1(hashlib.sha1(password.encode()).digest()).hexdigest().upper()


def conf_text(ctx: Context, password: str) -> str:
    return templates.render("slurmdbd.conf.j2", dbd_host=ctx.node.name, dbd_port=SLURMDBD_PORT, database=DATABASE,
                            db_user=DB_USER, password=password)


def controller(ctx: Context):
    """The items of steps 1-4 on the controller (the caller runs this only there, with accounting on)."""
    remote = ctx.remote
    yield from keep_up(ctx, MARIADB, config_changed=False)
    current = remote.read(SLURMDBD_CONF)
    password, origin = _password(ctx, current)
    if password is None:
        yield Item("database", Status.CHANGED, "would make the database user slurm (a new password, made on this machine)")
        yield Item("slurmdbd_conf", Status.CHANGED, f"would write {SLURMDBD_CONF} (0600, slurm)")
        yield Item("slurmdbd", Status.CHANGED, "would start slurmdbd")
        return
    yield _database(ctx, password, origin)
    wanted = conf_text(ctx, password)
    conf_changed = current != wanted
    if conf_changed:
        remote.put_secret(SLURMDBD_CONF, wanted.encode(), mode="0600", owner="slurm", group="slurm")
        yield Item("slurmdbd_conf", Status.CHANGED, f"{'would write' if ctx.dry_run else 'wrote'} {SLURMDBD_CONF} (0600, slurm)")
    else:
        yield Item("slurmdbd_conf", Status.OK, f"{SLURMDBD_CONF} (0600, slurm)")
    daemon = list(keep_up(ctx, SLURMDBD, conf_changed))
    yield from daemon
    if ctx.dry_run or any(i.status is Status.FAILED for i in daemon):
        return
    yield _register(ctx)


def _password(ctx: Context, current: str | None) -> tuple[str | None, str]:
    """The password and where it came from: the controller's file, this machine's copy, or new."""
    path = password_path(ctx.inv)
    held = _PASS_LINE.search(current or "")
    copy = path.read_text().strip() if path.exists() else None
    if held and _PASSWORD.fullmatch(held.group(1)):
        if copy != held.group(1) and not ctx.dry_run:
            _save(path, held.group(1))
        return held.group(1), "the controller's"
    if copy and _PASSWORD.fullmatch(copy):
        return copy, "this machine's copy"
    if ctx.dry_run:
        return None, ""
    made = secrets.token_hex(PASSWORD_BYTES)
    _save(path, made)
    return made, f"made on this machine, kept in {path}"


def _save(path: Path, password: str) -> None:
    path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    os.chmod(path.parent, 0o700)
    atomic.write_text(path, password + "\n", mode=0o600)


def _database(ctx: Context, password: str, origin: str) -> Item:
    """The database and its user, with this password (compared by hash, set through stdin)."""
    remote = ctx.remote
    look = (f"SELECT authentication_string FROM mysql.user WHERE User='{DB_USER}' AND Host='localhost'; "
            f"SELECT COUNT(*) FROM information_schema.SCHEMATA WHERE SCHEMA_NAME='{DATABASE}';")
    seen = remote.run(f"mysql --batch --skip-column-names -e {q(look)}", sudo=True, check=False)
    if seen.exited != 0:
        return Item("database", Status.FAILED, f"MariaDB did not answer: {(seen.stderr.strip().splitlines() or ['no output'])[-1]}")
    rows = seen.stdout.split()
    if rows == [native_hash(password), "1"]:
        return Item("database", Status.OK, f"{DATABASE}, user {DB_USER} (password: {origin.split(',')[0]})")
    if ctx.dry_run:
        return Item("database", Status.CHANGED, f"would set up {DATABASE} and its user {DB_USER}")
    sql = (f"CREATE DATABASE IF NOT EXISTS {DATABASE};\n"
           f"CREATE USER IF NOT EXISTS '{DB_USER}'@'localhost' IDENTIFIED BY '{password}';\n"
           f"ALTER USER '{DB_USER}'@'localhost' IDENTIFIED BY '{password}';\n"
           f"GRANT ALL ON {DATABASE}.* TO '{DB_USER}'@'localhost';\n")
    exited, stderr = remote.feed("mysql --batch", sql.encode(), sudo=True)
    if exited != 0:
        return Item("database", Status.FAILED, f"setting up {DATABASE}: {(stderr.strip().splitlines() or ['no output'])[-1]}")
    return Item("database", Status.CHANGED, f"{DATABASE} and its user {DB_USER} (password: {origin})")


def _register(ctx: Context) -> Item:
    """The cluster, the account, the inventory's user and the people of [users] in slurmdbd
    (sacctmgr, idempotent).  The inventory's user is the teacher: a Slurm operator, who may hold,
    requeue or cancel anyone's job; the others can touch their own jobs only."""
    inv, remote = ctx.inv, ctx.remote
    users = [inv.user, *(u.name for u in inv.users)]
    # A new slurmdbd makes its tables before it listens: seconds on a Pi.
    deadline = time.monotonic() + ANSWER_WAIT
    while (ping := remote.run("sacctmgr --noheader --parsable2 list cluster format=Cluster", sudo=True, check=False)).exited != 0:
        if time.monotonic() > deadline:
            why = (ping.stderr.strip().splitlines() or ["no answer"])[-1]
            return Item("registered", Status.FAILED, f"slurmdbd does not answer after {ANSWER_WAIT:.0f} s ({why}): see {SLURMDBD.log}")
        time.sleep(1.0)
    have = {
        "cluster": remote.run(f"sacctmgr --noheader --parsable2 list cluster {q(inv.name)} format=Cluster", sudo=True, check=False),
        "account": remote.run(f"sacctmgr --noheader --parsable2 list account {q(ACCOUNT)} format=Account", sudo=True, check=False),
        "users": remote.run(f"sacctmgr --noheader --parsable2 list association account={q(ACCOUNT)} cluster={q(inv.name)} format=User",
                            sudo=True, check=False),
        "operator": remote.run(f"sacctmgr --noheader --parsable2 list user {q(inv.user)} format=AdminLevel", sudo=True, check=False),
    }
    broken = next((r for r in have.values() if r.exited != 0), None)
    if broken is not None:
        return Item("registered", Status.FAILED, f"sacctmgr: {(broken.stderr.strip().splitlines() or ['no answer'])[-1]}")
    todo = []
    if inv.name not in have["cluster"].stdout.split():
        todo.append(f"sacctmgr --immediate add cluster {q(inv.name)}")
    if ACCOUNT not in have["account"].stdout.split():
        todo.append(f"sacctmgr --immediate add account {q(ACCOUNT)} cluster={q(inv.name)} Description='picluster users' Organization=picluster")
    missing = [u for u in users if u not in have["users"].stdout.split()]
    todo += [f"sacctmgr --immediate add user {q(u)} account={q(ACCOUNT)} cluster={q(inv.name)}" for u in missing]
    if have["operator"].stdout.strip() not in ("Operator", "Administrator"):
        todo.append(f"sacctmgr --immediate modify user {q(inv.user)} set AdminLevel=Operator")
    what = f"cluster {inv.name}, account {ACCOUNT}, users {', '.join(users)} ({inv.user} an operator)"
    if not todo:
        return Item("registered", Status.OK, what)
    return action_item(ctx, "registered", " && ".join(todo), f"registered {what}")
