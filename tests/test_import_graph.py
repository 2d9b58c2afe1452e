"""The package layout as a reviewer reads it: imports only go downwards.

Every import statement of the three packages counts, those inside functions included (a lazy
import is still a dependency); the lazy export tables of the packages' ``__init__`` are strings
and do not.
"""

from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
PACKAGES = ("fsm", "storage", "reconciler")


def _module_name(path: Path, root: Path = REPO) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _graph() -> dict[str, set[str]]:
    modules = {_module_name(p): p for pkg in PACKAGES for p in sorted((REPO / pkg).rglob("*.py"))}
    graph: dict[str, set[str]] = {name: set() for name in modules}
    for name, path in modules.items():
        is_pkg = path.name == "__init__.py"
        base = name if is_pkg else name.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    anchor = base.split(".")
                    anchor = anchor[: len(anchor) - (node.level - 1)]
                    mod = ".".join(anchor + ([node.module] if node.module else []))
                else:
                    mod = node.module or ""
                # `from pkg import submodule` depends on the submodule, not on the package's
                # __init__ (which only runs first); a name from __init__ depends on __init__.
                targets = [
                    f"{mod}.{a.name}" if f"{mod}.{a.name}" in modules else mod for a in node.names
                ]
            for t in targets:
                if t in modules and t != name:
                    graph[name].add(t)
    return graph


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    # Tarjan's strongly connected components; any component of two or more is a circle.
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def test_no_module_of_the_three_packages_is_part_of_an_import_circle() -> None:
    assert _cycles(_graph()) == []


def test_nothing_outside_the_command_line_imports_it() -> None:
    offenders = {
        (src, dst)
        for src, dsts in _graph().items()
        for dst in dsts
        if (dst == "reconciler.cli" or dst.startswith("reconciler.cli."))
        and not (src == "reconciler.cli" or src.startswith("reconciler.cli."))
        and src != "reconciler.__main__"
    }
    assert offenders == set()


def test_fsm_imports_neither_storage_nor_reconciler_and_storage_not_reconciler() -> None:
    graph = _graph()
    for src, dsts in graph.items():
        top = src.split(".")[0]
        tops = {d.split(".")[0] for d in dsts}
        if top == "fsm":
            assert tops <= {"fsm"}, (src, dsts)
        if top == "storage":
            assert "reconciler" not in tops, (src, dsts)


def _fsm_imports(root: Path = REPO) -> set[tuple[str, str, str]]:
    # Every (module, fsm module, name) an fsm module imports, imports in functions included;
    # ``import x`` gives the name "".
    found: set[tuple[str, str, str]] = set()
    for path in sorted((root / "fsm").rglob("*.py")):
        name = _module_name(path, root)
        base = name if path.name == "__init__.py" else name.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                found |= {(name, a.name, "") for a in node.names if a.name.split(".")[0] == "fsm"}
            elif isinstance(node, ast.ImportFrom):
                mod = node.module or ""
                if node.level:
                    anchor = base.split(".")[: len(base.split(".")) - (node.level - 1)]
                    mod = ".".join(anchor + ([mod] if mod else []))
                if mod.split(".")[0] == "fsm":
                    found |= {(name, mod, a.name) for a in node.names}
    return found


def test_fsm_qinglong_imports_only_fsms_public_names_and_the_toolkit_never_imports_it() -> None:
    # Issue 30: QingLong's machines are built through the public toolkit like any user's.
    import fsm

    imports = _fsm_imports()
    ql = {i for i in imports if i[0].startswith("fsm.qinglong")}
    outside = {i for i in ql if not i[1].startswith("fsm.qinglong")}
    assert {i for i in outside if i[1] != "fsm" or i[2] not in fsm.__all__} == set()
    # The reader sees the real imports: fsm.qinglong's tables take Edge from fsm.
    assert ("fsm.qinglong._tables", "fsm", "Edge") in outside
    toolkit = imports - ql
    assert {i for i in toolkit if "qinglong" in i[1] or i[2] == "qinglong"} == set()
    assert ("fsm._machine", "fsm._spec", "Edge") in toolkit


def test_the_graph_sees_the_packages_and_their_imports() -> None:
    # Guards the test above against reading nothing: the known downward edges are found.
    graph = _graph()
    assert "reconciler.primary._pass" in graph
    assert any(d.startswith("fsm") for d in graph["reconciler.primary._writes"])
    assert any(d.startswith("storage") for d in graph["reconciler.primary._writes"])
    assert "reconciler.primary._writes" in graph["reconciler.primary._pass"]


def _package_of(module: str) -> str:
    parts = module.split(".")
    return ".".join(parts[:2]) if parts[0] == "reconciler" and len(parts) > 2 else module


def test_the_node_adapters_import_no_pass_and_the_passes_not_each_other() -> None:
    above_node = {"reconciler.primary", "reconciler.shadow", "reconciler.diagrams"}
    offenders = set()
    for src, dsts in _graph().items():
        mine = _package_of(src)
        theirs = {_package_of(d) for d in dsts}
        if mine == "reconciler.node" and theirs & above_node:
            offenders.add((src, tuple(sorted(theirs & above_node))))
        if mine == "reconciler.primary" and "reconciler.shadow" in theirs:
            offenders.add((src, ("reconciler.shadow",)))
        if mine == "reconciler.shadow" and "reconciler.primary" in theirs:
            offenders.add((src, ("reconciler.primary",)))
    assert offenders == set()
    # The test reads the real graph: the node's modules are in it, and a pass imports them.
    graph = _graph()
    assert "reconciler.node" in graph["reconciler.shadow._pass"]


# --- cross-package use goes through each package's public names ---------------------------------

SUBPACKAGES = (
    "fsm",
    "fsm.qinglong",
    "storage",
    "reconciler.node",
    "reconciler.launcher",
    "reconciler.primary",
    "reconciler.shadow",
    "reconciler.ops",
    "reconciler.cli",
    "reconciler.diagrams",
)

# Imports that still reach into another subpackage's private module (none: every cross-package
# use goes through the target's public names; an entry here must say why it cannot).
REACHING_IN_STILL: frozenset[tuple[str, str]] = frozenset()


def _subpackage(module: str) -> str:
    # The root package (`reconciler`, `reconciler.__main__`, its shared helpers) is its own.
    for sub in sorted(SUBPACKAGES, key=len, reverse=True):
        if module == sub or module.startswith(sub + "."):
            return sub
    return module.split(".")[0]


def _reaching_in(root: Path = REPO) -> set[tuple[str, str]]:
    # Every import statement (function bodies included) naming a private module of ANOTHER
    # subpackage (`reconciler.node._identity` from `reconciler.primary`). The root package's
    # helpers (`reconciler._escape`, `_lazy`, `_profiles`) are shared by all, no one's private.
    found: set[tuple[str, str]] = set()
    for pkg in PACKAGES:
        for path in sorted((root / pkg).rglob("*.py")):
            name = _module_name(path, root)
            base = name if path.name == "__init__.py" else name.rpartition(".")[0]
            for node in ast.walk(ast.parse(path.read_text(), str(path))):
                if isinstance(node, ast.Import):
                    targets = [a.name for a in node.names]
                elif isinstance(node, ast.ImportFrom):
                    if node.level:
                        anchor = base.split(".")[: len(base.split(".")) - (node.level - 1)]
                        targets = [".".join(anchor + ([node.module] if node.module else []))]
                    else:
                        targets = [node.module or ""]
                else:
                    continue
                for target in targets:
                    theirs = _subpackage(target)
                    if theirs == _subpackage(name) or theirs not in SUBPACKAGES:
                        continue
                    inner = target[len(theirs) :].split(".")
                    if any(part.startswith("_") for part in inner):
                        found.add((name, target))
    return found


def test_no_module_reaches_into_another_subpackage_s_private_modules() -> None:
    found = _reaching_in()
    assert sorted(found - REACHING_IN_STILL) == [], "import the package's public name instead"
    assert sorted(REACHING_IN_STILL - found) == [], "converted: remove it from REACHING_IN_STILL"


def test_the_private_import_finder_sees_a_reach_in_and_its_public_form_passes(
    tmp_path: Path,
) -> None:
    # Guards the test above against reading nothing: on a planted tree the finder names the
    # reach-in (at module level, inside a function, relative or absolute) and passes the
    # public form and a package's use of its own private modules.
    primary = tmp_path / "reconciler" / "primary"
    primary.mkdir(parents=True)
    (primary / "_reach.py").write_text(
        "from reconciler.node._clock import Clock\n"
        "def f():\n    from ..shadow._pass import gather\n"
    )
    (primary / "_public.py").write_text(
        "from reconciler.node import Clock\nfrom reconciler.primary._edges import EFFECTS\n"
    )
    assert _reaching_in(tmp_path) == {
        ("reconciler.primary._reach", "reconciler.node._clock"),
        ("reconciler.primary._reach", "reconciler.shadow._pass"),
    }
    # And the real tree is read: its packages import each other through public names.
    graph = _graph()
    assert "reconciler.node" in graph["reconciler.primary._pass"]
