"""A launch's workers joined over TCP for the all-reduce (allreduce.py): recursive halving and
doubling between partners, one connection per pair, the sums always in one order.

Why not TensorFlow's own messages: on a Pi's share of a core every TensorFlow RPC costs about
0.25 ms of CPU, whatever its size (a ps pays four to six of them per worker-step; its collective
ring pays 2(N - 1) per update and rank), and that, not the bytes, bounded the update
(benchmarks/har_exchange.py).  A plain socket carries the same 277 KB for a fraction of it.  Why
not MPI or Gloo: MPI's processes are started by its launcher and initialise once, where a replica
runs inside a long-lived node server that trains run after run; Gloo ships only inside PyTorch.

Recursive halving and doubling (Rabenseifner; Thakur et al. 2005): in log2(N) rounds each rank
swaps half of what it still holds with a partner and adds the half it keeps, then in log2(N)
rounds the reduced pieces are swapped back.  Each rank sends and receives about twice the vector,
as in a ring, in 2 log2(N) messages instead of 2(N - 1).  With N not a power of two, the ranks
past the largest power of two first hand their vector to a partner below it and get the result
back at the end.  Every rank ends with the same bytes, summed in the order ``tree_sum`` names,
which the emulator (emulated.py) follows to repeat a cluster's updates to the digit.

Trust: the listener binds the worker task's own cluster address, on a port of ALLREDUCE_PORTS,
which the firewall admits from the cluster and the coordinator only (loopback: any port); a
connection is kept only from the address of the partner expected there, naming this launch and
its rank; every size is known in advance.  The addresses meet through ps 0 (allreduce.py).
"""

import errno
import ipaddress
import select
import socket
import struct
import threading
import time
from collections.abc import Callable, Sequence
from typing import TypeVar

import numpy as np

from picluster.model.inventory import ALLREDUCE_PORTS
from picluster.util.errors import ClusterError

MAGIC = b"PCAR"
JOIN_TIMEOUT_S = 300.0  # the rendezvous has every address: the partners are listening already
SEND_CHUNK = 1 << 18  # what one send() may take; a partner sending too is read between chunks
MAX_LAUNCH = 200

T = TypeVar("T")


def tree_sum(values: Sequence[T], add: Callable[[T, T], T]) -> T:
    """The sum of ``values`` (one per rank) in the group's order: each rank past the largest power
    of two below ``len(values)`` folded into the rank that many below it, then neighbours added
    pairwise, level by level (the rounds of recursive halving)."""
    n = len(values)
    if n == 0:
        raise ValueError("no values to sum")
    low = 1 << (n.bit_length() - 1)
    level = [add(values[i], values[i + low]) if i + low < n else values[i] for i in range(low)]
    while len(level) > 1:
        level = [add(level[i], level[i + 1]) for i in range(0, len(level), 2)]
    return level[0]


def partners(rank: int, size: int) -> list[int]:
    """The ranks ``rank`` exchanges with: its fold partner (if any) and, below the largest power
    of two, one partner per round."""
    low = 1 << (size.bit_length() - 1)
    if rank >= low:
        return [rank - low]
    found = [rank ^ (1 << k) for k in range(low.bit_length() - 1)]
    return found + ([rank + low] if rank + low < size else [])


def _is_loopback(host: str) -> bool:
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:  # a name: the cluster's own
        return False


def _host_port(address: str) -> tuple[str, int]:
    host, _, port = address.rpartition(":")
    return host.strip("[]"), int(port)


class Group:
    """This rank's connections to its partners in a launch of ``size`` workers."""

    def __init__(self, rank: int, size: int, launch: str) -> None:
        if not 0 <= rank < size:
            raise ValueError(f"rank {rank} is not one of {size}")
        encoded = launch.encode()
        if len(encoded) > MAX_LAUNCH:
            raise ValueError("launch id too long")
        self.rank, self.size, self.launch = rank, size, encoded
        self.low = 1 << (size.bit_length() - 1)
        self.peers: dict[int, socket.socket] = {}
        self.listener: socket.socket | None = None
        self._closed = threading.Event()
        self._scratch = np.empty(0, np.float64)

    # -- joining -----------------------------------------------------------------------------------

    def listen(self, host: str, ports: tuple[int, int] = ALLREDUCE_PORTS) -> str:
        """Start listening on ``host`` (this worker's cluster address), on the first free port of
        ``ports`` (the range the firewall admits from the cluster only; on a loopback address,
        where no other machine reaches, any port); returns "host:port"."""
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        loopback = host == "localhost" or _is_loopback(host)
        for port in [0] if loopback else range(ports[0], ports[1] + 1):
            listener = socket.socket(family, socket.SOCK_STREAM)
            try:
                listener.bind((host, port))
            except OSError as exc:
                listener.close()
                if exc.errno != errno.EADDRINUSE:
                    raise ClusterError(f"all-reduce rank {self.rank}: cannot listen on {host}:{port}: {exc.strerror}") from None
                continue
            self.listener = listener
            listener.listen(max(8, len(partners(self.rank, self.size))))
            return f"{host}:{listener.getsockname()[1]}"
        raise ClusterError(f"all-reduce rank {self.rank}: every port {ports[0]}-{ports[1]} on {host} is taken "
                           "(as many runs share this node); end one, or train with --exchange fused")

    def _hello(self, rank: int) -> bytes:
        return MAGIC + bytes([len(self.launch)]) + self.launch + struct.pack(">I", rank)

    def join(self, table: Sequence[str], timeout: float = JOIN_TIMEOUT_S) -> None:
        """Connect to the partners above this rank and accept those below it (``table``: every
        rank's "host:port", as each published it)."""
        if len(table) != self.size or self.listener is None:
            raise ValueError("join needs the listener and one address per rank")
        deadline = time.monotonic() + timeout
        mine = partners(self.rank, self.size)
        for p in (p for p in mine if p > self.rank):
            conn = socket.create_connection(_host_port(table[p]), timeout=timeout)
            conn.sendall(self._hello(self.rank))
            self.peers[p] = self._ready(conn)
        below = {p for p in mine if p < self.rank}
        while below:
            left = deadline - time.monotonic()
            if left <= 0 or self._closed.is_set():
                raise ClusterError(f"all-reduce rank {self.rank}: ranks {sorted(below)} never connected within {timeout:.0f} s")
            self.listener.settimeout(min(left, 1.0))
            try:
                conn, (source, *_) = self.listener.accept()
            except TimeoutError:
                continue
            rank = self._greeted(conn, source, table, below, min(left, 10.0))
            if rank is None:
                conn.close()  # a stranger or a stale launch: not one of ours
                continue
            below.discard(rank)
            self.peers[rank] = self._ready(conn)
        self.listener.close()
        self.listener = None

    def _greeted(self, conn: socket.socket, source: str, table: Sequence[str], expected: set[int], timeout: float) -> int | None:
        """The rank a new connection names, if it is an expected partner's from its address."""
        size = len(MAGIC) + 1 + len(self.launch) + 4
        conn.settimeout(timeout)
        got = b""
        try:
            while len(got) < size:
                part = conn.recv(size - len(got))
                if not part:
                    return None
                got += part
        except OSError:
            return None
        rank = struct.unpack(">I", got[-4:])[0]
        if got != self._hello(rank) or rank not in expected:
            return None
        return rank if _host_port(table[rank])[0] == source.removeprefix("::ffff:") else None

    @staticmethod
    def _ready(conn: socket.socket) -> socket.socket:
        conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        conn.settimeout(None)
        conn.setblocking(False)
        return conn

    # -- moving vectors ----------------------------------------------------------------------------

    def _swap(self, peer: int, out: np.ndarray | None, into: np.ndarray | None) -> None:
        """Send ``out`` to ``peer`` while receiving ``into`` from it (either may be None)."""
        sock = self.peers[peer]
        send = out.data.cast("B") if out is not None else memoryview(b"")
        recv = into.data.cast("B") if into is not None else memoryview(bytearray())
        sent = got = 0
        while sent < len(send) or got < len(recv):
            if self._closed.is_set():
                raise ClusterError("the all-reduce group was closed")
            readable, writable, _ = select.select([sock] if got < len(recv) else [], [sock] if sent < len(send) else [], [], 1.0)
            try:
                if writable:
                    sent += sock.send(send[sent:sent + SEND_CHUNK])
                if readable:
                    n = sock.recv_into(recv[got:])
                    if n == 0:
                        self._lost(peer)
                    got += n
            except (BlockingIOError, InterruptedError):
                continue
            except OSError:
                self._lost(peer)

    def _lost(self, peer: int) -> None:
        """A partner's end went away: its worker is lost.  Wait, as a step blocked on the ps would,
        until the coordinator stops this launch (close), so that only the lost worker is counted."""
        if not self._closed.wait(JOIN_TIMEOUT_S):
            raise ClusterError(f"all-reduce rank {self.rank}: rank {peer} went away and nothing stopped this launch")
        raise ClusterError("the all-reduce group was closed")

    def _buffer(self, n: int, dtype) -> np.ndarray:
        if self._scratch.nbytes < n * np.dtype(dtype).itemsize:
            self._scratch = np.empty(n * np.dtype(dtype).itemsize // 8 + 1, np.float64)
        return self._scratch.view(dtype)[:n]

    def total(self, x: np.ndarray) -> np.ndarray:
        """Every rank's ``x`` (1-D, the same length and type on each) summed in tree_sum's order;
        every rank gets the same array."""
        x = np.array(x, copy=True)
        if self.size == 1:
            return x
        r, low = self.rank, self.low
        if r >= low:  # folded: hand the vector over, get the sum back
            self._swap(r - low, x, None)
            self._swap(r - low, None, x)
            return x
        if r + low < self.size:
            extra = self._buffer(len(x), x.dtype)
            self._swap(r + low, None, extra)
            x += extra
        lo, hi, spans = 0, len(x), []
        for k in range(low.bit_length() - 1):  # recursive halving: keep a half, add the partner's
            p = r ^ (1 << k)
            mid = (lo + hi) // 2
            keep, give = ((lo, mid), (mid, hi)) if r < p else ((mid, hi), (lo, mid))
            theirs = self._buffer(keep[1] - keep[0], x.dtype)
            self._swap(p, x[give[0]:give[1]], theirs)
            x[keep[0]:keep[1]] += theirs
            spans.append((lo, hi))
            lo, hi = keep
        for k in reversed(range(len(spans))):  # recursive doubling: hand the reduced pieces back
            p = r ^ (1 << k)
            plo, phi = spans[k]
            other = (hi, phi) if lo == plo else (plo, lo)
            self._swap(p, x[lo:hi], x[other[0]:other[1]])
            lo, hi = plo, phi
        if r + low < self.size:
            self._swap(r + low, x, None)
        return x

    def mean(self, x: np.ndarray) -> np.ndarray:
        """The mean of every rank's float32 ``x``: tree_sum's total over the ranks, divided by their number."""
        total = self.total(np.asarray(x, np.float32))
        total /= np.float32(self.size)
        return total

    def broadcast(self, x: np.ndarray | None, length: int) -> np.ndarray:
        """Rank 0's float64 ``x`` (``length`` values) on every rank; the others pass None.  A sum
        in which every other rank adds zeros: exact, on the connections the group has."""
        mine = np.asarray(x, np.float64) if self.rank == 0 and x is not None else np.zeros(length, np.float64)
        if len(mine) != length:
            raise ValueError(f"broadcast of {len(mine)} values, {length} expected")
        return self.total(mine)

    def close(self) -> None:
        """End every connection (from any thread: a blocked swap returns with an error)."""
        self._closed.set()
        for sock in [*self.peers.values(), *([self.listener] if self.listener is not None else [])]:
            try:
                sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            sock.close()
        self.peers = {}
