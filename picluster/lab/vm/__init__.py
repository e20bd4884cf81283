"""VM test hosts: Debian 12 virtual machines with their own kernel, for what namespaces cannot test
(NFS, systemd units, sysctls, reboots).  Issue #11, phase 1: the machinery, not yet used by Lab.

- image.py    the Debian 12 image: debootstrap once, cached by recipe hash, checked before use
- guest.py    files baked into it: the unit that applies a VM's seed at every boot
- seed.py     a VM's identity (hostname, address, host key, user, MOCK Pi files) on a small disk
- accel.py    KVM if a kernel really boots under it here (probed once, cached), else TCG
- machine.py  one VM: copy-on-write disk, seed, tap, qemu; start, stop, delete
- tap.py      its tap on the lab's bridge, named so a lab teardown finds it
- qmp.py      qemu's control socket: power button, quit
- support.py  root, qemu, memory: one-line refusals before anything is made
- fleet.py    N VMs together: up (parallel boot, SSH), reboot, down
- scratch.py  a bare bridge, key and user for VMs outside a Lab (tests, measurements)

`python -m picluster.lab.vm` builds or checks the image and times VM boots (see __main__.py).
"""

from picluster.lab.vm.fleet import Fleet
from picluster.lab.vm.machine import VM

__all__ = ["Fleet", "VM"]
