"""What must hold on provisioned VM test hosts (tests/test_provision_vm*.py): nfsd's threads and
mountd's port as the kernel and rpcbind report them, the export, the sunrpc slot table on every
client, the share mounted everywhere with a file written on one node read on another, the firewall
in the guests' kernels from cluster, coordinator and outside addresses; and a small Debian
repository served on the lab bridge, for apt's cache update on a VM made to look like a fresh card.
"""

import contextlib
import functools
import hashlib
import secrets
import socket
import subprocess
import threading
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from picluster.lab import Lab
from picluster.model.inventory import Inventory
from picluster.provision.steps import Runtime

ROOT = Path(__file__).resolve().parents[1]
# Not TensorFlow: under TCG a VM runs Python about 20x slower than this machine, and TensorFlow's
# 260 MB wheel would take most of an hour on three VMs.  The namespace-host tests install the real set.
RUNTIME = Runtime(requirements=("psutil>=5.9,<8", "prometheus-client>=0.20,<1"), imports=("psutil", "prometheus_client"))
REMOVED = "python3-venv"  # taken off node03 with apt's lists: a freshly written card's state


def inventory(lab: Lab, path: Path) -> Path:
    """The lab's inventory without `subnet`: the cluster's range is then the nodes' own (.8/29),
    and the coordinator (the bridge, .1) lies outside it, as on a LAN."""
    path.write_text("".join(line + "\n" for line in lab.inventory_text().splitlines() if not line.startswith("subnet =")))
    return path


def sh(host, command: str, timeout: float = 300) -> str:
    return host.run(["sh", "-c", command], timeout=timeout).stdout.strip()


# -- a Debian repository on the bridge, for apt's cache update ---------------------------------


def apt_repository(directory: Path, packages: list[str]) -> Path:
    """A flat repository (Packages, Release) of these packages, downloaded from Debian by apt."""
    directory.mkdir(parents=True, exist_ok=True)
    subprocess.run(["apt-get", "download", "-q", *packages], cwd=directory, check=True, capture_output=True, timeout=300)
    return index_repository(directory)


def index_repository(directory: Path) -> Path:
    """Packages and Release for the .deb files in `directory`: a flat repository apt reads."""
    stanzas = []
    for deb in sorted(directory.glob("*.deb")):
        control = subprocess.run(["dpkg-deb", "-f", str(deb)], capture_output=True, text=True, check=True).stdout
        data = deb.read_bytes()
        extra = f"Filename: ./{deb.name}\nSize: {len(data)}\nSHA256: {hashlib.sha256(data).hexdigest()}\n"
        stanzas.append(control.rstrip("\n") + "\n" + extra)
    packages_text = "\n".join(stanzas)
    (directory / "Packages").write_text(packages_text)
    digest = hashlib.sha256(packages_text.encode()).hexdigest()
    (directory / "Release").write_text(f"Origin: picluster-lab\nSHA256:\n {digest} {len(packages_text.encode())} Packages\n")
    return directory


def build_deb(directory: Path, name: str, version: str, postinst: str = "") -> Path:
    """A small real package (one file under /usr/share/doc), built with dpkg-deb."""
    root = directory / f"{name}-{version}"
    (root / "DEBIAN").mkdir(parents=True, exist_ok=True)
    (root / "DEBIAN" / "control").write_text(
        f"Package: {name}\nVersion: {version}\nArchitecture: all\nMaintainer: picluster tests <tests@localhost>\n"
        f"Description: a package of picluster's VM tests\n")
    if postinst:
        (root / "DEBIAN" / "postinst").write_text(f"#!/bin/sh\nset -e\n{postinst}\n")
        (root / "DEBIAN" / "postinst").chmod(0o755)
    doc = root / "usr" / "share" / "doc" / name
    doc.mkdir(parents=True, exist_ok=True)
    (doc / "version").write_text(version + "\n")
    deb = directory / f"{name}_{version}_all.deb"
    subprocess.run(["dpkg-deb", "--root-owner-group", "--build", str(root), str(deb)], check=True, capture_output=True)
    return deb


@contextlib.contextmanager
def served(directory: Path, address: str):
    """An HTTP server on `address` (the lab's bridge) for `directory`; yields its URL."""
    handler = functools.partial(SimpleHTTPRequestHandler, directory=str(directory))
    handler.log_message = lambda *args: None  # type: ignore[method-assign]
    server = ThreadingHTTPServer((address, 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://{address}:{server.server_address[1]}/"
    finally:
        server.shutdown()
        server.server_close()


def as_a_fresh_card(host, url: str) -> None:
    """No apt lists, one package missing, a mirror it can reach: the repository above."""
    sh(host, f"apt-get remove -y -q {REMOVED} >/dev/null && rm -rf /var/lib/apt/lists/* && "
             "rm -f /etc/apt/sources.list /etc/apt/sources.list.d/* && "
             f"echo 'deb [trusted=yes] {url} ./' > /etc/apt/sources.list.d/lab.list", timeout=600)  # fmt: skip
    assert sh(host, f"dpkg-query -W -f='${{db:Status-Status}}' {REMOVED} 2>/dev/null || true") != "installed"


# -- what must hold on the VMs -------------------------------------------------------------------


def reach(source: str, address: str, port: int, timeout: float = 6.0) -> str:
    """"open", "refused" (nothing listens: the firewall let it through) or "dropped"."""
    with socket.socket() as sock:
        sock.bind((source, 0))
        sock.settimeout(timeout)
        try:
            sock.connect((address, port))
            return "open"
        except ConnectionRefusedError:
            return "refused"
        except TimeoutError:
            return "dropped"


def reach_from_vm(host, address: str, port: int) -> str:
    probe = (
        "import socket, sys\n"
        "s = socket.socket(); s.settimeout(6)\n"
        "try:\n    s.connect((sys.argv[1], int(sys.argv[2]))); print('open')\n"
        "except ConnectionRefusedError:\n    print('refused')\n"
        "except OSError:\n    print('dropped')\n"
    )
    return host.run(["python3", "-c", probe, address, str(port)], timeout=120).stdout.strip()


@contextlib.contextmanager
def outside_address(lab: Lab):
    """A third address on the bridge: neither the coordinator's (.1) nor in the cluster's range."""
    address = str(lab.subnet.network_address + 250)
    subprocess.run(["ip", "addr", "add", f"{address}/{lab.subnet.prefixlen}", "dev", lab.bridge], check=True)
    try:
        yield address
    finally:
        subprocess.run(["ip", "addr", "del", f"{address}/{lab.subnet.prefixlen}", "dev", lab.bridge], check=False)


def check_firewall(lab: Lab, inv: Inventory) -> None:
    master, client = lab.host(inv.nfs_master), lab.host("node02")
    coordinator = lab.gateway
    assert coordinator not in [str(a) for a in inv.cluster_subnet]
    closed = (inv.tf_port, inv.tf_port + 1, inv.agent_port)  # admitted, but nothing listens: refused
    for port in closed:
        assert reach(coordinator, master.address, port) == "refused", port
        assert reach_from_vm(client, master.address, port) == "refused", port
    for port in (2049, 111, 20048):
        assert reach(coordinator, master.address, port) == "open", port
    with outside_address(lab) as outside:
        assert reach(outside, master.address, 22) == "open"  # routed, and SSH is left alone
        for port in (*closed, 2049, 111, 20048):
            assert reach(outside, master.address, port) == "dropped", port
        assert reach(outside, client.address, inv.tf_port) == "dropped"


def check_nfs_and_firewall(lab: Lab, inv: Inventory, threads: int) -> None:
    master = lab.host(inv.nfs_master)
    assert sh(master, "cat /proc/fs/nfsd/threads") == str(threads)
    assert sh(master, "nfsconf --get nfsd threads") == str(threads)
    mountd = sh(master, "rpcinfo -p 127.0.0.1 | awk '$5 == \"mountd\" {print $3 \"/\" $4}' | sort -u").split()
    assert mountd == ["tcp/20048", "udp/20048"]
    assert sh(master, "systemctl is-enabled nfs-server; systemctl is-active nfs-server").split() == ["enabled", "active"]
    # exportfs -v: "/srv/picluster  10.0.0.8/29(sync,wdelay,hide,no_subtree_check,sec=sys,rw,secure,root_squash,...)"
    share, client = sh(master, "exportfs -v").split()
    subnet, _, flags = client.rstrip(")").partition("(")
    assert (share, subnet) == (str(inv.share_dir), str(inv.cluster_subnet)), client
    assert {"rw", "sync", "root_squash", "no_subtree_check"} <= set(flags.split(",")), flags
    source = f"{master.address}:{inv.share_dir}"
    for host in lab.hosts:
        assert sh(host, "cat /proc/sys/sunrpc/tcp_slot_table_entries") == "128", host.name
        assert sh(host, "cat /proc/sys/sunrpc/tcp_max_slot_table_entries") == "65536", host.name  # never lowered
        assert sh(host, f"findmnt -n -o SOURCE,FSTYPE --mountpoint {inv.data_dir}").split() == [source, "nfs4"], host.name
        assert sh(host, "nft list table inet picluster | grep -c ' accept$'") == "5"  # lo, subnet x2, coordinator x2
    token = secrets.token_hex(8)
    with lab.connect("node02") as conn:  # as the cluster user, through its mount
        conn.run(f"echo {token} > {inv.data_dir}/written-on-node02", hide=True, timeout=120)
    assert sh(lab.host("node03"), f"cat {inv.data_dir}/written-on-node02") == token
    assert master.read_file(f"{inv.share_dir}/written-on-node02").strip() == token
    assert sh(master, f"stat -c '%U %a' {inv.share_dir}") == f"{inv.user} 775"
    # A node that looked for a file sees it at once once the master puts it in its export (as a
    # first training puts the data set there): lookupcache=positive, not a minute's "no such file".
    late = f"{inv.data_dir}/put-later-{token}"
    assert sh(lab.host("node03"), f"test -e {late} && echo there || echo missing") == "missing"
    sh(master, f"echo {token} > {inv.share_dir}/put-later-{token}")
    assert sh(lab.host("node03"), f"cat {late}") == token
    check_firewall(lab, inv)


def check_runtime(lab: Lab, venv: str = "picluster-venv") -> None:
    for host in lab.hosts:
        versions = sh(host, f"sudo -u pi /home/pi/{venv}/bin/python -c 'import psutil, prometheus_client as p; print(psutil.__version__)'")
        assert versions, host.name
