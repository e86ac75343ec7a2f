"""Every fixed bound has one definition, in :mod:`snakka.limits` (configs have theirs in
:mod:`snakka.config`): no other module re-defines a limit's name or spells Java's
``Integer.MAX_VALUE`` / ``Long.MAX_VALUE`` as a literal, and the cores' fallback config values
are the config table's defaults."""

from __future__ import annotations

import ast
import dataclasses
import functools
from pathlib import Path

import snakka.limits as limits
from snakka.config import BROKER_CONFIGS, broker_default_int
from snakka.groups.types import GroupConfig
from snakka.share.types import SharePartitionConfig

SRC = Path(limits.__file__).resolve().parent
LIMIT_NAMES = {n for n in vars(limits) if n.isupper()}
INT_RANGE_VALUES = {2**31 - 1, 2**63 - 1, -(2**63)}

# Modules that still define their own copy of a limit (none: keep it that way).
PENDING_REPOINT: dict[str, set[object]] = {}
# Not a bound: Kafka's Utils.toPositive masks the sign bit of a hash.
MASKS = {"util/murmur2.py"}


@functools.cache
def _modules() -> list[tuple[str, ast.Module]]:
    out = []
    for path in sorted(SRC.rglob("*.py")):
        rel = path.relative_to(SRC).as_posix()
        if rel != "limits.py" and not rel.startswith("protocol/messages/"):
            out.append((rel, ast.parse(path.read_text(), rel)))
    return out


def _constant_value(node: ast.AST) -> object:
    """The value of a constant expression (``2**31 - 1``, ``-(2**63)``), else None."""
    if isinstance(node, ast.Constant):
        return node.value
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        v = _constant_value(node.operand)
        return -v if isinstance(v, int) else None
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Pow | ast.Sub | ast.Add):
        a, b = _constant_value(node.left), _constant_value(node.right)
        if not (isinstance(a, int) and isinstance(b, int)):
            return None
        if isinstance(node.op, ast.Pow):
            return a**b if 0 <= b <= 64 else None
        return a - b if isinstance(node.op, ast.Sub) else a + b
    return None


def test_no_module_redefines_a_limit() -> None:
    found = {}
    for rel, tree in _modules():
        names = {t.id for node in tree.body if isinstance(node, ast.Assign)
                 for t in node.targets if isinstance(t, ast.Name) and t.id in LIMIT_NAMES}
        if names - PENDING_REPOINT.get(rel, set()):
            found[rel] = sorted(names - PENDING_REPOINT.get(rel, set()))
    assert found == {}


def test_integer_range_bounds_are_not_spelled_as_literals() -> None:
    found = []
    for rel, tree in _modules():
        if rel in MASKS:
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.BinOp | ast.UnaryOp | ast.Constant):
                v = _constant_value(node)
                if (isinstance(v, int) and not isinstance(v, bool) and v in INT_RANGE_VALUES
                        and v not in PENDING_REPOINT.get(rel, set())):
                    found.append(f"{rel}:{node.lineno}")
    assert sorted(set(found)) == []


def test_limits_is_a_leaf() -> None:
    tree = ast.parse(Path(limits.__file__).read_text())
    imports = [n for n in ast.walk(tree) if isinstance(n, ast.Import | ast.ImportFrom)]
    assert [ast.unparse(n) for n in imports] == ["from __future__ import annotations"]


def test_core_config_fallbacks_are_the_config_defaults() -> None:
    fields = {f.name: f.default for f in dataclasses.fields(GroupConfig)
              if f.default is not dataclasses.MISSING}
    renamed = {"offset_metadata_max_bytes": "offset.metadata.max.bytes"}
    for name, default in fields.items():
        key = renamed.get(name, name.replace("_", "."))
        assert key in BROKER_CONFIGS, name
        if isinstance(default, int):
            assert default == broker_default_int(key), name
    share = SharePartitionConfig()
    assert share.record_lock_duration_ms == broker_default_int("group.share.record.lock.duration.ms")
    assert share.delivery_count_limit == broker_default_int("group.share.delivery.count.limit")
    assert share.max_record_locks == broker_default_int("group.share.partition.max.record.locks")
