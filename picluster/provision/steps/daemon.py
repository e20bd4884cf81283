"""A daemon as Debian packages it, kept running by provisioning: enabled at boot and started
through its systemd unit, or, on a host without init (a test host), started directly and found
again through its pid file.

    for item in keep_up(ctx, SLURMD, config_changed):   # enabled, running, restarted on change
        ...
    keep_down(ctx, SLURMDBD, "accounting is off")       # stopped and disabled where installed
"""

import time
from dataclasses import dataclass

from picluster.provision.result import Item, Status
from picluster.provision.steps import Context, action_item, q


@dataclass(frozen=True)
class Daemon:
    """One daemon as Debian packages it: its unit, and how a host without init runs it."""

    name: str  # the executable in /usr/sbin
    unit: str  # its systemd unit
    pidfile: str
    log: str
    start: str  # without systemd (as root)

    def running(self) -> str:
        """Shell test: the pid file names a live process of this executable."""
        # Debian's /usr/sbin/slurmd is an alternatives link to slurmd-wlm: compare where both lead.
        return (f"p=$(cat {self.pidfile} 2>/dev/null) && [ -n \"$p\" ] && "
                f"[ \"$(readlink /proc/$p/exe)\" = \"$(readlink -f /usr/sbin/{self.name})\" ]")

    def stop(self) -> str:
        return (f"p=$(cat {self.pidfile} 2>/dev/null); [ -n \"$p\" ] && kill \"$p\" 2>/dev/null; "
                f"for i in $(seq 50); do [ -d /proc/\"$p\" ] || break; sleep 0.2; done; rm -f {self.pidfile}")


def keep_up(ctx: Context, daemon: Daemon, config_changed: bool):
    """Items: enabled at boot (systemd), running, restarted when a file it reads changed, and up after."""
    remote, unit = ctx.remote, daemon.unit
    if ctx.facts.systemd:
        if remote.ok(f"systemctl is-enabled --quiet {unit}"):
            yield Item(f"{daemon.name}_at_boot", Status.OK, f"{unit}.service enabled")
        else:
            yield action_item(ctx, f"{daemon.name}_at_boot", f"systemctl enable {unit}", f"enable {unit}.service")
        running = remote.ok(f"systemctl is-active --quiet {unit}")
        start, restart = f"systemctl start {unit}", f"systemctl restart {unit}"
    else:
        running = remote.ok(daemon.running(), sudo=True)
        start, restart = daemon.start, f"{daemon.stop()}; {daemon.start}"
    if not running:
        yield action_item(ctx, daemon.name, start, f"start {daemon.name}")
    elif config_changed:
        yield action_item(ctx, daemon.name, restart, f"restart {daemon.name} (its configuration changed)")
    else:
        yield Item(daemon.name, Status.OK, "running, configuration unchanged")
        return
    if not ctx.dry_run and not _came_up(ctx, daemon):
        yield Item(daemon.name, Status.FAILED, f"{daemon.name} did not stay up: {_log_tail(ctx, daemon)}")


def keep_down(ctx: Context, daemon: Daemon, why: str) -> Item:
    """One item: ``daemon`` stopped and, under systemd, not started at boot, where it is installed
    (a daemon the configuration no longer uses).  ``why``: said when it had to be stopped."""
    remote, unit = ctx.remote, daemon.unit
    if not remote.ok(f"test -x /usr/sbin/{daemon.name}"):
        return Item(daemon.name, Status.OK, "not installed")
    if ctx.facts.systemd:
        up = remote.ok(f"systemctl is-active --quiet {unit}") or remote.ok(f"systemctl is-enabled --quiet {unit}")
        command = f"systemctl disable --now {unit}"
    else:
        up = remote.ok(daemon.running(), sudo=True)
        command = daemon.stop()
    if not up:
        return Item(daemon.name, Status.OK, "stopped")
    return action_item(ctx, daemon.name, command, f"stop {daemon.name}{' and disable ' + unit + '.service' if ctx.facts.systemd else ''}: {why}")


def _came_up(ctx: Context, daemon: Daemon, wait: float = 10.0) -> bool:
    test = f"systemctl is-active --quiet {daemon.unit}" if ctx.facts.systemd else daemon.running()
    deadline = time.monotonic() + wait
    while True:
        if ctx.remote.ok(test, sudo=True):
            return True
        if time.monotonic() > deadline:
            return False
        time.sleep(0.5)


def _log_tail(ctx: Context, daemon: Daemon) -> str:
    line = ctx.remote.out(f"grep -h error {q(daemon.log)} 2>/dev/null | tail -n 1 || true", sudo=True)
    return line or f"see {daemon.log}"


