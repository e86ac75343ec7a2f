"""Differential test against kafka-python 3's independent schema-driven encoder.

kafka-python 3 ships its own copy of (a slightly different revision of) the
Kafka JSON schemas and its own code generator.  For every API it implements
and every version both sides support, random instances drawn from our schema
model are converted to kafka-python objects; both libraries must produce
byte-identical encodings, and ours must decode kafka-python's bytes back to
the same object.

Tagged fields equal to their default are not passed to kafka-python, because
it writes explicitly-set tagged fields even when they hold the default while
Kafka (and we) omit them.
"""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from .conftest import messages, requires_schemas
from .strategies import instances, module_of

api_message = pytest.importorskip("kafka.protocol.api_message")
_kp_modules = [
    pytest.importorskip(f"kafka.protocol.{m}")
    for m in ("metadata", "consumer", "admin", "producer")
]

pytestmark = requires_schemas

# kafka-python attribute names that differ from the schema field names
RENAMES = {
    "cluster_authorized_operations": "authorized_operations",
    "topic_authorized_operations": "authorized_operations",
    "generation_id_or_member_epoch": "generation_id",
}


def _kafka_python_classes():
    found = {}
    for mod in _kp_modules:
        for name in dir(mod):
            obj = getattr(mod, name)
            if (
                isinstance(obj, type)
                and issubclass(obj, api_message.ApiMessage)
                and obj is not api_message.ApiMessage
            ):
                found[obj.json["name"]] = obj
    return found


KP = _kafka_python_classes()
MSGS = {m.name: m for m in messages()}
PAIRS = sorted(n for n in KP if n in MSGS)


def _to_kafka_python(obj, kcls, v, msg, cls_name, defaults):
    kw = {}
    fields = kcls._struct.fields
    for f in msg.fields_at(cls_name, v):
        val = getattr(obj, f.attr)
        if v in f.tagged and val == defaults[cls_name][f.attr]:
            continue
        name = RENAMES.get(f.attr, f.attr) if f.attr not in fields else f.attr
        kf = fields[name]
        if f.is_struct:
            dc = kf.data_class
            if f.is_array:
                val = (
                    None
                    if val is None
                    else [_to_kafka_python(e, dc, v, msg, f.elem, defaults) for e in val]
                )
            else:
                val = None if val is None else _to_kafka_python(val, dc, v, msg, f.elem, defaults)
        elif f.type == "records" and val is not None:
            val = bytes(val)
        elif getattr(kf, "type_str", None) == "bitfield":
            val = {i for i in range(32) if (val & 0xFFFFFFFF) >> i & 1}
        kw[name] = val
    if issubclass(kcls, api_message.ApiMessage):
        return kcls[v](**kw)
    return kcls(**kw)


@pytest.mark.parametrize("name", PAIRS)
@settings(max_examples=4, deadline=None, suppress_health_check=list(HealthCheck))
@given(data=st.data())
def test_same_bytes_as_kafka_python(name, data):
    msg, kcls = MSGS[name], KP[name]
    mod = module_of(msg)
    defaults = {
        c: {a.attr: getattr(getattr(mod, c)(), a.attr) for a in cm.attrs}
        for c, cm in msg.classes.items()
    }
    cls = getattr(mod, msg.name)
    lo, hi = kcls.valid_versions
    for v in msg.versions:
        if not lo <= v <= hi:
            continue
        obj = data.draw(instances(msg, v), label=f"v{v}")
        ours = obj.encode(v)
        theirs = bytes(_to_kafka_python(obj, kcls, v, msg, msg.name, defaults).encode())
        assert ours == theirs, f"{name} v{v}"
        assert cls.decode(theirs, v) == obj


def test_coverage_of_differential_test():
    # kafka-python implements ~55 APIs; make sure the test does not silently shrink.
    assert len(PAIRS) >= 100
