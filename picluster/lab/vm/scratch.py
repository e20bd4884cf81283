"""A bare lab network for VMs outside a Lab: a bridge on a free /24, a lab id, a login key, a user.

Until `Lab` learns to start VMs (phase 2 of issue #11), tests and measurements bring VMs up on
one of these.  It claims its id and subnet as a Lab does (the same lock, the same names), so it
coexists with labs, and a lab teardown or reap by id sweeps its bridge and taps like a lab's.

    with ScratchNet(run_dir) as net:
        fleet = Fleet(net.vms(2), net.user, net.key_path, net.known_hosts_path)
        ...
"""

import contextlib
import fcntl
import ipaddress
import shutil
from pathlib import Path

from picluster.lab import keys, naming, netns
from picluster.lab.host import HostOptions, User
from picluster.lab.vm import tap
from picluster.lab.vm.machine import VM

FIRST_HOST_OCTET = 11  # node01 at .11, as in a Lab
# The lock a Lab takes to pick its id and subnet (lab.py's _LOCK): two picks at once must differ.
LOCK = Path("/run/lock/picluster-lab.lock")


class ScratchNet:
    def __init__(self, run_dir: Path, user: User = User("pi", 1000, 1000)) -> None:
        self.run_dir = Path(run_dir)
        self.user = user
        self.id: str | None = None
        self.subnet: ipaddress.IPv4Network | None = None

    @property
    def bridge(self) -> str:
        return naming.bridge(self.id)

    @property
    def gateway(self) -> str:
        return str(self.subnet.network_address + 1)

    @property
    def key_path(self) -> Path:
        return self.run_dir / "id_ed25519"

    @property
    def known_hosts_path(self) -> Path:
        return self.run_dir / "known_hosts"

    def up(self) -> "ScratchNet":
        try:
            with _lock():
                taken = {naming.lab_of_link(n) for n in netns.link_names()}
                taken |= {naming.lab_of_netns(n) for n in netns.netns_names()}
                self.id = naming.new_id({i for i in taken if i})
                self.subnet = netns.pick_subnet(netns.used_networks())
                netns.create_bridge(self.bridge, ipaddress.ip_interface(f"{self.gateway}/{self.subnet.prefixlen}"))
            self.run_dir.mkdir(parents=True, exist_ok=True)
            self.run_dir.chmod(0o700)
            keys.make_keypair(self.key_path, f"picluster-vm-{self.id}")
        except BaseException:
            self.down()
            raise
        return self

    def vms(self, count: int, options: dict[str, HostOptions] | None = None, **kwargs) -> list[VM]:
        """node01.. at .11, .12, ... with their taps on this bridge; kwargs go to every VM."""
        made = []
        for index in range(1, count + 1):
            name = naming.host_name(index)
            made.append(
                VM(
                    name=name,
                    index=index,
                    address=str(self.subnet.network_address + FIRST_HOST_OCTET - 1 + index),
                    prefix=self.subnet.prefixlen,
                    tap=tap.name(self.id, index),
                    bridge=self.bridge,
                    dir=self.run_dir / "vms" / name,
                    options=(options or {}).get(name, HostOptions()),
                    **kwargs,
                )
            )
        return made

    def down(self) -> None:
        """Delete every link named after this id (bridge, taps) and the run dir.  Idempotent."""
        if self.id is not None:
            mine = [n for n in netns.link_names() if naming.lab_of_link(n) == self.id]
            for name in sorted(mine, reverse=True):  # taps (pcl-id-NN) before the bridge (pcl-id)
                netns.delete_link(name)
        if self.run_dir.exists():
            shutil.rmtree(self.run_dir)

    def __enter__(self) -> "ScratchNet":
        return self.up()

    def __exit__(self, *exc) -> None:
        self.down()


@contextlib.contextmanager
def _lock():
    LOCK.parent.mkdir(parents=True, exist_ok=True)
    with open(LOCK, "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)
