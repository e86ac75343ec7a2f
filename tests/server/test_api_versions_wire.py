"""ApiVersions through a real broker (its answers are cached: handlers/api_versions.py): every
version on the wire is byte-for-byte the frame the uncached builder gives, with the API set of
the broker's configuration (telemetry APIs only with metrics on), repeated requests and new
connections alike; and real clients connect and work."""

from __future__ import annotations

import socket

import pytest

from snakka.handlers import api_versions, load_handlers
from snakka.protocol import encode_request, encode_response
from snakka.protocol.errors import ErrorCode
from snakka.protocol.messages.api_versions_request import ApiVersionsRequest
from snakka.testing import EmbeddedBroker

from .rawsock import recv_frame

TELEMETRY = (71, 72)


def expected_apis(metrics_on: bool) -> dict:
    apis = load_handlers()
    if not metrics_on:
        for key in TELEMETRY:
            apis.pop(key)
    return apis


@pytest.mark.parametrize("metrics_on", [False, True], ids=["metrics-off", "metrics-on"])
def test_every_version_is_byte_for_byte_the_uncached_answer(metrics_on):
    config = {"metrics.port": "0", "metrics.host": "127.0.0.1"} if metrics_on else {}
    apis = expected_apis(metrics_on)
    top = apis[18].max_version
    with EmbeddedBroker(config=config) as b:
        for _connection in range(2):  # the second connection is answered from the cache
            with socket.create_connection(("127.0.0.1", b.port), timeout=10) as s:
                corr = 0
                for v in range(0, top + 1):
                    for software in (("snakka-test", "1.0"), ("-bad-", "1.0")):
                        corr += 1
                        req = ApiVersionsRequest(client_software_name=software[0],
                                                 client_software_version=software[1])
                        s.sendall(encode_request(corr, "wire", v, req))
                        got = recv_frame(s)
                        valid = v < 3 or software[0] != "-bad-"
                        error = ErrorCode.NONE if valid else ErrorCode.INVALID_REQUEST
                        want = encode_response(corr, 18, v,
                                               api_versions.build_response(apis, error))
                        assert got == want[4:], (v, software)


def test_real_clients_connect():
    from confluent_kafka.admin import AdminClient, NewTopic
    from kafka import KafkaAdminClient

    with EmbeddedBroker() as b:
        bs = b.bootstrap_servers
        admin = AdminClient({"bootstrap.servers": bs})
        admin.create_topics([NewTopic("av-cache", 2, 1)])["av-cache"].result(30)
        for _ in range(3):  # new clients, new connections: each opens with ApiVersions
            assert "av-cache" in AdminClient({"bootstrap.servers": bs}).list_topics(
                timeout=30).topics
            kp = KafkaAdminClient(bootstrap_servers=bs)
            try:
                assert "av-cache" in kp.list_topics()
            finally:
                kp.close()
