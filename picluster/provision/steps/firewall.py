"""Step 9, firewall: nftables table `inet picluster` from nfs/picluster.nft.j2.

TensorFlow's servers have no authentication and execute any graph they are sent (its
SECURITY.md), so the TensorFlow ports, the all-reduce's, the node agent's and NFS's (2049, 111
and mountd's fixed port) accept only the cluster subnet and the coordinator; everything else, SSH included,
is left alone.  The coordinator is the address the node sees this SSH session come from: with
`subnet` omitted the cluster's range is the nodes' own, and a coordinator elsewhere on the LAN
would otherwise be dropped (`top` and `run` time out).
"""

import ipaddress

from picluster.model.inventory import ALLREDUCE_PORTS
from picluster.provision import templates
from picluster.provision.result import Item, Status
from picluster.provision.steps import NO_SYSTEMD, Context, action_item, file_item, managed_line, slurm
from picluster.provision.steps.nfs import MOUNTD_PORT

RULES = "/etc/nftables.d/picluster.nft"
MAIN = "/etc/nftables.conf"
INCLUDE = 'include "/etc/nftables.d/*.nft"'
NFS_PORTS = (111, 2049, MOUNTD_PORT)


def ports(tf_port: int, agent_port: int, extra_tcp: tuple[int | str, ...] = ()) -> tuple[list[int | str], list[int]]:
    """TCP and UDP ports (or "a-b" ranges) admitted from the cluster and the coordinator only."""
    allreduce = f"{ALLREDUCE_PORTS[0]}-{ALLREDUCE_PORTS[1]}"  # a sync run's workers' listeners
    tcp: list[int | str] = [*sorted({tf_port, tf_port + 1, agent_port, *NFS_PORTS}), allreduce, *extra_tcp]
    udp = sorted(NFS_PORTS)
    return tcp, udp


def template_vars(inv) -> dict[str, object]:
    """picluster.nft.j2's variables (Ansible's inventory carries the same); lists render as "a, b"."""
    tcp, udp = ports(inv.tf_port, inv.agent_port, tuple(slurm.firewall_ports(inv)))
    return {
        "subnet": str(inv.cluster_subnet),
        "tcp_ports": tcp,
        "udp_ports": udp,
    }


def coordinator(seen: str, inv) -> str:
    """The coordinator as the rules name it: the IPv4 address a node saw, else the subnet again
    (an IPv6 or unknown source: the cluster's addresses only)."""
    try:
        return str(ipaddress.IPv4Address(seen))
    except ValueError:
        return str(inv.cluster_subnet)


def rules_text(inv, seen: str) -> str:
    return templates.render("picluster.nft.j2", **template_vars(inv), coordinator=coordinator(seen, inv))


def run(ctx: Context):
    remote = ctx.remote
    rules = file_item(ctx, "rules", RULES, rules_text(ctx.inv, ctx.facts.coordinator))
    who = coordinator(ctx.facts.coordinator, ctx.inv)
    admitted = str(ctx.inv.cluster_subnet) + ("" if who == str(ctx.inv.cluster_subnet) else f" and {who}")
    yield Item(rules.name, rules.status, f"{rules.detail} (admits {admitted})")
    main = remote.read(MAIN)
    wanted = managed_line(main or "#!/usr/sbin/nft -f\n", INCLUDE, lambda line: line.strip() == INCLUDE)
    yield file_item(ctx, "include", MAIN, wanted, mode="0755", current=main)
    live = remote.ok("nft list table inet picluster >/dev/null", sudo=True)
    if live and rules.status is Status.OK:
        yield Item("active", Status.OK, "table inet picluster loaded")
    else:
        yield action_item(ctx, "active", f"nft -f {RULES}", "load table inet picluster (nft -f)")
    if not ctx.facts.systemd:
        yield Item("at_boot", Status.SKIPPED, NO_SYSTEMD)
    elif remote.ok("systemctl is-enabled --quiet nftables"):
        yield Item("at_boot", Status.OK, "nftables.service enabled")
    else:
        yield action_item(ctx, "at_boot", "systemctl enable nftables", "enable nftables.service")
