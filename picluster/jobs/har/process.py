"""A training replica in a process of its own: ``python -m picluster.jobs.har.process --run-dir D
[--launch ID] [--serve]`` (picluster.jobs.har.replica does the work).

With ``--serve`` (a node's client that hosts its worker task in place of the node's server) the
process first re-executes itself with the bind shim preloaded for its worker's address, and only
then imports TensorFlow: the import, tens of seconds on a Pi, is paid once rather than twice.
Nothing here imports TensorFlow.
"""

import json
import os
import sys


def shim_first() -> None:
    """With --serve: re-execute with the bind shim for this worker's address (TF_CONFIG)."""
    if "--serve" not in sys.argv[1:]:
        return
    from picluster.cluster.shim import reexec_with_shim

    try:
        spec = json.loads(os.environ["TF_CONFIG"])
        host, port = spec["cluster"]["worker"][int(spec["task"]["index"])].rsplit(":", 1)
    except (KeyError, ValueError, TypeError, IndexError):
        return  # the replica names what is wrong with TF_CONFIG
    reexec_with_shim(host, [int(port)], "picluster.jobs.har.process")


def main() -> int:
    shim_first()
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")  # before TensorFlow: its C++ start-up chatter
    from picluster.jobs.har import replica

    return replica.main()


if __name__ == "__main__":
    sys.exit(main())
