"""Property tests: every class round-trips at every version.

For each schema (requests, responses, headers, data schemas) and each of its
versions, random fully-populated instances must satisfy
``decode(encode(x)) == x`` and re-encode to identical bytes, also when read at
an offset inside a larger buffer with trailing garbage.
"""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from .conftest import messages, requires_schemas
from .strategies import instances, module_of

MSGS = messages()

pytestmark = requires_schemas


@pytest.mark.parametrize("msg", MSGS, ids=[m.stem for m in MSGS])
@settings(
    max_examples=8,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(data=st.data())
def test_roundtrip_every_version(msg, data):
    cls = getattr(module_of(msg), msg.name)
    assert cls.VALID_VERSIONS == (msg.versions[0], msg.versions[-1])
    for v in msg.versions:
        obj = data.draw(instances(msg, v), label=f"v{v}")
        encoded = obj.encode(v)
        decoded = cls.decode(encoded, v)
        assert decoded == obj, f"v{v}: {decoded!r} != {obj!r}"
        assert decoded.encode(v) == encoded
        # read() at an offset, with trailing bytes that must be ignored
        buf = bytearray(b"\xaa\xbb") + encoded + b"\x01\x02\x03"
        again, end = cls.read(buf, 2, v)
        assert end == 2 + len(encoded)
        assert again == obj
        out = bytearray(b"xy")
        obj.write(out, v)
        assert bytes(out) == b"xy" + encoded


@pytest.mark.parametrize("msg", MSGS, ids=[m.stem for m in MSGS])
def test_defaults_roundtrip(msg):
    cls = getattr(module_of(msg), msg.name)
    for v in msg.versions:
        obj = cls()
        assert cls.decode(obj.encode(v), v) == obj
