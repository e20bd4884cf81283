"""`python -m picluster.lab.vm`: the VM image, and timed VM boots on a scratch bridge (root).

    python -m picluster.lab.vm image [--rebuild]     build (once) or check the cached image
    python -m picluster.lab.vm try --nodes 3         boot 3 VMs, time them, tear everything down
    python -m picluster.lab.vm try --nodes 1 --reboot node01

Until `picluster lab up --vm` exists (phase 2 of issue #11) this is how VMs are tried by hand;
VM-NOTES.md's measurements were taken with it.
"""

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

from picluster.errors import PiclusterError, UsageError
from picluster.lab.vm import image as image_mod
from picluster.lab.vm import support
from picluster.lab.vm.fleet import Fleet, say_stderr
from picluster.lab.vm.scratch import ScratchNet


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m picluster.lab.vm")
    sub = parser.add_subparsers(dest="command", required=True)
    img = sub.add_parser("image", help="build the VM image if missing (or --rebuild), then check it")
    img.add_argument("--rebuild", action="store_true")
    run = sub.add_parser("try", help="boot VMs on a scratch bridge, print timings, delete them")
    run.add_argument("--nodes", type=int, default=1)
    run.add_argument("--timeout", type=float, default=600.0)
    run.add_argument("--reboot", metavar="NAME", help="also time `sudo reboot` of this VM")
    run.add_argument("--hold", type=float, default=0.0, help="seconds to keep them up before deleting")
    args = parser.parse_args(argv)
    try:
        if args.command == "image":
            return _image(args.rebuild)
        return _try(args.nodes, args.timeout, args.reboot, args.hold)
    except PiclusterError as exc:
        print(f"picluster: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        return 130


def _image(rebuild: bool) -> int:
    if os.geteuid() != 0:
        raise UsageError("the VM image is built and kept by root (debootstrap): run as root")
    started = time.monotonic()
    image = image_mod.ensure(say=say_stderr, rebuild=rebuild)
    elapsed = time.monotonic() - started
    sizes = {name: info["size"] for name, info in image.manifest["files"].items()}
    print(f"image {image.hash}: {image.dir}")
    print(f"kernel {image.kernel_release}, built {image.manifest['built']} in {image.manifest['build_seconds']} s")
    print(f"sizes: {', '.join(f'{n} {s / 1e6:.0f} MB' for n, s in sizes.items())} (root.img is sparse)")
    print(f"ensure() took {elapsed:.1f} s")
    return 0


def _try(nodes: int, timeout: float, reboot: str | None, hold: float) -> int:
    # Fleet.up checks these too; here they come before the scratch bridge is made.
    support.require_support()
    support.check_memory(nodes)
    root = image_mod.cache_root() / "runs"
    root.mkdir(parents=True, exist_ok=True)
    run_dir = Path(tempfile.mkdtemp(prefix="try-", dir=root))
    total = time.monotonic()
    with ScratchNet(run_dir) as net:
        fleet = Fleet(net.vms(nodes), net.user, net.key_path, net.known_hosts_path)
        try:
            fleet.up(timeout=timeout)
            up = time.monotonic() - total
            print(f"bridge {net.bridge} {net.subnet}; accelerator {fleet.accel.describe()}")
            for key in ("image", "accel", "prepare"):
                print(f"{key}: {fleet.timings[key]:.1f} s")
            for vm in fleet.vms:
                print(f"{vm.name} {vm.address}: SSH {fleet.timings[vm.name]:.1f} s after its qemu started")
            print(f"all up: {up:.1f} s after the command started")
            for name, rss in fleet.memory().items():
                print(f"{name}: qemu RSS {rss / (1 << 20):.0f} MiB")
            if reboot:
                print(f"{reboot}: back {fleet.reboot(reboot, timeout):.1f} s after `sudo reboot`")
                print(f"{reboot}: qemu RSS {fleet.memory()[reboot] / (1 << 20):.0f} MiB after the reboot")
            if hold:
                time.sleep(hold)
        finally:
            started = time.monotonic()
            fleet.down()
            print(f"down: {time.monotonic() - started:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
