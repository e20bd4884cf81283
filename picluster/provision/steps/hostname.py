"""Step 2, hostname: /etc/hostname, the 127.0.1.1 line of /etc/hosts, the live name, every node in /etc/hosts."""

import re

from picluster.model import tokens
from picluster.provision.result import Item, Status
from picluster.provision.steps import Context, action_item, file_item, managed_line, q

BEGIN = "# BEGIN picluster nodes"  # the markers Ansible's blockinfile writes (marker "# {mark} picluster nodes")
END = "# END picluster nodes"
_LOOPBACK_NAME = re.compile(r"^\s*127\.0\.1\.1\s")


def hosts_text(current: str | None, name: str, nodes) -> str:
    text = managed_line(current, f"127.0.1.1\t{tokens.config_word(name, 'node name')}", lambda line: bool(_LOOPBACK_NAME.match(line)))
    lines = text.splitlines()
    if BEGIN in lines and END in lines[lines.index(BEGIN):]:
        start = lines.index(BEGIN)
        end = lines.index(END, start)
        del lines[start : end + 1]
    word = tokens.config_word  # one field each, whatever built the Inventory
    block = [BEGIN] + [f"{word(n.address, 'node address')}\t{word(n.name, 'node name')}" for n in nodes] + [END]
    return "\n".join(lines + block) + "\n"


def run(ctx: Context):
    name = ctx.node.name
    yield file_item(ctx, "/etc/hostname", "/etc/hostname", name + "\n")
    hosts = ctx.remote.read("/etc/hosts")
    yield file_item(ctx, "/etc/hosts", "/etc/hosts", hosts_text(hosts, name, ctx.inv.nodes), current=hosts)
    live = ctx.facts.hostname  # read by the facts step; nothing since changed it
    if live == name:
        yield Item("live", Status.OK, name)
    else:
        yield action_item(ctx, "live", f"hostname {q(name)}", f"set the hostname {live} -> {name}")
