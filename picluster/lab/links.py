"""Faults and limits on a test host's link: cut it, black-hole it, or shape it with tc.

Cutting ("down") sets the bridge end of the host's veth down, as a pulled cable.  Black-holing
("drop") adds the veth to a set in the lab's own nftables table in the *bridge* family of the
root namespace: every frame to or from the host vanishes while its link stays up.  Neither
touches the host's own nftables ruleset, which provisioning owns.

Shaping puts the same qdisc on both ends of the link, so each direction is limited: rate with
tbf, and delay or loss with netem.  This machine's kernel has no netem (CONFIG_NET_SCH_NETEM is
not set), so delay and loss fail here with a clear error while rate works.
"""

import json
import re

from picluster.lab import commands, netns
from picluster.util.errors import ClusterError, UsageError

HOW = ("down", "drop")

_RATE = re.compile(r"^(\d+(?:\.\d+)?)(bit|kbit|mbit|gbit)$")
_UNIT = {"bit": 1, "kbit": 1_000, "mbit": 1_000_000, "gbit": 1_000_000_000}
_DELAY = re.compile(r"^\d+(?:\.\d+)?(?:us|ms|s)$")
_LOSS = re.compile(r"^\d+(?:\.\d+)?%$")


# -- reachability ------------------------------------------------------------------------------


def _table_script(table: str) -> str:
    return f"""\
table bridge {table} {{
    set blocked {{ type ifname; }}
    chain forward {{
        type filter hook forward priority 0; policy accept;
        iifname @blocked drop
        oifname @blocked drop
    }}
    chain input {{ type filter hook input priority 0; policy accept; iifname @blocked drop; }}
    chain output {{ type filter hook output priority 0; policy accept; oifname @blocked drop; }}
}}
"""


def _has_table(table: str) -> bool:
    return commands.run(["nft", "list", "table", "bridge", table], check=False).returncode == 0


def block(table: str, veth: str) -> None:
    if not _has_table(table):
        commands.run(["nft", "-f", "-"], input=_table_script(table))
    commands.run(["nft", "add", "element", "bridge", table, "blocked", f'{{ "{veth}" }}'])


def unblock(table: str, veth: str) -> None:
    if veth in blocked(table):
        commands.run(["nft", "delete", "element", "bridge", table, "blocked", f'{{ "{veth}" }}'])


def blocked(table: str) -> set[str]:
    proc = commands.run(["nft", "-j", "list", "set", "bridge", table, "blocked"], check=False)
    if proc.returncode != 0:
        return set()
    for item in json.loads(proc.stdout).get("nftables", []):
        if "set" in item:
            return set(item["set"].get("elem", []))
    return set()


def delete_table(table: str) -> None:
    if _has_table(table):
        commands.run(["nft", "delete", "table", "bridge", table])


def tables() -> list[str]:
    """Names of all bridge-family nftables tables in the root namespace."""
    proc = commands.run(["nft", "list", "tables", "bridge"], check=False)
    return [line.split()[-1] for line in proc.stdout.splitlines() if line.startswith("table bridge ")]


# -- shaping ---------------------------------------------------------------------------------


def parse_rate(rate: str) -> int:
    """tc's bit-rate units only ("100mbit"): bits per second."""
    match = _RATE.match(rate.strip().lower())
    if not match:
        raise UsageError(f"rate {rate!r} must look like 100mbit, 500kbit or 1gbit")
    bits = float(match.group(1)) * _UNIT[match.group(2)]
    if bits < 8_000:
        raise UsageError(f"rate {rate!r} is below 8kbit")
    return int(bits)


def qdisc_args(rate: str | None, delay: str | None, loss: str | None) -> list[str]:
    if rate is None and delay is None and loss is None:
        raise UsageError("shape needs a rate, a delay or a loss")
    if delay is not None and not _DELAY.match(delay):
        raise UsageError(f"delay {delay!r} must look like 0.3ms, 20ms or 100us")
    if loss is not None and not _LOSS.match(loss):
        raise UsageError(f"loss {loss!r} must look like 1% or 0.5%")
    if delay is None and loss is None:
        assert rate is not None  # one of the three is given
        bits = parse_rate(rate)
        # tbf needs a bucket of at least one timer tick's worth of bytes; 10 ms at the rate, or
        # 32 KiB, whichever is more, keeps it accurate at Pi-like rates.
        burst = max(32 * 1024, bits // 8 // 100)
        return ["tbf", "rate", rate, "burst", str(burst), "latency", "100ms"]
    args = ["netem"]
    if delay is not None:
        args += ["delay", delay]
    if loss is not None:
        args += ["loss", loss]
    if rate is not None:
        parse_rate(rate)
        args += ["rate", rate]
    return args


def shape(veth: str, host_netns: str, rate: str | None, delay: str | None, loss: str | None) -> None:
    args = qdisc_args(rate, delay, loss)
    for prefix in (["tc"], ["ip", "netns", "exec", host_netns, "tc"]):
        dev = veth if prefix == ["tc"] else netns.HOST_IFACE
        proc = commands.run([*prefix, "qdisc", "replace", "dev", dev, "root", *args], check=False)
        if proc.returncode != 0:
            if args[0] == "netem" and "unknown" in proc.stderr.lower():
                raise ClusterError(
                    "delay and loss need tc netem, which this kernel lacks (CONFIG_NET_SCH_NETEM); "
                    "only rate can be shaped here"
                )
            raise ClusterError(f"tc on {dev} of {host_netns} failed: {commands.last_line(proc.stderr)}")


def netem_supported(host_netns: str) -> bool:
    """Whether this kernel has tc netem (tried on the host's loopback, then removed)."""
    tc = ["ip", "netns", "exec", host_netns, "tc", "qdisc"]
    proc = commands.run([*tc, "add", "dev", "lo", "root", "netem", "delay", "0ms"], check=False)
    if proc.returncode != 0:
        return False
    commands.run([*tc, "del", "dev", "lo", "root"], check=False)
    return True


def unshape(veth: str, host_netns: str) -> None:
    for prefix, dev in ((["tc"], veth), (["ip", "netns", "exec", host_netns, "tc"], netns.HOST_IFACE)):
        # Deleting the default qdisc fails harmlessly: there was nothing to undo.
        commands.run([*prefix, "qdisc", "del", "dev", dev, "root"], check=False)


def qdisc(veth: str) -> str:
    """The root qdisc on the bridge end of a host's link, as tc prints it ("" for the default)."""
    proc = commands.run(["tc", "qdisc", "show", "dev", veth, "root"], check=False)
    line = proc.stdout.strip().splitlines()[0] if proc.stdout.strip() else ""
    kind = line.split()[1] if len(line.split()) > 1 else ""
    return "" if kind in ("noqueue", "pfifo_fast", "fq_codel", "") else line
