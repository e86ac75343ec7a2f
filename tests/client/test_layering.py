"""The client side of the protocol (``snakka.client``, ``snakka.spark``) imports only the
protocol package, record batches, util, the import-free snakka.limits and itself: never a
broker-side package. A user who
installs snakka for its share consumer or its Spark source gets no broker code on the path, and
the types both sides share have one home (``snakka.protocol``). Imports under ``TYPE_CHECKING``
and inside functions count too."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[2] / "src" / "snakka"
CLIENT_SIDE = ("client", "spark")
ALLOWED = ("snakka.protocol", "snakka.records", "snakka.util", "snakka.limits", "snakka.client",
           "snakka.spark")


def _snakka_imports(path: Path) -> list[tuple[int, str]]:
    package = ".".join(("snakka",) + path.relative_to(SRC).parent.parts)
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found += [(node.lineno, a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - node.level + 1]
                name = ".".join(base + ([node.module] if node.module else []))
            else:
                name = node.module or ""
            found.append((node.lineno, name))
    return [(line, name) for line, name in found if name.split(".")[0] == "snakka"]


@pytest.mark.parametrize("package", CLIENT_SIDE)
def test_client_side_imports_no_broker_side_package(package: str) -> None:
    files = sorted((SRC / package).rglob("*.py"))
    assert files
    bad = [f"{path.relative_to(SRC)}:{line} imports {name}"
           for path in files for line, name in _snakka_imports(path)
           if name != "snakka" and not name.startswith(tuple(p + "." for p in ALLOWED))
           and name not in ALLOWED]
    assert bad == []


def _module_name(path: Path) -> str:
    parts = ("snakka",) + path.relative_to(SRC).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


@pytest.mark.parametrize("package", ("records", "spark", "client", "protocol"))
def test_package_modules_form_no_import_cycle(package: str) -> None:
    """Inside a low package, imports point one way: the ``__init__`` only re-exports from leaf
    modules, and no leaf imports its package (or a module that imports it) back. Imports inside
    functions count: a lazy import is still an arrow."""
    root = f"snakka.{package}"
    files = [p for p in (SRC / package).rglob("*.py")]
    # Generated protocol messages and C extensions (their .pyi stubs) are leaves: modules that
    # import nothing of the package.
    leaves = {_module_name(p) for p in (SRC / package).rglob("*.pyi")}
    leaves |= {_module_name(p) for p in files if "messages" in p.parts}
    modules = {_module_name(p): p for p in files if _module_name(p) not in leaves}

    def target(name: str) -> str | None:
        while name and name not in modules and name not in leaves:
            name = name.rpartition(".")[0]
        return name or None

    graph = {m: {t for _, name in _snakka_imports(p) if name.startswith(root)
                 and (t := target(name)) is not None and t != m and t not in leaves}
             for m, p in modules.items()}
    seen: dict[str, int] = {}  # 1 = on the stack, 2 = done

    def visit(m: str, stack: list[str]) -> list[str] | None:
        seen[m] = 1
        for d in sorted(graph[m]):
            if seen.get(d) == 1:
                return stack + [m, d]
            if d not in seen and (cycle := visit(d, stack + [m])):
                return cycle
        seen[m] = 2
        return None

    cycles = [c for m in sorted(graph) if m not in seen and (c := visit(m, []))]
    assert cycles == []
