"""What every kind of exchange answers: where the weights live, what the model reads, how one
sync step's gradients become the update every replica goes on from, and what a launch does
before its first step.  graph.py composes the training graph from the kind chosen; replica.py
runs its steps through it.  Nothing outside a kind's module asks which kind it has.
"""

import contextlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import tensorflow as tf


@dataclass(frozen=True)
class Place:
    """Where one replica trains: the cluster (TF_CONFIG's, None: a process alone), its worker task,
    its rank among the launch's ``workers`` (the chief is 0), the launch's id and the worker task
    of each rank (``members``; by default rank r is task r)."""

    cluster: dict | None = None
    task: int = 0
    rank: int = 0
    workers: int = 1
    launch: str = ""
    members: tuple[int, ...] = ()

    def task_of(self, rank: int) -> int:
        """The worker task at ``rank`` in this launch."""
        return self.members[rank] if self.members else rank

    @property
    def here(self) -> str | None:
        """This replica's device on the cluster (None alone)."""
        return f"/job:worker/task:{self.task}" if self.cluster is not None else None

    @property
    def chief(self) -> bool:
        return self.rank == 0

    @property
    def address(self) -> str:
        """This worker task's server, "host:port"."""
        assert self.cluster is not None
        return self.cluster["worker"][self.task]


# apply(means, squares): the update from the mean gradients (in the variables' order) and, per
# group the kind averaged them in, the sum of their squares (for the global norm's clipping).
Apply = Callable[[list, list], Any]


@dataclass
class Step:
    """What one training step ran: the values of ``before`` (made by the forward pass), of
    ``after`` (read once the update landed), the seconds its exchange took where the kind times
    it itself (None: steptrace.py splits the step from a traced one), and where the kind tells
    (the chief of a sync update), when each worker's gradient was ready: (ranks, seconds) for
    straggler.py."""

    before: list
    after: list
    exchange_s: float | None = None
    arrivals: tuple | None = None


class Exchange:
    """A kind of exchange, for one replica at ``place``.  The defaults are a process's alone: the
    weights where the graph makes them, each step's own gradient applied at once."""

    name = "alone"
    sync = False  # a step waits for every worker's gradient
    arrivals = None  # sync on a ps: (tasks, times) of a step's gradients as ps 0 saw them (the chief's)
    times_arrivals = False  # each step tells the chief when every worker's gradient was ready (Step.arrivals)
    # Whether a session checks for uninitialised variables itself (TensorFlow's own reports); a
    # kind that makes sure of it at a launch's start (Exchange.await_chief) says False.
    reports_missing = True
    # Whether a replica other than the chief initialises its own variables (and gets the chief's
    # values at the start), rather than reading those the chief initialised.
    initialises_own = False
    # Whether ``step`` times the exchange itself (Step.exchange_s); otherwise one traced step a
    # epoch splits the steps' time (steptrace.py).
    times_exchange = False
    # Whether the graph names nothing of its launch, so that the next run of the same shape in this
    # process may reuse it (replica._graph): no queue or container of the launch's on a server.
    reusable = False

    def __init__(self, config, place: Place) -> None:
        self.config, self.place = config, place

    # -- building (graph.py, inside the replica's graph) -----------------------------------------

    def placing(self) -> contextlib.AbstractContextManager:
        """The device scope of every variable and op the graph makes."""
        return contextlib.nullcontext()

    def updating(self) -> contextlib.AbstractContextManager:
        """Where the rate and the optimiser's update are made (a fused ps: on ps 0, where the step is)."""
        return contextlib.nullcontext()

    def launch_variables(self, global_step) -> None:
        """Variables a launch's start needs beside the model's (a ps cluster's barrier)."""

    def read(self, build: Callable[[Any], Any], x) -> tuple[Any, Callable]:
        """(the logits of ``build(x)``, ``value``): the model built reading the weights as this
        kind brings them; ``value(v)``: the tensor it read for variable ``v``."""
        return build(x), (lambda v: v)

    def gradients(self, loss, opt, value) -> tuple[tuple, tuple]:
        """(gradients, trainable variables) of ``loss``, with respect to what the model read."""
        grads, variables = zip(*opt.compute_gradients(loss))
        return grads, variables

    def update(self, grads, variables, optimiser, g) -> Any:
        """The op of one step's update from this replica's ``grads`` (``optimiser``: graph.Optimiser;
        ``g``: the graph being built, whose ``tower`` the emulator asks for)."""
        return optimiser.apply(optimiser.clipped(grads), variables)

    def after_update(self, applied) -> Any:
        """What follows the update within the step (a fused 16-bit wire: the copies refreshed)."""
        return applied

    def evaluated(self, build: Callable[[Any], Any], x) -> Any:
        """The logits evaluation reads, when they differ from training's (None: the same)."""
        return None

    def local_steps(self, g, opt, per_epoch: int) -> None:
        """Post-local SGD's ops (graph.build_local_steps), where this kind has them."""

    def building_done(self, g) -> None:
        """Once every variable and the update are made: checks and ops that need them."""

    def graph_done(self, g) -> None:
        """Once the savers are made too (what is saved is known)."""

    # -- running (replica.py) --------------------------------------------------------------------

    def target(self) -> tuple[str, tf.compat.v1.ConfigProto | None]:
        """(session target, its config; None: a process's own threads) of the training session."""
        return "", None

    def await_chief(self, job, graph, cancelled: Callable[[], None]) -> None:
        """Before a session other than the chief's: wait until what it reads is initialised."""

    def start(self, raw, g, step: int, epoch: int, cancelled: Callable[[], None]) -> tuple[int, int]:
        """A launch's start, once the session is open (the chief's restored or initialised): every
        replica agrees on the weights and on (the global step, the epoch to start after), which
        it returns (the chief passes its own).  ``cancelled()`` raises once the job is cancelled."""
        return step, epoch

    def step(self, session, feed: dict, before: list, after: list, **trace) -> Step:
        """One training step: the update, with ``before`` and ``after`` fetched (and the arrivals
        where this kind has them in the graph)."""
        extra: list = [self.arrivals] if self.arrivals is not None else []
        values = session.run([*before, *after, *extra], feed, **trace)
        n = len(before) + len(after)
        return Step(values[:len(before)], values[len(before):n], arrivals=values[n] if extra else None)

    def relaunch(self, place: Place) -> None:
        """The same graph for another launch at ``place`` (a reusable kind's only)."""
        raise NotImplementedError(f"the {self.name} exchange's graph belongs to its launch")

    def close(self) -> None:
        """The launch ended or was cancelled (from another thread): let go of what it holds."""
