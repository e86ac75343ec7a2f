"""Fuzzing: malformed input must only ever raise DecodeError.

Random bytes and mutated valid encodings (truncated, bit-flipped, spliced)
are decoded with every request class (and response/header class) at every
version.  Decoding may succeed or raise :class:`DecodeError`; any other
exception (IndexError, struct.error, UnicodeDecodeError, MemoryError, ...)
or a hang is a bug.
"""

from __future__ import annotations

import struct

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from snakka.protocol import DecodeError, decode_request, decode_request_header
from snakka.protocol.messages.fetch_request import FetchRequest
from snakka.protocol.messages.metadata_request import MetadataRequest
from snakka.protocol.messages.produce_request import ProduceRequest

from .conftest import messages, requires_schemas
from .strategies import instances, module_of

MSGS = messages()
REQUESTS = [m for m in MSGS if m.type == "request"]
OTHERS = [m for m in MSGS if m.type != "request"]

FUZZ = settings(max_examples=25, deadline=None, suppress_health_check=list(HealthCheck))


def _try_decode(cls, buf, v):
    try:
        obj = cls.decode(buf, v)
    except DecodeError:
        return None
    # whatever decoded must be re-encodable
    obj.encode(v)
    return obj


@st.composite
def mutated(draw, msg):
    v = draw(st.sampled_from(msg.versions))
    data = bytearray(draw(instances(msg, v)).encode(v))
    for _ in range(draw(st.integers(1, 4))):
        op = draw(st.sampled_from(["truncate", "flip", "set", "insert", "delete"]))
        if op == "truncate" or not data:
            data = data[: draw(st.integers(0, len(data)))]
        elif op == "flip":
            i = draw(st.integers(0, len(data) - 1))
            data[i] ^= 1 << draw(st.integers(0, 7))
        elif op == "set":
            i = draw(st.integers(0, len(data) - 1))
            data[i] = draw(st.sampled_from([0x00, 0x7F, 0x80, 0xFE, 0xFF]))
        elif op == "insert":
            i = draw(st.integers(0, len(data)))
            data[i:i] = draw(st.binary(min_size=1, max_size=4))
        else:
            i = draw(st.integers(0, len(data) - 1))
            del data[i : i + draw(st.integers(1, 4))]
    return v, bytes(data)


@requires_schemas
@pytest.mark.parametrize("msg", REQUESTS, ids=[m.stem for m in REQUESTS])
@FUZZ
@given(data=st.data())
def test_requests_random_and_mutated_bytes(msg, data):
    cls = getattr(module_of(msg), msg.name)
    v = data.draw(st.sampled_from(msg.versions))
    _try_decode(cls, data.draw(st.binary(max_size=64)), v)
    v, buf = data.draw(mutated(msg))
    _try_decode(cls, buf, v)
    _try_decode(cls, memoryview(buf), v)


@requires_schemas
@pytest.mark.parametrize("msg", OTHERS, ids=[m.stem for m in OTHERS])
@settings(max_examples=8, deadline=None, suppress_health_check=list(HealthCheck))
@given(data=st.data())
def test_responses_headers_data_mutated_bytes(msg, data):
    cls = getattr(module_of(msg), msg.name)
    v, buf = data.draw(mutated(msg))
    _try_decode(cls, buf, v)


@FUZZ
@given(st.binary(max_size=80))
def test_request_frames_random_bytes(buf):
    for fn in (decode_request_header, decode_request):
        try:
            fn(buf)
        except DecodeError:
            pass


def test_huge_array_count_is_rejected_before_allocation():
    # ProduceRequest v3: transactional id null, acks, timeout, then 2**31-1 topics
    buf = struct.pack(">hhii", -1, 1, 1000, 0x7FFFFFFF) + b"\x00" * 8
    with pytest.raises(DecodeError, match="exceeds"):
        ProduceRequest.decode(buf, 3)
    # flexible: compact array length as a 5-byte varint (2**32 - 1)
    buf = b"\x00" + struct.pack(">hi", 1, 1000) + b"\xff\xff\xff\xff\x0f" + b"\x00" * 4
    with pytest.raises(DecodeError):
        ProduceRequest.decode(buf, 9)
    # int32 arrays too (FetchRequest v15 ... replica state etc. use structs, Metadata uses strings)
    with pytest.raises(DecodeError):
        MetadataRequest.decode(struct.pack(">i", 0x7FFFFFFF), 1)


def test_bad_varint_and_negative_lengths():
    with pytest.raises(DecodeError, match="varint"):
        ProduceRequest.decode(b"\x80\x80\x80\x80\x80\x80\x01", 9)
    with pytest.raises(DecodeError):  # string length -2
        ProduceRequest.decode(struct.pack(">h", -2), 3)
    with pytest.raises(DecodeError):  # non-nullable topic name null
        ProduceRequest.decode(struct.pack(">hhiih", -1, 1, 1, 1, -1), 3)
    with pytest.raises(DecodeError):  # invalid utf-8
        ProduceRequest.decode(struct.pack(">hhiih", -1, 1, 1, 1, 2) + b"\xff\xfe", 3)
    with pytest.raises(DecodeError):  # records length -5
        ProduceRequest.decode(struct.pack(">hhiihiii", -1, 1, 1, 1, 0, 1, 0, -5), 3)


def test_unknown_versions():
    with pytest.raises(DecodeError):
        FetchRequest.decode(b"", 99)
    with pytest.raises(DecodeError):
        FetchRequest.decode(b"", -1)
    with pytest.raises(ValueError):
        FetchRequest().encode(99)
    with pytest.raises(DecodeError):
        decode_request(b"\x00")


def test_encode_errors_are_value_errors():
    with pytest.raises(ValueError):
        ProduceRequest(acks=1 << 20).encode(9)  # int16 overflow
    assert ProduceRequest(topic_data=None).topic_data == []  # None -> fresh default list
    p = ProduceRequest()
    p.topic_data = None  # non-nullable array
    with pytest.raises(ValueError):
        p.encode(9)
    with pytest.raises(ValueError):
        MetadataRequest(topics=[1]).encode(1)
