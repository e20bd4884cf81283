"""VM test hosts: Debian 12 virtual machines with their own kernel, for what namespaces cannot test
(NFS, systemd units, sysctls, firewalls in a real kernel, reboots).  `Lab(n, vm=True)` and
`picluster lab up --vm` use them through the lab's host-kind seam (lab/kinds.py).

- kind.py     the VM kind of lab host: refusals, image and accelerator, taps, disks, start, reboot
- host.py     one VM as a lab host: commands, files and reboot over SSH with the lab's key
- machine.py  one VM as a process: copy-on-write disk, seed, qemu on its tap
- image.py    the Debian 12 image: debootstrap once, cached by recipe hash, checked before use
- guest.py    files baked into it: the unit that applies a VM's seed at every boot
- seed.py     a VM's identity (hostname, address, host key, user, MOCK Pi files) on a small disk
- accel.py    KVM if a kernel really boots under it here (probed once, cached), else TCG
- tap.py      its tap on the lab's bridge, named like a veth so a lab teardown finds it
- mirror.py   the Debian mirror apt uses, for debootstrap
- support.py  root, qemu, memory: one-line refusals before anything is made

`python -m picluster.lab.vm image [--rebuild] [--arch arm64]` builds or checks the image (see __main__.py).
`Lab(n, vm=True, arch="arm64")` / `lab up --vm --arch arm64`: guests on the Pi's instruction set,
emulated (qemu-system-aarch64's virt board, TCG), from their own image beside amd64's.
"""

from picluster.lab.vm.host import VMHost
from picluster.lab.vm.machine import VM

__all__ = ["VM", "VMHost"]
