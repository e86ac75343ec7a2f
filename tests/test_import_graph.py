"""The import graph of src/snakka keeps the layering of docs/architecture.md (issue 10).

The graph is built from the source, not from a running interpreter, so it sees every import a
module could execute: module level, inside functions (lazy imports), under
``if TYPE_CHECKING:`` (a type-only import is still an arrow between layers: the day someone
needs the object at run time it becomes a real one), and ``importlib.import_module`` /
``__import__`` with a literal name (or a literal prefix: ``f"snakka.handlers.{name}"`` is an
arrow to the package ``snakka.handlers``). A node is a module; a package's ``__init__`` is the
node named after the package. An import names the deepest module it reaches:
``from snakka.records import batch`` is an arrow to ``snakka.records.batch`` when that is a
module, ``from snakka.records import Record`` an arrow to the package ``snakka.records``. C
extensions (``_recordwalk.c`` / ``.so``) are leaf nodes.

What is asserted (the acceptance checks of issue 10):

- no cycle: every strongly connected component is a single module;
- arrows point down ``LAYERS`` (entry points > server > handlers > coordinators > replica >
  storage > cores > base; client-side code beside them, on the base only), in particular:
  the storage, cores, base, replica and controller never import handlers, server, the broker,
  the CLI or testing; client/ and spark/ import only protocol/, records/, util/, limits.py and
  each other; nothing but the entry points imports ``snakka.broker``;
- every module has a layer, so a new package has to be placed in the table on purpose.

Failures name each offending import as ``file:line``. Run ``python tests/test_import_graph.py``
for the full report without pytest.
"""

from __future__ import annotations

import ast
import sys
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src"
PACKAGE = "snakka"

# The layers, top to bottom: layer -> (the modules it holds, the layers it may import besides
# itself). A listed name holds that module and every module below it; a module belongs to the
# layer of its longest listed name. The root package's __init__ (``snakka``, a version string)
# is in "base". Where a listed module does not exist yet, it is where issue 10 puts it.
ENTRY, SERVER, HANDLERS, COORDINATORS = "entry points", "server", "handlers", "coordinators"
REPLICA, STORAGE, CORES, BASE, CLIENT = "replica", "storage", "cores", "base", "client side"
LAYERS: dict[str, tuple[tuple[str, ...], frozenset[str]]] = {
    # Wiring and the programs that start a broker or work on its stopped data directory
    # (snakka.migrate): they may import anything.
    ENTRY: (("snakka.cli", "snakka.__main__", "snakka.broker", "snakka.testing", "snakka.demo",
             "snakka.migrate"),
            frozenset({SERVER, HANDLERS, COORDINATORS, REPLICA, STORAGE, CORES, BASE, CLIENT})),
    # Listeners, connections (asyncio shell over the sans-I/O core), dispatch; the web console
    # (an HTTP server beside them, calling the handlers in-process).
    SERVER: (("snakka.server", "snakka.console"),
             frozenset({HANDLERS, COORDINATORS, REPLICA, STORAGE, CORES, BASE})),
    # One module per Kafka API, the typed RequestContext, handlers/services.py.
    HANDLERS: (("snakka.handlers",), frozenset({COORDINATORS, REPLICA, STORAGE, CORES, BASE})),
    # The shells that own internal topics and cluster state, over the replica manager; the
    # metadata log's store (a log, as KRaft's __cluster_metadata) is the controller's.
    COORDINATORS: (("snakka.groups.coordinator", "snakka.share.manager", "snakka.share.persister",
                    "snakka.coordinator_log", "snakka.controller", "snakka.fetch_sessions",
                    "snakka.metadata.store", "snakka.txn.manager",
                    "snakka.remote.metadata_manager", "snakka.remote.manager"),
                   frozenset({REPLICA, STORAGE, CORES, BASE})),
    # Append, read, leadership and epochs: the one place durability is decided.
    REPLICA: (("snakka.replica",), frozenset({STORAGE, CORES, BASE})),
    # Unified log over local log, loader, validator, log manager, flush scheduler.
    STORAGE: (("snakka.storage", "snakka.topic_policy", "snakka.remote.storage",
               "snakka.remote.reader"), frozenset({CORES, BASE})),
    # Sans-I/O state machines and their configuration.
    CORES: (("snakka.metadata", "snakka.groups", "snakka.share", "snakka.txn", "snakka.config",
             "snakka.security", "snakka.remote", "snakka.telemetry"), frozenset({BASE})),
    # What both sides of the wire share: codecs, record batches, limits, small utilities.
    BASE: (("snakka.records", "snakka.protocol", "snakka.util", "snakka.limits"), frozenset()),
    # Protocol-level clients (share consumer, admin) and the Spark data source.
    CLIENT: (("snakka.client", "snakka.spark"), frozenset({BASE})),
}

# Issue 10's rule for the lower layers: storage/, the cores and base, replica/ and controller/
# (a coordinator) never import handlers/, server/ or an entry point.
LOWER = (STORAGE, CORES, BASE, REPLICA)
UPPER = (HANDLERS, SERVER, ENTRY)


def _is_lower(module: str) -> bool:
    return (layer_of(module) in LOWER or module == "snakka.controller"
            or module.startswith("snakka.controller."))


@dataclass(frozen=True)
class Edge:
    """``source`` imports ``target`` at ``path:line``."""

    source: str
    target: str
    path: Path
    line: int
    type_checking: bool = False

    def where(self) -> str:
        try:
            shown = self.path.relative_to(SRC.parent)
        except ValueError:
            shown = self.path
        how = " (under TYPE_CHECKING)" if self.type_checking else ""
        return f"{shown}:{self.line}: {self.source} imports {self.target}{how}"


def find_modules(root: Path, package: str) -> dict[str, Path]:
    """Module name -> file for every module of ``package`` under ``root`` (the directory that
    holds the package): ``.py`` sources, packages as their ``__init__.py``, and C extensions
    (``name.c`` or ``name.*.so``) as leaves."""
    modules: dict[str, Path] = {}
    for path in sorted((root / package).rglob("*")):
        if path.suffix not in (".py", ".c", ".so") or "__pycache__" in path.parts:
            continue
        parts = list(path.relative_to(root).with_suffix("").parts)
        parts[-1] = parts[-1].split(".")[0]  # _recordwalk.cpython-311-x86_64-linux-gnu
        if parts[-1] == "__init__":
            parts.pop()
        name = ".".join(parts)
        if path.suffix == ".py" or name not in modules:
            modules[name] = path
    return modules


def _resolve(name: str, modules: Mapping[str, Path]) -> str | None:
    """The deepest existing module ``name`` reaches (itself, or its nearest package)."""
    while name:
        if name in modules:
            return name
        name = name.rpartition(".")[0]
    return None


def _is_type_checking(test: ast.expr) -> bool:
    return ((isinstance(test, ast.Name) and test.id == "TYPE_CHECKING")
            or (isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"))


def _literal_module(node: ast.Call) -> str | None:
    """The module name of ``importlib.import_module("x")`` / ``__import__("x")``, or the literal
    prefix of an f-string argument (``f"snakka.handlers.{n}"`` -> ``snakka.handlers``)."""
    func = node.func
    name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", None)
    if name not in ("import_module", "__import__") or not node.args:
        return None
    arg = node.args[0]
    if isinstance(arg, ast.Constant) and isinstance(arg.value, str):
        return arg.value
    if isinstance(arg, ast.JoinedStr) and arg.values and isinstance(arg.values[0], ast.Constant):
        return str(arg.values[0].value).rstrip(".")
    return None


def module_edges(module: str, path: Path, modules: Mapping[str, Path],
                 package: str = PACKAGE) -> list[Edge]:
    """Every import of ``package`` modules that ``module`` (the file ``path``) makes."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    is_package = path.name == "__init__.py"
    edges: list[Edge] = []
    seen: set[Edge] = set()

    def add(target_name: str, node: ast.AST, type_checking: bool) -> None:
        if target_name != package and not target_name.startswith(package + "."):
            return
        target = _resolve(target_name, modules)
        if target is not None and target != module:
            edge = Edge(module, target, path, node.lineno, type_checking)
            if edge not in seen:  # `from x import a, b`: one arrow
                seen.add(edge)
                edges.append(edge)

    def visit(node: ast.AST, type_checking: bool) -> None:
        if isinstance(node, ast.Import):
            for alias in node.names:
                add(alias.name, node, type_checking)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = module.split(".") if is_package else module.split(".")[:-1]
                base = base[:len(base) - node.level + 1]
                name = ".".join(base + ([node.module] if node.module else []))
            else:
                name = node.module or ""
            for alias in node.names:
                full = f"{name}.{alias.name}"
                add(full if full in modules else name, node, type_checking)
        elif isinstance(node, ast.Call) and (literal := _literal_module(node)):
            add(literal, node, type_checking)
        if isinstance(node, ast.If) and _is_type_checking(node.test):
            for child in node.body:
                visit(child, True)
            for child in node.orelse:
                visit(child, type_checking)
            visit(node.test, type_checking)
            return
        for child in ast.iter_child_nodes(node):
            visit(child, type_checking)

    visit(tree, False)
    return edges


def build_graph(root: Path = SRC, package: str = PACKAGE) -> tuple[dict[str, Path], list[Edge]]:
    """(modules, edges) of ``package`` under ``root``."""
    modules = find_modules(root, package)
    edges = [edge for name, path in modules.items() if path.suffix == ".py"
             for edge in module_edges(name, path, modules, package)]
    return modules, edges


def cycles(modules: Iterable[str], edges: Iterable[Edge]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan, iterative), each
    sorted, in sorted order."""
    graph: dict[str, set[str]] = defaultdict(set)
    for edge in edges:
        graph[edge.source].add(edge.target)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for start in sorted(modules):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            for child in children:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                    break
                if child in on_stack:
                    low[node] = min(low[node], index[child])
            else:
                work.pop()
                if work:
                    parent = work[-1][0]
                    low[parent] = min(low[parent], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == node:
                            break
                    if len(component) > 1:
                        found.append(sorted(component))
    return sorted(found)


def layer_of(module: str, layers: Mapping[str, tuple[tuple[str, ...], frozenset[str]]] = LAYERS,
             package: str = PACKAGE) -> str | None:
    """The layer holding ``module`` (its longest listed name), or None."""
    if module == package:
        return BASE
    best: tuple[int, str] | None = None
    for layer, (names, _) in layers.items():
        for name in names:
            if (module == name or module.startswith(name + ".")) and (
                    best is None or len(name) > best[0]):
                best = (len(name), layer)
    return best[1] if best else None


def layer_violations(edges: Iterable[Edge],
                     layers: Mapping[str, tuple[tuple[str, ...], frozenset[str]]] = LAYERS,
                     package: str = PACKAGE) -> list[tuple[str, str, Edge]]:
    """(importer layer, target layer, edge) for every arrow the table does not allow."""
    out = []
    for edge in edges:
        src, dst = layer_of(edge.source, layers, package), layer_of(edge.target, layers, package)
        if src is None or dst is None or src == dst:
            continue
        if dst not in layers[src][1]:
            out.append((src, dst, edge))
    return out


def _report(violations: list[tuple[str, str, Edge]]) -> str:
    lines = []
    for src, dst, edge in sorted(violations, key=lambda v: (str(v[2].path), v[2].line)):
        allowed = ", ".join(sorted(LAYERS[src][1])) or "nothing outside itself"
        lines.append(f"  {edge.where()}  [{src} -> {dst}; {src} may import: {allowed}]")
    return "\n".join(lines)


def _cycle_report(components: list[list[str]], edges: list[Edge]) -> str:
    lines = []
    for component in components:
        members = set(component)
        lines.append(f"  cycle of {len(component)} modules: {', '.join(component)}")
        lines += [f"    {e.where()}" for e in sorted(edges, key=lambda e: (str(e.path), e.line))
                  if e.source in members and e.target in members]
    return "\n".join(lines)


# ---------------------------------------------------------------------------------------------
# The graph builder itself, on a tiny package written for the purpose.

def _write(root: Path, files: Mapping[str, str]) -> None:
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)


TINY = {
    "pkg/__init__.py": "from .a import A\n",
    "pkg/a.py": ("from typing import TYPE_CHECKING\n"
                 "\n"
                 "if TYPE_CHECKING:\n"
                 "    from pkg.b import B\n"
                 "else:\n"
                 "    import pkg.sub.c\n"
                 "A = 1\n"),
    "pkg/b.py": "from . import a\nB = 2\n",
    "pkg/sub/__init__.py": "from .. import b\nfrom ..b import B\n",
    "pkg/sub/c.py": ("import importlib\n"
                     "\n"
                     "def load(name):\n"
                     "    importlib.import_module('pkg.d')\n"
                     "    return importlib.import_module(f'pkg.sub.{name}')\n"),
    "pkg/d.py": "from ._ext import fast\nimport os.path\nfrom pkg.missing import x\n",
    "pkg/_ext.c": "/* a C extension */\n",
}


def _edges(edges: list[Edge]) -> set[tuple[str, str, int, bool]]:
    return {(e.source, e.target, e.line, e.type_checking) for e in edges}


def test_builder_resolves_relative_type_checking_lazy_and_extension_imports(tmp_path):
    _write(tmp_path, TINY)
    modules, edges = build_graph(tmp_path, "pkg")
    assert set(modules) == {"pkg", "pkg.a", "pkg.b", "pkg.sub", "pkg.sub.c", "pkg.d", "pkg._ext"}
    assert _edges(edges) == {
        ("pkg", "pkg.a", 1, False),                 # relative, from a package's __init__
        ("pkg.a", "pkg.b", 4, True),                # TYPE_CHECKING counts, and says so
        ("pkg.a", "pkg.sub.c", 6, False),           # its else branch is a real import
        ("pkg.b", "pkg.a", 1, False),               # `from . import a`: the submodule
        ("pkg.sub", "pkg.b", 1, False),             # level 2 from a package's __init__
        ("pkg.sub", "pkg.b", 2, False),
        ("pkg.sub.c", "pkg.d", 4, False),           # importlib with a literal name, lazily
        ("pkg.sub.c", "pkg.sub", 5, False),         # an f-string: its literal prefix
        ("pkg.d", "pkg._ext", 1, False),            # a C extension is a leaf, not the package
        ("pkg.d", "pkg", 3, False),                 # a missing module: its nearest package
    }
    assert edges[0].where().endswith("pkg/__init__.py:1: pkg imports pkg.a")
    assert "(under TYPE_CHECKING)" in next(e for e in edges if e.type_checking).where()


def test_builder_finds_cycles_through_packages_and_type_checking(tmp_path):
    _write(tmp_path, TINY)
    modules, edges = build_graph(tmp_path, "pkg")
    # a -> b -> a (the TYPE_CHECKING arrow closes it); a -> sub.c -> d -> pkg -> a (through a
    # package's __init__); sub.c -> sub -> b -> a -> sub.c (the f-string's package).
    assert cycles(modules, edges) == [
        ["pkg", "pkg.a", "pkg.b", "pkg.d", "pkg.sub", "pkg.sub.c"]]
    acyclic = [e for e in edges
               if not e.type_checking and e.source not in ("pkg.d", "pkg.sub.c")]
    assert cycles(modules, acyclic) == []
    report = _cycle_report(cycles(modules, edges), edges)
    assert "pkg/a.py:4: pkg.a imports pkg.b (under TYPE_CHECKING)" in report


def test_layer_table_reports_upward_arrows_with_file_and_line(tmp_path):
    _write(tmp_path, {"pkg/__init__.py": "", "pkg/top.py": "from pkg import low\n",
                      "pkg/low/__init__.py": "", "pkg/low/core.py": "\n\nimport pkg.top\n"})
    _, edges = build_graph(tmp_path, "pkg")
    layers = {"top": (("pkg.top",), frozenset({"low"})), "low": (("pkg.low",), frozenset())}
    [(src, dst, edge)] = layer_violations(edges, layers, "pkg")
    assert (src, dst, edge.source, edge.target, edge.line) == (
        "low", "top", "pkg.low.core", "pkg.top", 3)
    assert layer_of("pkg.low.core", layers, "pkg") == "low"
    assert layer_of("pkg.lower", layers, "pkg") is None  # a prefix is a module name, not text


# ---------------------------------------------------------------------------------------------
# snakka itself.

_GRAPH: list[tuple[dict[str, Path], list[Edge]]] = []


def _snakka() -> tuple[dict[str, Path], list[Edge]]:
    if not _GRAPH:
        _GRAPH.append(build_graph())
    return _GRAPH[0]


def test_every_module_has_a_layer():
    modules, _ = _snakka()
    assert len(modules) > 100, "src/snakka not found"
    lost = sorted(m for m in modules if layer_of(m) is None)
    assert not lost, ("modules in no layer (place them in LAYERS of tests/test_import_graph.py "
                      "and docs/architecture.md): " + ", ".join(lost))


def test_no_import_cycles():
    modules, edges = _snakka()
    found = cycles(modules, edges)
    assert not found, "import cycles (every import counts):\n" + _cycle_report(found, edges)


def test_lower_layers_never_import_handlers_server_or_entry_points():
    _, edges = _snakka()
    bad = [v for v in layer_violations(edges) if _is_lower(v[2].source) and v[1] in UPPER]
    assert not bad, ("storage, cores, base, replica and controller import upward:\n"
                     + _report(bad))


def test_client_side_imports_only_protocol_records_util_and_limits():
    _, edges = _snakka()
    bad = [v for v in layer_violations(edges) if v[0] == CLIENT]
    assert not bad, "client/ and spark/ import broker-side modules:\n" + _report(bad)


def test_only_entry_points_import_the_broker():
    _, edges = _snakka()
    bad = [(layer_of(e.source) or "?", ENTRY, e) for e in edges
           if e.target == "snakka.broker" and layer_of(e.source) != ENTRY]
    assert not bad, ("snakka.broker is imported by more than cli, __main__, testing and the "
                     "demo:\n" + _report(bad))


def test_arrows_point_down_the_layers():
    _, edges = _snakka()
    bad = layer_violations(edges)
    assert not bad, "imports against the layering (LAYERS):\n" + _report(bad)


if __name__ == "__main__":
    mods, all_edges = build_graph()
    print(_cycle_report(cycles(mods, all_edges), all_edges) or "no cycles")
    print(_report(layer_violations(all_edges)) or "no layering violations")
    sys.exit(0)
