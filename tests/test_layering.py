"""The package's layers, read from its imports (with `ast`; nothing is imported).

Every import counts, at module level and inside functions alike: an import moved into a function
to dodge a cycle still runs, so the cycle is still there. The rules (docs/design.md, Layers):

- `_src/runtime/` (device code) never reaches the compiler or the front ends, even through other
  modules;
- `_src/compile/` (host numpy code) never reaches the runtime or any layer above it (front ends,
  fusion, generation, serving helpers, the public package), even through other modules; it
  builds the tables modules (device pytrees) and touches `jax` itself only to put finished
  tables on the device (`jax.device_put`, `jax.Array`), importing no jax submodule;
- no import cycle, between modules nor between layers (a subpackage of `_src` counts as one
  layer, every other module as its own);
- every module says what it is in a docstring.
"""

from __future__ import annotations

import ast
import itertools
import pathlib

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
PACKAGE = "ananke_jax"


def _modules() -> dict[str, tuple[pathlib.Path, bool]]:
    """Every module of the package: dotted name -> (file, is a package)."""
    out = {}
    for path in sorted((ROOT / PACKAGE).rglob("*.py")):
        parts = list(path.relative_to(ROOT).with_suffix("").parts)
        is_package = parts[-1] == "__init__"
        out[".".join(parts[:-1] if is_package else parts)] = (path, is_package)
    return out


MODULES = _modules()
TREES = {name: ast.parse(path.read_text(), str(path)) for name, (path, _) in MODULES.items()}


def _innermost(name: str) -> str | None:
    """The module of the package that importing ``name`` runs last (None: outside the package)."""
    while name and name not in MODULES:
        name = name.rpartition(".")[0]
    return name or None


def _targets(module: str, node: ast.Import | ast.ImportFrom) -> list[str]:
    """The package modules one import statement of ``module`` runs."""
    if isinstance(node, ast.Import):
        return [t for alias in node.names if (t := _innermost(alias.name))]
    base = node.module or ""
    if node.level:
        here = module.split(".") if MODULES[module][1] else module.split(".")[:-1]
        anchor = ".".join(here[: len(here) - node.level + 1])
        base = f"{anchor}.{base}" if base else anchor
    # `from pkg import sub` runs the submodule; `from pkg import name` runs the package.
    return [t for alias in node.names if (t := _innermost(f"{base}.{alias.name}" if f"{base}.{alias.name}" in MODULES else base))]


def _imports() -> dict[str, dict[str, int]]:
    """module -> {imported package module: line of its first import}."""
    graph = {}
    for module, tree in TREES.items():
        edges: dict[str, int] = {}
        for node in ast.walk(tree):
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                for target in _targets(module, node):
                    if target != module:
                        edges.setdefault(target, node.lineno)
        graph[module] = edges
    return graph


IMPORTS = _imports()


def _layer(module: str) -> str:
    """A subpackage of `_src` is one layer; any other module is its own."""
    parts = module.split(".")
    if len(parts) >= 3 and parts[1] == "_src" and MODULES.get(".".join(parts[:3]), (None, False))[1]:
        return ".".join(parts[:3])
    return module


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """One cycle (a list of nodes, the first repeated at the end) per strongly connected
    component of more than one node (Tarjan's algorithm)."""
    index, low, stack, on_stack, components = {}, {}, [], set(), []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = set()
            while v not in component:
                component.add(stack.pop())
            on_stack.difference_update(component)
            if len(component) > 1:
                components.append(component)

    for v in sorted(graph):
        if v not in index:
            visit(v)
    cycles = []
    for component in components:  # the shortest way back to the component's first node
        start = min(component)
        paths, seen = [[start]], {start}
        while paths:
            path = paths.pop(0)
            nexts = sorted(graph[path[-1]] & component)
            if start in nexts:
                cycles.append([*path, start])
                break
            for w in nexts:
                if w not in seen:
                    seen.add(w)
                    paths.append([*path, w])
    return cycles


def _described(cycle: list[str], why) -> str:
    """``a -> b -> a`` and, for each step, ``why(a, b)``: the import that makes it."""
    return " -> ".join(cycle) + "  (" + "; ".join(why(a, b) for a, b in itertools.pairwise(cycle)) + ")"


def _reached(module: str) -> dict[str, list[str]]:
    """Every package module ``module`` runs, each with one import path to it."""
    paths, todo = {module: [module]}, [module]
    while todo:
        current = todo.pop(0)
        for target in sorted(IMPORTS[current]):
            if target not in paths:
                paths[target] = [*paths[current], target]
                todo.append(target)
    return paths


def _inside(module: str, *prefixes: str) -> bool:
    return any(module == p or module.startswith(p + ".") for p in prefixes)


def test_the_graph_sees_the_package():
    assert "ananke_jax._src.engines.pushdown" in MODULES
    assert "ananke_jax._src.engines.protocol" in IMPORTS["ananke_jax._src.runtime.constraint"]
    assert len(MODULES) > 50


def test_no_import_cycle_between_modules():
    graph = {m: set(edges) for m, edges in IMPORTS.items()}
    cycles = _cycles(graph)
    why = lambda a, b: f"{a} imports {b} at line {IMPORTS[a][b]}"
    assert not cycles, "import cycles between modules:\n" + "\n".join(_described(c, why) for c in cycles)


def test_no_import_cycle_between_layers():
    graph: dict[str, set[str]] = {}
    where: dict[tuple[str, str], str] = {}
    for module, edges in IMPORTS.items():
        graph.setdefault(_layer(module), set())
        for target, line in edges.items():
            a, b = _layer(module), _layer(target)
            if a != b:
                graph[a].add(b)
                where.setdefault((a, b), f"{module} imports {target} at line {line}")
    cycles = _cycles(graph)
    assert not cycles, "import cycles between layers:\n" + "\n".join(_described(c, lambda a, b: where[a, b]) for c in cycles)


RUNTIME = "ananke_jax._src.runtime"
COMPILE = "ananke_jax._src.compile"
FRONT_ENDS = ("ananke_jax._src.frontends", "ananke_jax._src.json_schema")
ABOVE_COMPILE = (
    *FRONT_ENDS,
    RUNTIME,
    "ananke_jax._src.fusion",
    "ananke_jax._src.generate",
    "ananke_jax._src.matcher",
    "ananke_jax._src.drafts",
    "ananke_jax._src.bank",
    "ananke_jax._src.serialize",
    "ananke_jax._src.cli",
    "ananke_jax._src.grammar_text",
    "ananke_jax._src.models",
    "ananke_jax.fusion",
    "ananke_jax.models",
    "ananke_jax.__main__",
)


@pytest.mark.parametrize("module", [m for m in MODULES if _inside(m, RUNTIME)])
def test_runtime_never_reaches_the_compiler_or_front_ends(module):
    bad = {m: path for m, path in _reached(module).items() if _inside(m, COMPILE, *FRONT_ENDS)}
    assert not bad, "\n".join(" -> ".join(path) for path in bad.values())


@pytest.mark.parametrize("module", [m for m in MODULES if _inside(m, COMPILE)])
def test_compiler_never_reaches_the_runtime_or_the_layers_above(module):
    bad = {m: path for m, path in _reached(module).items() if m == PACKAGE or _inside(m, *ABOVE_COMPILE)}
    assert not bad, "\n".join(" -> ".join(path) for path in bad.values())


@pytest.mark.parametrize("module", [m for m in MODULES if _inside(m, COMPILE)])
def test_compiler_touches_jax_only_to_place_tables(module):
    tree = TREES[module]
    submodules = [
        f"line {n.lineno}: {ast.unparse(n)}"
        for n in ast.walk(tree)
        if (isinstance(n, ast.Import) and any(a.name.startswith("jax.") or a.name == "jaxlib" for a in n.names))
        or (isinstance(n, ast.ImportFrom) and (n.module or "").split(".")[0] in ("jax", "jaxlib"))
    ]
    assert not submodules, "jax submodules in host code:\n" + "\n".join(submodules)
    uses = {n.attr for n in ast.walk(tree) if isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name) and n.value.id == "jax"}
    assert uses <= {"device_put", "Array"}, f"jax.{sorted(uses - {'device_put', 'Array'})} in host code"


@pytest.mark.parametrize("module", sorted(MODULES))
def test_every_module_says_what_it_is(module):
    assert ast.get_docstring(TREES[module]), f"{MODULES[module][0].relative_to(ROOT)} has no module docstring"
