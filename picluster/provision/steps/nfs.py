"""Steps 5 and 6: the NFS server on the master, the NFS clients everywhere.

The files come from the top-level nfs/ templates.  Exports, service restarts and mounts need
NFS in the kernel: without it (no nfsd/nfs in /proc/filesystems and no module for it) they are
reported `skipped (no NFS support in this kernel)`, never as done.
"""

from picluster.provision import templates
from picluster.provision.result import Item, Status
from picluster.provision.steps import NO_NFS, Context, action_item, file_item, managed_line, q

SHARE_MODE = "775"  # the cluster user and its group write; never 777
MIN_THREADS = 8  # nfs-kernel-server's default
MOUNTD_PORT = 20048


def nfsd_threads(node_count: int) -> int:
    """At least one nfsd thread per node: the default 8 did not serve the thesis's 16 clients."""
    return max(MIN_THREADS, node_count)


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
    changed = []
    current = remote.read("/etc/exports")
    exports = managed_line(current, exports_line(ctx), _first_field(share))
    for item in (
        file_item(ctx, "exports", "/etc/exports", exports, current=current),
        file_item(
            ctx, "defaults", "/etc/default/nfs-kernel-server",
            templates.render("nfs-kernel-server.j2", nfsd_threads=nfsd_threads(len(inv.nodes)), mountd_port=MOUNTD_PORT),
        ),
        file_item(ctx, "sunrpc", "/etc/modprobe.d/sunrpc.conf", templates.render("sunrpc.conf.j2")),
    ):
        if item.status is Status.CHANGED:
            changed.append(item.name)
        yield item
    if not ctx.facts.nfs_server_kernel:
        yield Item("exportfs", Status.SKIPPED, NO_NFS)
        yield Item("service", Status.SKIPPED, NO_NFS)
        return
    if "exports" in changed:
        yield action_item(ctx, "exportfs", "exportfs -ra", "re-export (exportfs -ra)")
    else:
        yield Item("exportfs", Status.OK, "exports unchanged")
    restart = "systemctl restart nfs-server" if ctx.facts.systemd else "service nfs-kernel-server restart"
    if {"defaults", "sunrpc"} & set(changed):
        yield action_item(ctx, "service", restart, "restart the NFS server")
    elif ctx.facts.systemd and not remote.ok("systemctl is-active --quiet nfs-server"):
        yield action_item(ctx, "service", "systemctl start nfs-server", "start the NFS server")
    else:
        yield Item("service", Status.OK, "running, configuration unchanged")


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
    if not ctx.facts.nfs_client_kernel:
        yield Item("mount", Status.SKIPPED, NO_NFS)
        return
    source = f"{ctx.master_address}:{inv.share_dir}"
    mounted = remote.run(f"findmnt -n -o SOURCE --mountpoint {q(mnt)}", check=False).stdout.strip()
    if mounted == source:
        yield Item("mount", Status.OK, f"{source} on {mnt}")
    else:
        yield action_item(ctx, "mount", f"mount {q(mnt)}", f"mount {source} on {mnt}", timeout=120)
