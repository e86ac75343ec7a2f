"""Shared fixtures for the protocol codec tests.

The property tests walk the merged schema model that ``tools/gen_protocol.py``
builds (so they cover every class and version the generator emits); they are
skipped when the Kafka schema folder (``<root>/../shared/kafka-protocol``) is
absent.  CI always has it.
"""

from __future__ import annotations

import importlib.util
import sys
from functools import lru_cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
GEN_PATH = ROOT / "tools" / "gen_protocol.py"
SCHEMAS = ROOT.parent / "shared" / "kafka-protocol"

requires_schemas = pytest.mark.skipif(
    not (SCHEMAS / "messages").is_dir(),
    reason=f"Kafka protocol schemas not found at {SCHEMAS}",
)


@lru_cache(maxsize=1)
def gen_module():
    spec = importlib.util.spec_from_file_location("snakka_gen_protocol", GEN_PATH)
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    spec.loader.exec_module(mod)
    return mod


@lru_cache(maxsize=1)
def messages():
    """The merged schema model, or [] when the schemas are absent."""
    if not (SCHEMAS / "messages").is_dir():
        return []
    return gen_module().load_messages(SCHEMAS)
