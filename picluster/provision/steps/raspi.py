"""Step 3, the raspi-config settings of the thesis: SSH on, GPU memory to the minimum, wait for
network; with [slurm], the memory cgroup on the kernel command line.

`raspi-config nonint` is used where the function exists; otherwise the files or units are edited.
Its get_* functions print 0 when a setting is ON.
"""

import re

from picluster.provision.result import Item, Status
from picluster.provision.steps import NO_SYSTEMD, NOT_A_PI, Context, action_item, file_item

GPU_MEM = 16
# A Pi's kernel leaves the memory cgroup off unless its command line turns it on; Slurm's memory
# accounting and limits need it.
CGROUP_MEMORY = ("cgroup_enable=memory", "cgroup_memory=1")
_GPU = re.compile(r"^\s*gpu_mem\s*=")
_SECTION = re.compile(r"^\s*\[([^\]]*)\]")


def gpu_mem_text(text: str | None, value: int = GPU_MEM) -> str:
    """config.txt with gpu_mem=value in effect for every board ([all] or before any section)."""
    lines = (text or "").splitlines()
    section, out, placed = "all", [], False
    for line in lines:
        m = _SECTION.match(line)
        if m:
            section = m.group(1).strip().lower()
        if _GPU.match(line) and section == "all":
            if not placed:
                out.append(f"gpu_mem={value}")
                placed = True
            continue
        out.append(line)
    if not placed:
        if section != "all":
            out.append("[all]")
        out.append(f"gpu_mem={value}")
    return "\n".join(out) + "\n"


def cmdline_text(text: str | None) -> str:
    """cmdline.txt (one line of words) with the memory cgroup on: its words kept in order, a
    cgroup_disable=memory dropped, the missing CGROUP_MEMORY words added at the end."""
    words = [w for w in (text or "").split() if w != "cgroup_disable=memory"]
    words += [w for w in CGROUP_MEMORY if w not in words]
    return " ".join(words) + "\n"


def _has_function(ctx: Context, function: str) -> bool:
    return bool(ctx.facts.raspi_config) and ctx.remote.ok(f"grep -q '^{function}()' {ctx.facts.raspi_config}")


def run(ctx: Context):
    yield _ssh(ctx)
    yield _gpu_mem(ctx)
    yield _wait_network(ctx)
    if ctx.inv.slurm is not None:
        yield _cgroup_memory(ctx)


def _ssh(ctx: Context) -> Item:
    if _has_function(ctx, "do_ssh"):
        if ctx.remote.out("raspi-config nonint get_ssh", sudo=True) == "0":
            return Item("ssh", Status.OK, "enabled")
        return action_item(ctx, "ssh", "raspi-config nonint do_ssh 0", "enable SSH (raspi-config)")
    if ctx.facts.systemd:
        if ctx.remote.ok("systemctl is-enabled --quiet ssh"):
            return Item("ssh", Status.OK, "enabled")
        return action_item(ctx, "ssh", "systemctl enable ssh", "enable ssh.service")
    return Item("ssh", Status.SKIPPED, f"{NO_SYSTEMD}; sshd answers")


def _gpu_mem(ctx: Context) -> Item:
    if not ctx.facts.is_pi:
        return Item("gpu_mem", Status.SKIPPED, NOT_A_PI)
    path = f"{ctx.facts.boot_dir}/config.txt"
    current = ctx.remote.read(path)
    wanted = gpu_mem_text(current)
    if current == wanted:
        return Item("gpu_mem", Status.OK, f"gpu_mem={GPU_MEM} in {path}")
    if _has_function(ctx, "do_memory_split"):  # gone from raspi-config on bookworm
        return action_item(ctx, "gpu_mem", f"raspi-config nonint do_memory_split {GPU_MEM}", f"set gpu_mem={GPU_MEM}")
    return file_item(ctx, "gpu_mem", path, wanted, current=current)


def _cgroup_memory(ctx: Context) -> Item:
    if not ctx.facts.is_pi:
        return Item("cgroup_memory", Status.SKIPPED, NOT_A_PI)
    path = f"{ctx.facts.boot_dir}/cmdline.txt"
    current = ctx.remote.read(path)
    if not (current or "").strip():
        return Item("cgroup_memory", Status.FAILED, f"{path} is missing or empty: the kernel command line cannot be edited")
    wanted = cmdline_text(current)
    if current == wanted:
        return Item("cgroup_memory", Status.OK, f"memory cgroup on in {path}")
    item = file_item(ctx, "cgroup_memory", path, wanted, current=current)
    return Item(item.name, item.status, f"{item.detail}: memory cgroup on from the next boot")


def _wait_network(ctx: Context) -> Item:
    """Boot waits for the network (the NFS mount needs it), through the network manager in use:
    NetworkManager (Raspberry Pi OS bookworm), systemd-networkd, ifupdown, or raspi-config's
    do_boot_wait for dhcpcd (bullseye).  Facts name the one that runs; none is assumed."""
    unit, network = ctx.facts.wait_online, ctx.facts.network or "no network service found"
    if unit:
        if ctx.remote.ok(f"systemctl is-enabled --quiet {unit}"):
            return Item("wait_network", Status.OK, f"{unit} enabled ({network})")
        return action_item(ctx, "wait_network", f"systemctl enable {unit}", f"enable {unit} ({network})")
    if _has_function(ctx, "do_boot_wait"):
        if ctx.remote.out("raspi-config nonint get_boot_wait", sudo=True) == "0":
            return Item("wait_network", Status.OK, f"boot waits for network ({network})")
        return action_item(ctx, "wait_network", "raspi-config nonint do_boot_wait 0", f"wait for network at boot ({network})")
    if not ctx.facts.systemd:
        return Item("wait_network", Status.SKIPPED, NO_SYSTEMD)
    return Item("wait_network", Status.SKIPPED, f"{network}: no wait-online unit for it, no raspi-config do_boot_wait")
