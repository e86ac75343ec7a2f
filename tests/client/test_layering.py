"""The client side of the protocol (``snakka.client``, ``snakka.spark``) imports only the
protocol package, record batches, util and itself: never a broker-side package. A user who
installs snakka for its share consumer or its Spark source gets no broker code on the path, and
the types both sides share have one home (``snakka.protocol``). Imports under ``TYPE_CHECKING``
and inside functions count too."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[2] / "src" / "snakka"
CLIENT_SIDE = ("client", "spark")
ALLOWED = ("snakka.protocol", "snakka.records", "snakka.util", "snakka.client", "snakka.spark")


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
