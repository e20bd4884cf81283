"""The house's rule, checked on the import graph: imports run downward only, and no module imports
itself through others (CONTRIBUTING.md, *Layers*).  Imports inside functions count too: a lazy
import is still an arrow."""

import ast
import re
from pathlib import Path

from conftest import ROOT

PACKAGE = ROOT / "picluster"
# Top to bottom.  A module may import its own layer's and lower layers' modules, never a higher one's.
LAYERS = (
    ("cli",),
    ("plots", "jobs"),
    ("monitor", "provision", "lab", "upkeep"),
    ("cluster", "views"),
    ("model", "data"),
    ("util",),
)
ENTRY = {"__init__", "__main__"}  # the package's face and `python -m picluster`: above everything


def _module(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _statements(path: Path):
    """(module, names) per ``import``/``from ... import`` of a picluster module, anywhere in the file."""
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            yield from ((a.name, ()) for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            yield node.module, tuple(a.name for a in node.names)


def graph() -> dict[str, set[str]]:
    """module -> the modules it imports.  A package's ``__init__`` that only hands names on (a face)
    draws no arrows of its own; a name taken from it counts as taken from where it is defined."""
    paths = {_module(p): p for p in PACKAGE.rglob("*.py")}
    faces = {name for name, path in paths.items() if path.name == "__init__.py"}
    handed: dict[tuple[str, str], str] = {}  # (face, name) -> the module the face took it from
    for face in faces:
        for module, names in _statements(paths[face]):
            handed |= {(face, n): module for n in names if module in paths}

    def targets(module: str, names: tuple[str, ...]) -> set[str]:
        if not module.startswith("picluster"):
            return set()
        out = set()
        for name in names:
            if f"{module}.{name}" in paths:
                out.add(f"{module}.{name}")  # `from picluster.lab import registry`
            elif (module, name) in handed:
                out.add(handed[(module, name)])
            elif module in paths and module != "picluster":
                out.add(module)
        if not names and module in paths and module != "picluster":
            out.add(module)
        return out

    return {name: set() if name in faces else {t for m, ns in _statements(path) for t in targets(m, ns)} - {name}
            for name, path in paths.items()}


def layer(module: str) -> int:
    parts = module.split(".")
    if len(parts) == 1 or (len(parts) == 2 and parts[1] in ENTRY):
        return -1
    for depth, names in enumerate(LAYERS):
        if parts[1] in names:
            return depth
    raise AssertionError(f"{module} is in no layer: add picluster/{parts[1]} to LAYERS (and to CONTRIBUTING.md)")


def test_every_import_runs_down_the_layers():
    upward = [f"{a} (layer {layer(a)}) imports {b} (layer {layer(b)})"
              for a, targets in graph().items() for b in sorted(targets)
              if layer(a) >= 0 and layer(b) < layer(a)]
    assert upward == []


def test_no_module_imports_itself_through_others():
    arrows = graph()
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    cycles = []

    def visit(node: str, path: list[str]) -> None:
        state[node] = 1
        for nxt in sorted(arrows[node]):
            if state.get(nxt) == 1:
                cycles.append(" -> ".join(path[path.index(nxt):] + [node, nxt]) if nxt in path else f"{node} -> {nxt}")
            elif nxt not in state:
                visit(nxt, [*path, node])
        state[node] = 2

    for start in sorted(arrows):
        if start not in state:
            visit(start, [])
    assert cycles == []


def test_the_graph_sees_lazy_imports_names_handed_on_by_a_package_and_submodules():
    arrows = graph()
    assert "picluster.monitor.poll" in arrows["picluster.jobs.controller"]  # a plain `from ... import`
    assert "picluster.jobs.controller" in arrows["picluster.cli.run"]  # inside the command's function
    assert "picluster.lab.registry" in arrows["picluster.cli.lab"]  # `from picluster.lab import registry`
    assert "picluster.data.har.dataset" in arrows["picluster.jobs.har.data"]  # HarData, handed on by data/har/__init__
    assert layer("picluster.cluster.attach") > layer("picluster.monitor.poll")  # so attach -> poll would be upward


def test_jobs_start_their_processes_only_through_the_one_supervisor():
    """Every process a job starts on a node (HAR clients, launch tasks) goes through cluster/tasks.py
    and the tether: no job module starts a subprocess or an SSH command of its own."""
    found = []
    for path in sorted((PACKAGE / "jobs").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import | ast.ImportFrom):
                names = [a.name for a in node.names] + ([node.module] if isinstance(node, ast.ImportFrom) and node.module else [])
                found += [f"{path.relative_to(ROOT)}: imports {n}" for n in names if n in ("subprocess", "multiprocessing")]
            elif isinstance(node, ast.Attribute) and node.attr in ("exec_command", "open_session", "Popen"):
                found.append(f"{path.relative_to(ROOT)}:{node.lineno}: {node.attr}")
    assert found == []


def test_jobs_reach_node_files_only_through_the_cluster_layer():
    """A job copies files to and from a node through what its cluster gives it (a JobFolder's file
    primitives, cluster/jobfolder.py): no job module imports the SSH libraries, opens SFTP itself or
    runs a shell command over the folder's connection (``folder.remote``)."""
    transport = ("paramiko", "fabric", "invoke")
    found = []
    for path in sorted((PACKAGE / "jobs").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import | ast.ImportFrom):
                names = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ""]
                found += [f"{path.relative_to(ROOT)}:{node.lineno}: imports {n}" for n in names if n.split(".")[0] in transport]
            elif isinstance(node, ast.Attribute) and node.attr in ("sftp", "open_sftp", "SFTPClient", "remote"):
                found.append(f"{path.relative_to(ROOT)}:{node.lineno}: {node.attr}")
    assert found == []


def test_jobs_and_the_cli_never_test_which_kind_of_cluster_they_have():
    """A job and a command take a Cluster and use what it offers (stage, start_task, up, down in
    attach): none tests the kind, so a new kind plugs in without touching them."""
    kind = r"isinstance\([^)]*\b(LocalCluster|NodeCluster|InProcessCluster|Allocation)\b|\.kind =="
    # A command may ask whether it was given an inventory (provision needs one); a job has a
    # cluster, and whether an inventory is behind it is the cluster's business.
    asks = {"jobs": re.compile(kind + r"|\binventory is (not )?None"), "cli": re.compile(kind + r"|\bcluster_?\.inventory is (not )?None")}
    found = [f"{path.relative_to(ROOT)}:{n}: {line.strip()}"
             for folder in ("jobs", "cli") for path in sorted((PACKAGE / folder).rglob("*.py"))
             for n, line in enumerate(path.read_text().splitlines(), 1) if asks[folder].search(line)]
    assert found == []


def test_every_module_over_400_lines_says_why():
    """A long module is where a newcomer gets lost: one over 400 lines says in its docstring why its
    parts belong together ("Over 400 lines: ..."), or it is split."""
    unexplained = []
    for path in sorted(PACKAGE.rglob("*.py")):
        text = path.read_text()
        if text.count("\n") > 400 and "Over 400 lines" not in (ast.get_docstring(ast.parse(text)) or ""):
            unexplained.append(f"{path.relative_to(ROOT)}: {text.count(chr(10))} lines")
    assert unexplained == []


def test_no_function_under_jobs_is_over_60_lines_or_6_parameters():
    """A job's function that a newcomer can hold in mind: at most 60 lines from its ``def`` to its
    end, and at most 6 parameters (self and cls not counted; ``*args`` and ``**kwargs`` one each).
    More is a sign that it does two things, or that its parameters belong together in a value."""
    found = []
    for path in sorted((PACKAGE / "jobs").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                continue
            args = node.args
            named = [a.arg for a in (*args.posonlyargs, *args.args, *args.kwonlyargs) if a.arg not in ("self", "cls")]
            count = len(named) + (args.vararg is not None) + (args.kwarg is not None)
            lines = node.end_lineno - node.lineno + 1 if node.end_lineno is not None else 0
            if lines > 60 or count > 6:
                found.append(f"{path.relative_to(ROOT)}:{node.lineno}: {node.name}: {lines} lines, {count} parameters")
    assert found == []
