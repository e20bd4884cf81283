"""`python -m picluster.lab.vm image [--rebuild] [--arch arm64]`: build (once) or check the cached VM image (root).

`picluster lab up --vm` builds it too when there is none; this builds it ahead of time, and
rebuilds a damaged one (the one-line refusal of a damaged image names this command).
"""

import argparse
import os
import sys
import time

from picluster.lab.kinds import say_stderr
from picluster.lab.vm import image as image_mod
from picluster.util.errors import PiclusterError, UsageError


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m picluster.lab.vm")
    sub = parser.add_subparsers(dest="command", required=True)
    img = sub.add_parser("image", help="build the VM image if missing (or --rebuild), then check it")
    img.add_argument("--rebuild", action="store_true")
    img.add_argument("--arch", choices=image_mod.ARCHES, default=image_mod.NATIVE, help="arm64: the Pi's instruction set, emulated")
    args = parser.parse_args(argv)
    try:
        return _image(args.rebuild, args.arch)
    except PiclusterError as exc:
        print(f"picluster: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        return 130


def _image(rebuild: bool, arch: str) -> int:
    if os.geteuid() != 0:
        raise UsageError("the VM image is built and kept by root (debootstrap): run as root")
    started = time.monotonic()
    image = image_mod.ensure(say=say_stderr, rebuild=rebuild, arch=arch)
    elapsed = time.monotonic() - started
    sizes = {name: info["size"] for name, info in image.manifest["files"].items()}
    print(f"{arch} image {image.hash}: {image.dir}")
    print(f"kernel {image.kernel_release}, built {image.manifest['built']} in {image.manifest['build_seconds']} s")
    print(f"sizes: {', '.join(f'{n} {s / 1e6:.0f} MB' for n, s in sizes.items())} (root.img is sparse)")
    print(f"ensure() took {elapsed:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
