"""Step 7, SSH: the coordinator's key on every node; password login off once key login works."""

from picluster.provision.result import Item, Status
from picluster.provision.steps import NO_SYSTEMD, Context, action_item, file_item

# sshd keeps the first value it reads and reads sshd_config.d/*.conf in order, so "00-" wins.
DROP_IN = "/etc/ssh/sshd_config.d/00-picluster.conf"
DROP_IN_TEXT = (
    "# Managed by picluster: key logins only.\n"
    "PasswordAuthentication no\n"
    "KbdInteractiveAuthentication no\n"
)


def run(ctx: Context):
    remote = ctx.remote
    key = ctx.shared.public_key
    if key is None:
        yield Item("authorized_key", Status.SKIPPED, "no public key (set cluster.ssh_key; KEY.pub or the key itself)")
    else:
        body = key.split()[1]
        current = remote.read(".ssh/authorized_keys", sudo=False) or ""
        if any(len(line.split()) > 1 and body in line.split() for line in current.splitlines()):
            yield Item("authorized_key", Status.OK, "~/.ssh/authorized_keys")
        elif ctx.dry_run:
            yield Item("authorized_key", Status.CHANGED, "would add the coordinator's key")
        else:
            text = current + ("" if not current or current.endswith("\n") else "\n") + key + "\n"
            remote.upload(text, ".ssh/authorized_keys.picluster-new")
            remote.run(
                "mkdir -p .ssh && chmod 700 .ssh && chmod 600 .ssh/authorized_keys.picluster-new"
                " && mv -f .ssh/authorized_keys.picluster-new .ssh/authorized_keys"
            )
            yield Item("authorized_key", Status.CHANGED, "added the coordinator's key")
    # This session logged in with a key and never with a password (provisioning has none), so
    # key login works: password login can go.
    if not remote.ok("grep -Eiq '^[[:space:]]*Include[[:space:]]+/etc/ssh/sshd_config.d/' /etc/ssh/sshd_config", sudo=True):
        yield Item("password_login", Status.FAILED, "/etc/ssh/sshd_config does not include sshd_config.d/*.conf")
        return
    item = file_item(ctx, "password_login", DROP_IN, DROP_IN_TEXT)
    yield item
    if item.status is not Status.CHANGED:
        yield Item("reload", Status.OK, "nothing to reload")
    elif ctx.facts.systemd:
        yield action_item(ctx, "reload", "systemctl reload ssh", "reload sshd")
    elif remote.ok("test -s /run/sshd.pid", sudo=True):
        yield action_item(ctx, "reload", "kill -HUP $(cat /run/sshd.pid)", "reload sshd (SIGHUP)")
    else:
        yield Item("reload", Status.SKIPPED, f"{NO_SYSTEMD} and no /run/sshd.pid: sshd reads it when it next starts")
