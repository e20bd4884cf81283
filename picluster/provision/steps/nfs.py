"""Steps 5 and 6: the NFS server on the NFS master, the NFS client on every node (the master too).

What is configured is read back from the running kernel, so a file written is never reported as
the state in force:
- server: nfsd's threads (/proc/fs/nfsd/threads), mountd's port (rpcinfo), the export
  (exportfs -v), nfs-server enabled and active.  A running server whose threads or mountd port
  differ from the configuration is restarted;
- client: the sunrpc slot table (/proc/sys/sunrpc/tcp_slot_table_entries), the mount (findmnt).

Where nfs-utils reads /etc/nfs.conf.d (it ships `nfsconf`: Debian 12, Raspberry Pi OS bookworm)
the server's settings go there; /etc/default/nfs-kernel-server is read by no unit of bookworm's.
Where it has no `nfsconf` (bullseye, nfs-utils 1.3) they go to /etc/default/nfs-kernel-server,
which bullseye's nfs-config unit reads.  Either way the read-back says whether they took.
The slot table is an NFS *client* transport setting: set as a module option (sunrpc as a module,
Debian's kernels) and as a sysctl (sunrpc built in, Raspberry Pi kernels), and now.

Without NFS in the kernel (no nfsd/nfs in /proc/filesystems and no module for it) what needs the
kernel is reported `skipped (no NFS support in this kernel)`, never as done.
"""

from picluster.provision import templates
from picluster.provision.result import Item, Status
from picluster.provision.steps import NO_NFS, NO_SYSTEMD, Context, action_item, file_item, managed_line, q

SHARE_MODE = "775"  # the cluster user and its group write; never 777
MIN_THREADS = 8  # nfs-kernel-server's default
MOUNTD_PORT = 20048
SLOT_TABLE_ENTRIES = 128
NFS_CONF = "/etc/nfs.conf.d/picluster.conf"
LEGACY_DEFAULTS = "/etc/default/nfs-kernel-server"
SUNRPC_MODPROBE = "/etc/modprobe.d/sunrpc.conf"
SUNRPC_SYSCTL = "/etc/sysctl.d/60-picluster-sunrpc.conf"
THREADS = "/proc/fs/nfsd/threads"
SLOTS = "/proc/sys/sunrpc/tcp_slot_table_entries"
MAX_SLOTS = "/proc/sys/sunrpc/tcp_max_slot_table_entries"
SERVER_CHECKS = ("exportfs", "enabled", "service", "threads", "mountd", "export")


def nfsd_threads(node_count: int) -> int:
    """At least one nfsd thread per node: the default 8 did not serve the thesis's 16 clients."""
    return max(MIN_THREADS, node_count)


def threads_wanted(ctx: Context) -> int:
    return ctx.options.nfsd_threads or nfsd_threads(len(ctx.inv.nodes))


def exports_line(ctx: Context) -> str:
    return templates.render("exports.j2", share_dir=ctx.inv.share_dir, subnet=ctx.inv.cluster_subnet).strip()


def fstab_line(ctx: Context) -> str:
    return templates.render(
        "fstab.j2", nfs_server=ctx.master_address, share_dir=ctx.inv.share_dir, data_dir=ctx.inv.data_dir
    ).strip()


def _first_field(value: str, index: int = 0):
    def same(line: str) -> bool:
        fields = line.split()
        return len(fields) > index and not line.lstrip().startswith("#") and fields[index] == value

    return same


def server(ctx: Context):
    if not ctx.is_master:
        yield Item("server", Status.SKIPPED, f"not the NFS master, {ctx.inv.nfs_master} is")
        return
    inv, remote = ctx.inv, ctx.remote
    share = str(inv.share_dir)
    group = remote.out(f"id -gn {q(inv.user)}")
    wanted = f"{inv.user}:{group} {SHARE_MODE}"
    have = remote.out(f"stat -c '%U:%G %a' {q(share)} 2>/dev/null || true", sudo=True)
    if have == wanted:
        yield Item("share_dir", Status.OK, f"{share} {wanted}")
    else:
        yield action_item(
            ctx, "share_dir",
            f"mkdir -p {q(share)} && chown {q(inv.user)}:{q(group)} {q(share)} && chmod {SHARE_MODE} {q(share)}",
            f"make {share} {wanted}",
        )  # fmt: skip
    current = remote.read("/etc/exports")
    exports = file_item(ctx, "exports", "/etc/exports", managed_line(current, exports_line(ctx), _first_field(share)), current=current)
    yield exports
    config = _config_item(ctx)
    yield config
    if not ctx.facts.nfs_server_kernel:
        for name in SERVER_CHECKS:
            yield Item(name, Status.SKIPPED, NO_NFS)
        return
    if exports.status is Status.CHANGED:
        yield action_item(ctx, "exportfs", "exportfs -ra", "re-export (exportfs -ra)")
    else:
        yield Item("exportfs", Status.OK, "exports unchanged")
    yield _enabled(ctx)
    service = _service(ctx, config.status is Status.CHANGED)
    yield service
    if ctx.dry_run and service.status is Status.CHANGED:
        return  # nothing restarted, so nothing new to read back
    yield from _read_back(ctx)


def _config_item(ctx: Context) -> Item:
    """nfsd threads and mountd's port, where this node's nfs-utils reads them."""
    values = {"nfsd_threads": threads_wanted(ctx), "mountd_port": MOUNTD_PORT}
    if ctx.facts.nfsconf:
        item = file_item(ctx, "config", NFS_CONF, templates.render("nfs.conf.j2", **values))
        why = "nfs-utils reads /etc/nfs.conf.d"
    else:
        item = file_item(ctx, "config", LEGACY_DEFAULTS, templates.render("nfs-kernel-server.j2", **values))
        why = f"nfs-utils {ctx.facts.nfs_utils or '?'} has no nfsconf: legacy /etc/default"
    return Item(item.name, item.status, f"{item.detail} ({why})")


def _enabled(ctx: Context) -> Item:
    if not ctx.facts.systemd:
        return Item("enabled", Status.SKIPPED, NO_SYSTEMD)
    if ctx.remote.ok("systemctl is-enabled --quiet nfs-server"):
        return Item("enabled", Status.OK, "nfs-server.service enabled")
    return action_item(ctx, "enabled", "systemctl enable nfs-server", "enable nfs-server.service")


def _live(ctx: Context) -> tuple[str, set[str]]:
    """(nfsd threads, mountd's ports) as the running kernel and rpcbind say."""
    threads = ctx.remote.out(f"cat {THREADS} 2>/dev/null || echo 0", sudo=True)
    mountd = ctx.remote.out("rpcinfo -p 127.0.0.1 2>/dev/null | awk '$5 == \"mountd\" {print $4}' | sort -u || true")
    return threads, set(mountd.split())


def _service(ctx: Context, config_changed: bool) -> Item:
    threads, mountd = _live(ctx)
    if ctx.facts.systemd:
        running = ctx.remote.ok("systemctl is-active --quiet nfs-server")
        restart = "systemctl restart nfs-server nfs-mountd" if running else "systemctl start nfs-server"
    else:
        running = threads != "0"
        restart = "service nfs-kernel-server restart"
    reasons = []
    if config_changed:
        reasons.append("configuration changed")
    if not running:
        reasons.append("not running")
    elif threads != str(threads_wanted(ctx)):
        reasons.append(f"{threads} nfsd threads running")
    elif mountd != {str(MOUNTD_PORT)}:
        reasons.append(f"mountd on port {', '.join(sorted(mountd)) or 'none'}")
    if reasons:
        what = "start the NFS server" if not running else "restart the NFS server"
        return action_item(ctx, "service", restart, f"{what} ({', '.join(reasons)})")
    return Item("service", Status.OK, "running, configuration unchanged")


def _read_back(ctx: Context):
    threads, mountd = _live(ctx)
    wanted = threads_wanted(ctx)
    if threads == str(wanted):
        yield Item("threads", Status.OK, f"{threads} nfsd threads")
    else:
        source = NFS_CONF if ctx.facts.nfsconf else LEGACY_DEFAULTS
        yield Item("threads", Status.FAILED, f"nfsd runs {threads} threads, {wanted} configured in {source}")
    if mountd == {str(MOUNTD_PORT)}:
        yield Item("mountd", Status.OK, f"mountd on port {MOUNTD_PORT}")
    else:
        yield Item("mountd", Status.FAILED, f"mountd on port {', '.join(sorted(mountd)) or 'none'}, not {MOUNTD_PORT}")
    share, subnet = str(ctx.inv.share_dir), str(ctx.inv.cluster_subnet)
    exported = ctx.remote.out("exportfs -v", sudo=True).split()
    if share in exported and any(word.startswith(f"{subnet}(") for word in exported):
        yield Item("export", Status.OK, f"{share} exported to {subnet}")
    else:
        yield Item("export", Status.FAILED, f"exportfs -v does not list {share} for {subnet}")


LOOKUPCACHE = "lookupcache=pos"  # how /proc/mounts shows lookupcache=positive


def client(ctx: Context):
    inv, remote = ctx.inv, ctx.remote
    mnt = str(inv.data_dir)
    if remote.ok(f"test -d {q(mnt)}"):
        yield Item("mount_point", Status.OK, mnt)
    else:
        yield action_item(ctx, "mount_point", f"mkdir -p {q(mnt)}", f"create {mnt}")
    current = remote.read("/etc/fstab")
    fstab = managed_line(current, fstab_line(ctx), _first_field(mnt, 1))
    yield file_item(ctx, "fstab", "/etc/fstab", fstab, current=current)
    slots = {"slot_table_entries": SLOT_TABLE_ENTRIES}
    yield file_item(ctx, "sunrpc_module", SUNRPC_MODPROBE, templates.render("sunrpc.conf.j2", **slots))
    yield file_item(ctx, "sunrpc_sysctl", SUNRPC_SYSCTL, templates.render("sunrpc-sysctl.conf.j2", **slots))
    if not ctx.facts.nfs_client_kernel:
        yield Item("slot_table", Status.SKIPPED, NO_NFS)
        yield Item("mount", Status.SKIPPED, NO_NFS)
        return
    # Before the mount, so the share's transport starts with the slots.
    yield _slot_table(ctx)
    yield _mount(ctx, f"{ctx.master_address}:{inv.share_dir}", mnt)


def _mount(ctx: Context, source: str, mnt: str) -> Item:
    """The share on its mount point with the fstab line's options.  lookupcache=positive: by
    default a client caches "no such file" for up to a minute, so a file put on the share (the
    data set a first training copies to the master's export) stays invisible to a node that just
    looked for it; a remount cannot change the option, so an old mount is mounted again."""
    found = ctx.remote.run(f"findmnt -n -o SOURCE,OPTIONS --mountpoint {q(mnt)}", check=False).stdout.split()
    if not found or found[0] != source:
        return action_item(ctx, "mount", f"mount {q(mnt)}", f"mount {source} on {mnt}", timeout=120)
    if LOOKUPCACHE in found[-1].split(","):
        return Item("mount", Status.OK, f"{source} on {mnt}")
    if ctx.dry_run:
        return Item("mount", Status.CHANGED, f"would mount {source} on {mnt} again, with lookupcache=positive")
    again = ctx.remote.run(f"umount {q(mnt)} && mount {q(mnt)}", sudo=True, check=False, timeout=120)
    if again.exited == 0:
        return Item("mount", Status.CHANGED, f"mounted {source} on {mnt} again, with lookupcache=positive")
    if not ctx.remote.ok(f"findmnt -n --mountpoint {q(mnt)}"):  # unmounted, then the mount failed
        return Item("mount", Status.FAILED, f"{source} on {mnt}: {(again.stderr.strip().splitlines() or ['mount failed'])[-1]}")
    # In use (a job reads the share): it keeps its old options until it is next mounted.
    return Item("mount", Status.OK, f"{source} on {mnt} (in use: lookupcache=positive from its next mount, at the latest the next boot)")


def _slot_table(ctx: Context) -> Item:
    remote, wanted = ctx.remote, SLOT_TABLE_ENTRIES
    if not remote.ok(f"test -e {SLOTS}"):
        if ctx.dry_run:
            return Item("slot_table", Status.CHANGED, f"would load sunrpc and set {wanted} slots")
        remote.run("modprobe sunrpc", sudo=True)  # a module here: its options file applies now
    now, most = remote.out(f"cat {SLOTS}"), remote.out(f"cat {MAX_SLOTS} 2>/dev/null || echo 0")
    if int(most or 0) < wanted:
        return Item("slot_table", Status.FAILED, f"tcp_max_slot_table_entries is {most}, below {wanted}: something lowered it")
    if now == str(wanted):
        return Item("slot_table", Status.OK, f"{now} slots (max {most})")
    item = action_item(ctx, "slot_table", f"sysctl -q -w sunrpc.tcp_slot_table_entries={wanted}", f"{now} -> {wanted} slots now")
    if not ctx.dry_run and remote.out(f"cat {SLOTS}") != str(wanted):
        return Item("slot_table", Status.FAILED, f"{SLOTS} does not take {wanted}")
    return item
