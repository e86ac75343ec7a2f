"""Handlers declare their API next to their code; ApiVersions is derived from those declarations
and answers what snakka answered before the declarations existed (golden frames captured from
main before issue 10, including the KIP-511 fallback), plus the APIs added since: byte for byte
in everything but those additions."""

from __future__ import annotations

import json
import socket
import struct
import sys
from pathlib import Path

import pytest

from snakka.handlers import discover_handler_modules, load_handlers
from snakka.protocol import encode_request
from snakka.protocol.api_keys import ApiKey
from snakka.protocol.apis import API_SPECS
from snakka.protocol.messages.api_versions_request import ApiVersionsRequest
from snakka.protocol.messages.api_versions_response import ApiVersionsResponse
from snakka.testing import EmbeddedBroker

from .rawsock import recv_frame

GOLDEN = json.loads((Path(__file__).parent / "golden_api_versions.json").read_text())["frames"]

# (api key, min, max) advertised by main before the change (b2717cd), plus the APIs added since
# (issue 11: TxnOffsetCommit 28 v0-5); the frames in golden_api_versions.json follow.
GOLDEN_RANGES = [
    (0, 0, 13), (1, 4, 18), (2, 0, 11), (3, 0, 13), (8, 0, 10), (9, 0, 10), (10, 0, 6),
    (11, 0, 9), (12, 0, 4), (13, 0, 5), (14, 0, 5), (15, 0, 6), (16, 0, 5), (18, 0, 5),
    (19, 0, 7), (20, 0, 6), (21, 0, 2), (22, 0, 5), (23, 0, 4), (28, 0, 5), (32, 0, 4), (33, 0, 2),
    (35, 0, 5), (37, 0, 3), (42, 0, 3), (44, 0, 1), (47, 0, 0), (60, 0, 2), (68, 0, 1),
    (69, 0, 1), (75, 0, 0), (76, 1, 1), (77, 1, 1), (78, 1, 2), (79, 1, 2), (90, 0, 1),
    (91, 0, 0), (92, 0, 0),
]


def _declared() -> list[tuple[int, int, int]]:
    return [(h.api_key, h.min_version, h.max_version)
            for h in sorted(load_handlers().values(), key=lambda h: h.api_key)]


def test_declared_ranges_keep_the_golden_ones():
    """No API advertised before lost or narrowed its range; new APIs may be added."""
    declared = _declared()
    assert [r for r in declared if r[0] in {g[0] for g in GOLDEN_RANGES}] == GOLDEN_RANGES


def test_every_handler_module_is_discovered_and_named_after_its_api():
    for mod in discover_handler_modules():
        key = mod.API.api_key
        assert isinstance(key, ApiKey)
        # produce.py is PRODUCE, offset_for_leader_epoch.py is OFFSET_FOR_LEADER_EPOCH
        assert mod.__name__.rsplit(".", 1)[1].upper() == key.name
        assert API_SPECS[key].name  # a real API


def test_a_handler_module_without_a_declaration_is_an_error(tmp_path, monkeypatch):
    import snakka.handlers as pkg
    (tmp_path / "bogus_api.py").write_text("def handle(ctx, req):\n    return None\n")
    monkeypatch.setattr(pkg, "__path__", [*pkg.__path__, str(tmp_path)])
    try:
        with pytest.raises(RuntimeError, match="bogus_api defines handle"):
            load_handlers()
    finally:
        sys.modules.pop("snakka.handlers.bogus_api", None)


def _without_new_apis(frame: bytes, version: int) -> bytes:
    """The frame re-encoded with only the APIs of the golden ranges (the ones added since
    issue 10 removed), so the rest of it must still match byte for byte."""
    header_len = 4  # correlation id (ApiVersions responses keep the v0 header, KIP-511)
    resp = ApiVersionsResponse.read(frame, header_len, version)[0]
    old = {g[0] for g in GOLDEN_RANGES}
    resp.api_keys = [k for k in resp.api_keys if k.api_key in old]
    # The feature levels (snakka.metadata.features) were added with transactions (issue 11).
    resp.supported_features, resp.finalized_features = [], []
    resp.finalized_features_epoch = -1
    return frame[:header_len] + resp.encode(version)


def test_api_versions_answers_are_byte_identical_to_before():
    # GetTelemetrySubscriptions / PushTelemetry (KIP-714) are served only with a receiver for
    # the pushed metrics (metrics.port), which the embedded broker has off by default.
    declared = [d for d in _declared() if d[0] not in (71, 72)]
    with EmbeddedBroker() as b, socket.create_connection(("127.0.0.1", b.port),
                                                         timeout=10) as s:
        for v in range(6):
            s.sendall(encode_request(100 + v, "golden", v, ApiVersionsRequest(
                client_software_name="golden", client_software_version="1.0")))
            frame = recv_frame(s)
            assert _without_new_apis(frame, v).hex() == GOLDEN[str(v)], v
            got = ApiVersionsResponse.read(frame, 4, v)[0].api_keys
            assert [(k.api_key, k.min_version, k.max_version) for k in got] == declared
        frame = struct.pack(">hhi", 18, 99, 199) + b"\0\0" + b"\0" * 8  # KIP-511
        s.sendall(struct.pack(">i", len(frame)) + frame)
        assert _without_new_apis(recv_frame(s), 0).hex() == GOLDEN["99"]
        conns = list(b.broker.connections)
        assert [c.client_software for c in conns] == [("golden", "1.0")]


def test_api_versions_v3_finalizes_transaction_version_2_as_kafka_4_0():
    """The Java 4.0 producer uses Transactions V2 only when transaction.version >= 2 is
    finalized; a fresh Kafka 4.0 cluster finalizes 2 (and group.version 1)."""
    with EmbeddedBroker() as b, socket.create_connection(("127.0.0.1", b.port),
                                                         timeout=10) as s:
        for v in (2, 3):
            s.sendall(encode_request(7, "features", v, ApiVersionsRequest(
                client_software_name="f", client_software_version="1")))
            r = ApiVersionsResponse.read(recv_frame(s), 4, v)[0]
            finalized = {f.name: (f.min_version_level, f.max_version_level)
                         for f in r.finalized_features}
            if v < 3:  # tagged fields: not in v0-2
                assert finalized == {} and r.finalized_features_epoch == -1
                continue
            assert finalized == {"transaction.version": (2, 2), "group.version": (1, 1)}
            assert r.finalized_features_epoch >= 0
            assert {f.name: (f.min_version, f.max_version) for f in r.supported_features} == {
                "transaction.version": (0, 2), "group.version": (0, 1)}
