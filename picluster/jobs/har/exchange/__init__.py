"""How the workers of a sync update meet: one kind of exchange per module, behind kind.py's
interface; graph.py builds the training graph from the kind ``choose`` gives.

kind.py       the interface (Exchange), where a replica trains (Place), what a step ran (Step)
ps.py         the parameter server: the weights on the ps tasks, read each step, gradients back
              through queues (sync) or applied by each worker (async); fused or variable by variable
allreduce.py  no ps in a step: every worker holds the model and the workers sum the gradient
              themselves (group.py), then apply the same update to their own copies
group.py      the all-reduce's TCP group: recursive halving and doubling, its order of sums
collective.py TensorFlow's collective all-reduce (its ring, or two levels of rings) in the graph
tree.py       a tree of aggregators: each group's first worker sums its group's gradients before the
              ps and hands the weights back down
emulated.py   the statistics emulator: every worker's tower in one process, averaged as the
              emulated cluster's exchange averages them
"""

from picluster.jobs.har.exchange.allreduce import AllReduce
from picluster.jobs.har.exchange.collective import Collective
from picluster.jobs.har.exchange.emulated import Emulated
from picluster.jobs.har.exchange.kind import Exchange, Place, Step
from picluster.jobs.har.exchange.ps import Ps
from picluster.jobs.har.exchange.tree import Tree

__all__ = ["AllReduce", "Collective", "Emulated", "Exchange", "Place", "Ps", "Step", "Tree", "choose"]


def choose(config, place: Place) -> Exchange:
    """The kind ``config`` asks for (config.exchange), for the replica at ``place``: alone in a
    process, the emulator of a sync cluster, or one of a cluster's."""
    if place.cluster is None:
        return Emulated(config, place) if config.emulate and place.workers > 1 else Exchange(config, place)
    if config.exchange == "allreduce":
        return AllReduce(config, place)
    if config.exchange.startswith("collective"):
        return Collective(config, place)
    if config.exchange == "tree":
        return Tree(config, place)
    return Ps(config, place)
