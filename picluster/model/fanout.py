"""Work on many nodes at once: one result per node, and one error that folds the failed ones.

As Fabric's ``GroupResult``: ``fan_out(work, nodes)`` runs ``work`` on every node in a bounded
thread pool and returns a ``Results`` mapping each node's name to its value or to the
exception it raised, in the nodes' order.  A failed node never stops the others.
``raise_failures`` then turns the failures into one ``GroupError``, nodes with the same
message folded as ClusterShell writes them: ``cluster up failed on node[02-04]: no answer; node07: ...``.
"""

from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Generic, TypeVar

from picluster.model import nodeset
from picluster.util.errors import ClusterError, PiclusterError

T = TypeVar("T")
R = TypeVar("R")
FANOUT = 16  # SSH sessions at once: enough for a 16-Pi switch, few enough for one coordinator


def node_name(item: Any) -> str:
    return item if isinstance(item, str) else item.name


class GroupError(ClusterError):
    """Some nodes failed; ``failures`` maps each to its exception."""

    def __init__(self, what: str, failures: dict[str, BaseException]) -> None:
        self.what = what
        self.failures = failures
        super().__init__(f"{what} failed on {'; '.join(fold(failures))}")


def fold(failures: dict[str, BaseException]) -> list[str]:
    """["node[02-04]: message", "node07: other message"]: nodes grouped by what went wrong."""
    folded = nodeset.fold_by({node: _message(exc) for node, exc in failures.items()})
    return [f"{nodes}: {message}" for message, nodes in folded.items()]


class Results(dict[str, Any], Generic[R]):
    """Node name -> what ``work`` returned, or the exception it raised."""

    @property
    def succeeded(self) -> dict[str, R]:
        return {node: value for node, value in self.items() if not isinstance(value, BaseException)}

    @property
    def failed(self) -> dict[str, BaseException]:
        return {node: value for node, value in self.items() if isinstance(value, BaseException)}

    def raise_failures(self, what: str) -> "Results[R]":
        failed = self.failed
        if failed:
            raise GroupError(what, failed)
        return self


def fan_out(
    work: Callable[[T], R],
    items: Iterable[T],
    name: Callable[[T], str] = node_name,
    limit: int = FANOUT,
    catch: tuple[type[BaseException], ...] = (PiclusterError,),
) -> Results[R]:
    """``work(item)`` for every item at once (at most ``limit`` at a time).

    Exceptions of the ``catch`` classes become that node's result; any other (a bug) is raised
    once every node has finished.
    """
    items = list(items)
    results: Results[R] = Results()
    if not items:
        return results

    def one(item: T) -> Any:
        try:
            return work(item)
        except catch as exc:
            return exc

    with ThreadPoolExecutor(max_workers=max(1, min(limit, len(items)))) as pool:
        for item, value in zip(items, pool.map(one, items)):
            results[name(item)] = value
    return results


def _message(exc: BaseException) -> str:
    return " ".join(str(exc).split()) or type(exc).__name__
