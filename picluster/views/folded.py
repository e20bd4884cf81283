"""Nodes' outputs as ClusterShell prints them: each line after its node's name (clush's default,
for grep), or folded as ``clubak -b`` folds them: the nodes with the same output under one header
(their node set and how many), once.

Plain lines, not rich markup: node sets and the nodes' own output hold brackets."""

from collections.abc import Iterator, Mapping

from picluster.model import nodeset


def prefixed(node: str, text: str) -> list[str]:
    """``node03: line`` for each line of ``text``; nothing for no output (as clush)."""
    text = text.rstrip("\n")
    return [f"{node}: {line}" for line in text.split("\n")] if text else []


def folded(outputs: Mapping[str, str]) -> Iterator[str]:
    """Node -> output, as lines: a header per group of identical outputs, in the nodes' order; a
    node that printed nothing shows nothing (as clush -b)."""
    groups = nodeset.fold_by({node: text.rstrip("\n") for node, text in outputs.items()})
    for text, nodes in groups.items():
        if not text:
            continue
        header = f"{nodes} ({len(nodeset.expand(nodes))})"
        yield "-" * len(header)
        yield header
        yield "-" * len(header)
        yield from text.split("\n")


def exit_lines(codes: Mapping[str, int]) -> list[str]:
    """["node[02,04]: exited with exit code 1"] for the nodes whose command did not exit 0."""
    failed = {node: code for node, code in codes.items() if code != 0}
    return [f"{nodes}: exited with exit code {code}" for code, nodes in nodeset.fold_by(failed).items()]
