"""The package layering: layers import downward only, and no two packages import each other.

Every `import` in raidlab/ counts, at module level or inside a function alike (an import
moved into a function to dodge a cycle is still a dependency). A package is `raidlab.X`
(a subpackage, or a top-level module such as raidlab.scenarios). The engine is the
strictest rule: it is code over member disks that gets its time and synchronisation from
raidlab.sched (trio live, raidlab's kernel in virtual time), so it may import only the disks, the
scheduler facade, the block-device helpers, the errors and the unit parsers.
"""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

import raidlab

ROOT = Path(raidlab.__file__).parent

# What the engine may depend on (besides itself and the standard library / third parties).
ENGINE_MAY_IMPORT = {"raidlab.engine", "raidlab.disks", "raidlab.blockdev", "raidlab.errors", "raidlab.units",
                     "raidlab.sched"}


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def imports_of(source: str, module: str, is_package: bool) -> set[str]:
    """The raidlab modules `source` (of `module`) imports, anywhere in the file."""
    package = module if is_package else module.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                if node.level > 1:
                    base = base[: -(node.level - 1)]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            found.add(target)
            # `from raidlab import archs` imports the subpackage raidlab.archs
            found.update(f"{target}.{alias.name}" for alias in node.names)
    return {name for name in found if name == "raidlab" or name.startswith("raidlab.")}


def package_of(module: str, known: set[str]) -> str | None:
    """raidlab.X for a module raidlab.X[.Y...] that exists; None for `raidlab` itself or an
    attribute imported from a module (`from raidlab.errors import UsageError`)."""
    parts = module.split(".")
    if len(parts) < 2:
        return None
    top = ".".join(parts[:2])
    return top if top in known else None


def package_graph(sources: dict[str, tuple[str, bool]]) -> dict[str, set[str]]:
    """raidlab.X -> the raidlab.Y it imports (X != Y)."""
    known = {".".join(m.split(".")[:2]) for m in sources if m.count(".") >= 1}
    graph: dict[str, set[str]] = defaultdict(set)
    for module, (source, is_package) in sources.items():
        mine = package_of(module, known)
        if mine is None:
            continue
        graph.setdefault(mine, set())
        for target in imports_of(source, module, is_package):
            theirs = package_of(target, known)
            if theirs is not None and theirs != mine:
                graph[mine].add(theirs)
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one package (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(graph.get(node, ())):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                top = stack.pop()
                on_stack.discard(top)
                component.append(top)
                if top == node:
                    break
            if len(component) > 1:
                out.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return out


def tree_sources() -> dict[str, tuple[str, bool]]:
    return {module_name(path): (path.read_text(), path.name == "__init__.py") for path in ROOT.rglob("*.py")}


def engine_violations(sources: dict[str, tuple[str, bool]]) -> list[str]:
    known = {".".join(m.split(".")[:2]) for m in sources if m.count(".") >= 1}
    out = []
    for module, (source, is_package) in sorted(sources.items()):
        if package_of(module, known) != "raidlab.engine":
            continue
        for target in sorted(imports_of(source, module, is_package)):
            theirs = package_of(target, known)
            if theirs is not None and theirs not in ENGINE_MAY_IMPORT:
                out.append(f"{module} imports {target}")
    return out


def test_no_package_imports_another_that_imports_it_back():
    found = cycles(package_graph(tree_sources()))
    assert found == [], f"package-level import cycles: {found}"


def test_the_engine_imports_only_disks_blockdev_errors_and_units():
    assert engine_violations(tree_sources()) == []


def test_the_scheduler_facade_is_the_bottom_layer():
    """raidlab.sched answers the engine's and the disks' time and synchronisation: it may
    import nothing of raidlab but itself."""
    sources = tree_sources()
    found = {target for module, (source, is_package) in sources.items()
             if module == "raidlab.sched" or module.startswith("raidlab.sched.")
             for target in imports_of(source, module, is_package)
             if target != "raidlab" and not target.startswith("raidlab.sched")}
    assert found == set()


def test_the_kernel_does_not_import_its_facade():
    """raidlab.sched (the facade) asks its kernel which scheduler runs; the kernel keeps
    that in a context variable of its own and imports nothing of raidlab."""
    source, is_package = tree_sources()["raidlab.sched.kernel"]
    assert {t for t in imports_of(source, "raidlab.sched.kernel", is_package) if t.startswith("raidlab")} == set()


# The one place under these packages that runs trio itself: the disk benchmark's live trio.run.
TRIO_RUNNERS = {"raidlab.disks.bench"}


def test_the_engine_and_the_disks_ask_sched_not_trio():
    """Code that runs in virtual time (the engine, the disks, the architectures, the
    policies) takes time and synchronisation from raidlab.sched, so virtual time runs it on
    raidlab's kernel; only the live trio runner imports trio."""
    found = sorted(module for module, (source, is_package) in tree_sources().items()
                   if module.split(".")[:2] in (["raidlab", "engine"], ["raidlab", "disks"], ["raidlab", "archs"],
                                                ["raidlab", "policies"])
                   and module not in TRIO_RUNNERS
                   and any(isinstance(node, (ast.Import, ast.ImportFrom))
                           and any((alias.name if isinstance(node, ast.Import) else node.module or "").split(".")[0]
                                   == "trio" for alias in node.names)
                           for node in ast.walk(ast.parse(source))))
    assert found == []


def test_the_checks_catch_an_engine_module_that_imports_the_service():
    """The checks can fail: the same tree with raidlab/engine/array.py importing the service
    (inside a function, as a cycle dodge would) breaks both rules."""
    sources = tree_sources()
    source, is_package = sources["raidlab.engine.array"]
    sources["raidlab.engine.array"] = (source + "\n\ndef _dodge():\n    from raidlab.service import control\n",
                                       is_package)
    assert engine_violations(sources) == ["raidlab.engine.array imports raidlab.service",
                                          "raidlab.engine.array imports raidlab.service.control"]
    assert any("raidlab.engine" in c and "raidlab.service" in c for c in cycles(package_graph(sources)))


def test_every_module_imports():
    """No module is broken or reachable only by luck (an architecture module that fails to
    import would otherwise surface only when its command runs)."""
    import importlib

    for module in sorted(tree_sources()):
        if module.endswith("__main__"):
            continue
        importlib.import_module(module)
