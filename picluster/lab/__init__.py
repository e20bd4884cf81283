"""Test lab: several real SSH hosts on this one machine (network, UTS and mount namespaces).

Multi-node features are tested against these hosts; see lab.py for the entry point.
"""

from picluster.lab.host import Host, HostOptions
from picluster.lab.lab import Lab
from picluster.lab.labs import down_all, reap_orphans, teardown
from picluster.lab.registry import known_ids

__all__ = ["Host", "HostOptions", "Lab", "down_all", "known_ids", "reap_orphans", "teardown"]
