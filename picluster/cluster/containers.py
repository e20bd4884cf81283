"""What a job leaves in a running cluster's servers: its resource containers, and freeing them.

A TensorFlow server keeps every variable (and queue) a session created until the server exits:
closing the session does not free them.  On a cluster that stays up between jobs, each job's
variables would pile up on the ps, so a job creates its resources in a container of its own
(``container(launch)``), and when its clients have stopped the coordinator asks the servers to
drop that container: the master service's ``Reset`` (what ``tf.compat.v1.Session.reset`` sends).

Sent here without TensorFlow (the coordinator does not import it): the request is two repeated
strings, encoded by hand as the protocol buffer ``tensorflow.ResetRequest``, over gRPC to the
first ps task's master.  That master, not a worker's, because ``Reset`` also closes every session
of the master it is sent to, and no client uses a ps as its master; its device filter
(``/job:ps``) reaches every ps task and no worker, so a dead worker cannot hold it up.
"""

RESET = "/tensorflow.MasterService/Reset"
TIMEOUT_S = 10.0


class Unreachable(OSError):
    """The master did not answer at all (gone, or cut off): a ps that stopped took its variables with it."""


def container(launch: str) -> str:
    """The container a launch's resources live in (TensorFlow allows [A-Za-z0-9._/-] in its name)."""
    return f"picluster-{launch}"


def reset_request(containers: list[str], device_filters: list[str]) -> bytes:
    """``tensorflow.ResetRequest``: container = 1, device_filters = 2 (repeated strings).  Never
    without a container: an empty list resets every container, other jobs' too."""
    if not containers or not all(containers):
        raise ValueError("reset needs the containers to drop (an empty list would drop every container)")
    return b"".join(_string(1, c) for c in containers) + b"".join(_string(2, f) for f in device_filters)


def reset(master: str, containers: list[str], device_filters: tuple[str, ...] = ("/job:ps",), timeout: float = TIMEOUT_S) -> None:
    """Drop ``containers`` on the tasks the filters name, through the master at ``master``
    (host:port).  Raises Unreachable when nothing answers there, OSError when it fails otherwise."""
    import grpc  # TensorFlow's own dependency; imported here so that commands without a cluster do not load it

    payload = reset_request(containers, list(device_filters))
    with grpc.insecure_channel(master) as channel:
        call = channel.unary_unary(RESET, request_serializer=None, response_deserializer=None)
        try:
            call(payload, timeout=timeout)
        except grpc.RpcError as exc:
            code = exc.code() if hasattr(exc, "code") else None
            detail = exc.details() if hasattr(exc, "details") else str(exc)
            gone = code == grpc.StatusCode.UNAVAILABLE
            raise (Unreachable if gone else OSError)(f"{master}: {code.name if code is not None else 'error'}: {detail}") from None


def _string(field: int, text: str) -> bytes:
    data = text.encode("utf-8")
    return _varint(field << 3 | 2) + _varint(len(data)) + data


def _varint(n: int) -> bytes:
    out = bytearray()
    while True:
        byte = n & 0x7F
        n >>= 7
        if n:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)
