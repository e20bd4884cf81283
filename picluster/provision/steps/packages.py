"""Step 4, packages: installed only when missing (dpkg-query first).  When one is missing, apt's
package lists are brought up to date first (a freshly written Raspberry Pi OS card has none:
"Unable to locate package"), then `apt-get -s` names what apt cannot install before a real install.
A node with everything installed is never asked to reach a mirror.
"""

from picluster.provision.result import Item, Status
from picluster.provision.steps import Context, q, slurm

EVERYWHERE = ("nfs-common", "python3-venv", "nftables", "gcc", "libc6-dev")  # gcc: the bind shim (cluster/shim.py) is built on the node
MASTER = ("nfs-kernel-server",)
INSTALL_TIMEOUT = 1800.0


def wanted(ctx: Context) -> list[str]:
    names = list(EVERYWHERE) + (list(MASTER) if ctx.is_master else []) + slurm.packages(ctx) + list(ctx.options.extra_packages)
    return list(dict.fromkeys(names))


def installed(ctx: Context, names: list[str]) -> set[str]:
    out = ctx.remote.run(
        "dpkg-query -W -f='${Package} ${db:Status-Status}\\n' " + " ".join(q(n) for n in names), check=False
    ).stdout
    return {line.split()[0] for line in out.splitlines() if line.split()[1:] == ["installed"]}


def run(ctx: Context):
    names = wanted(ctx)
    have = installed(ctx, names)
    missing = [n for n in names if n not in have]
    for name in names:
        if name in have:
            yield Item(name, Status.OK, "installed")
    if not missing:
        return
    args = " ".join(q(n) for n in missing)
    note = ""
    if not ctx.dry_run:
        update = ctx.remote.run("apt-get update -q", sudo=True, check=False, timeout=INSTALL_TIMEOUT)
        complaints = [line for line in (update.stderr + update.stdout).splitlines() if line.startswith(("E:", "W:"))]
        if update.exited != 0 or complaints:
            note = f"; apt-get update: {(complaints or [f'exit code {update.exited}'])[-1][2:].strip()}"
    sim = ctx.remote.run(f"apt-get -s -q install --no-install-recommends {args}", check=False)
    if sim.exited != 0:
        why = [line for line in (sim.stderr + sim.stdout).splitlines() if line.startswith("E:")]
        reason = why[0][2:].strip() if why else f"apt-get -s exit code {sim.exited}"
        for name in missing:
            yield Item(name, Status.FAILED, f"apt cannot install it: {reason} (is the package name right?{note})")
        return
    if ctx.dry_run:
        for name in missing:
            yield Item(name, Status.CHANGED, "would install")
        return
    ctx.remote.run(
        f"DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends {args}",
        sudo=True,
        timeout=INSTALL_TIMEOUT,
    )
    for name in missing:
        yield Item(name, Status.CHANGED, "installed now")
