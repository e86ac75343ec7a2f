"""Hypothesis strategies for every generated class, derived from the schema model.

``instances(msg, version)`` draws a random, fully populated instance of the
top-level class of ``msg`` that is valid at ``version``: every field present in
that version gets a random value (including tagged fields and nulls where the
version allows them); absent fields keep their defaults.
"""

from __future__ import annotations

import importlib
from functools import cache

from hypothesis import strategies as st

from snakka.protocol.primitives import ZERO_UUID

INT_RANGES = {
    "int8": (-(2**7), 2**7 - 1),
    "int16": (-(2**15), 2**15 - 1),
    "uint16": (0, 2**16 - 1),
    "int32": (-(2**31), 2**31 - 1),
    "uint32": (0, 2**32 - 1),
    "int64": (-(2**63), 2**63 - 1),
}

_TEXT = st.text(alphabet=st.characters(codec="utf-8"), max_size=6)


def primitive(t: str):
    if t == "bool":
        return st.booleans()
    if t in INT_RANGES:
        lo, hi = INT_RANGES[t]
        return st.integers(lo, hi)
    if t == "float64":
        return st.floats(allow_nan=False)
    if t == "string":
        return _TEXT
    if t in ("bytes", "records"):
        return st.binary(max_size=10)
    if t == "uuid":
        return st.just(ZERO_UUID) | st.uuids()
    raise AssertionError(t)


def module_of(msg):
    return importlib.import_module(f"{msg.package}.{msg.module}")


def field_strategy(msg, f, v: int):
    if f.is_array:
        elem = struct_strategy(msg, f.elem, v) if f.is_struct else primitive(f.elem)
        s = st.lists(elem, max_size=2)
    elif f.is_struct:
        s = struct_strategy(msg, f.elem, v)
    else:
        s = primitive(f.type)
    if v in f.nullable:
        s = st.none() | s
    return s


def struct_strategy(msg, cls_name: str, v: int):
    return _struct_strategy(msg.stem, cls_name, v)


_MSGS: dict[str, object] = {}


@cache
def _struct_strategy(stem: str, cls_name: str, v: int):
    msg = _MSGS[stem]
    cls = getattr(module_of(msg), cls_name)
    kwargs = {f.attr: field_strategy(msg, f, v) for f in msg.fields_at(cls_name, v)}
    return st.builds(cls, **kwargs)


def instances(msg, v: int):
    _MSGS[msg.stem] = msg
    return struct_strategy(msg, msg.name, v)
