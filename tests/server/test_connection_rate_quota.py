"""Connection creation rates against a real broker (KIP-612, Kafka's ConnectionQuotas):

- an ``ip`` entity's ``connection_creation_rate``: connections beyond it are not served (held
  unread for the throttle time, then closed), other addresses are not affected, and the address
  is served again once its rate has dropped; librdkafka clients hit by it reconnect and succeed;
- ``max.connection.creation.rate``: the acceptor waits, so connections are served late but all
  served.

The brokers keep 2 quota samples of 1 s: a rate is measured over at least one second, so an
address's first ``rate`` connections are always admitted (Kafka's default of 11 samples would
admit ten seconds' worth first). Clients from 127.0.0.2 (any 127/8 address is loopback on
Linux) stand for "another host".
"""

from __future__ import annotations

import socket
import struct
import time

import pytest
from confluent_kafka.admin import AdminClient
from integration.helpers import run_async  # tests/ is on sys.path

from snakka.client.connection import KafkaConnection, parse_bootstrap
from snakka.protocol import encode_request
from snakka.protocol.messages.alter_client_quotas_request import (
    AlterClientQuotasRequest,
    EntityData,
    EntryData,
    OpData,
)
from snakka.protocol.messages.api_versions_request import ApiVersionsRequest
from snakka.protocol.messages.api_versions_response import ApiVersionsResponse
from snakka.testing import EmbeddedBroker

pytestmark = pytest.mark.timeout(120)

WINDOWS = {"quota.window.num": "2", "quota.window.size.seconds": "1"}
OTHER_HOST = "127.0.0.2"


def _loopback_alias_usable() -> bool:
    try:
        with socket.socket() as s:
            s.bind((OTHER_HOST, 0))
        return True
    except OSError:
        return False


def set_ip_quota(broker: EmbeddedBroker, ip: str | None, rate: float) -> None:
    async def go():
        host, port = parse_bootstrap(broker.bootstrap_servers)
        async with KafkaConnection(host, port) as conn:
            return await conn.send(AlterClientQuotasRequest(entries=[EntryData(
                entity=[EntityData(entity_type="ip", entity_name=ip)],
                ops=[OpData(key="connection_creation_rate", value=rate, remove=False)])]))
    resp = run_async(go())
    assert [e.error_code for e in resp.entries] == [0]


def open_and_ask(port: int, source: str | None) -> socket.socket:
    """Connect (from ``source``) and send an ApiVersions request without waiting."""
    s = socket.create_connection(("127.0.0.1", port), timeout=15,
                                 source_address=(source, 0) if source else None)
    s.sendall(encode_request(18, "rate-test", 3, ApiVersionsRequest(
        client_software_name="rate-test", client_software_version="1")))
    return s


def answered(s: socket.socket) -> bool:
    """True when the ApiVersions request was answered, False when the broker closed the
    connection without a byte."""
    try:
        with s:
            head = s.recv(4, socket.MSG_WAITALL)
            if len(head) < 4:
                return False
            size = struct.unpack(">i", head)[0]
            frame = s.recv(size, socket.MSG_WAITALL)
            return ApiVersionsResponse.decode(frame[4:], 3).error_code == 0
    except ConnectionResetError:
        return False


@pytest.mark.skipif(not _loopback_alias_usable(), reason=f"{OTHER_HOST} is not a local address")
def test_ip_connection_creation_rate_refuses_the_excess_and_recovers():
    with EmbeddedBroker(config=WINDOWS) as broker:
        assert broker.port is not None
        set_ip_quota(broker, OTHER_HOST, 5)
        # 20 connections at once from the limited address: the first 5 are served, the rest
        # closed unanswered (each after its throttle time, at most one window).
        results = [answered(s) for s in [open_and_ask(broker.port, OTHER_HOST)
                                         for _ in range(20)]]
        assert results[:5] == [True] * 5
        refused = results.count(False)
        assert refused >= 5, results
        assert broker.broker.connection_quotas.connections_throttled >= refused
        # Another address is not limited.
        assert all(answered(s) for s in [open_and_ask(broker.port, None) for _ in range(20)])
        # The limited address is served again once its rate has dropped (retry until then).
        deadline = time.monotonic() + 30
        while not answered(open_and_ask(broker.port, OTHER_HOST)):
            assert time.monotonic() < deadline, "never served again"


def test_librdkafka_clients_over_the_ip_rate_reconnect_and_succeed():
    # The default ip entity: every address, 127.0.0.1 and ::1 alike.
    with EmbeddedBroker(config=WINDOWS) as broker:
        set_ip_quota(broker, None, 3)
        throttled_before = broker.broker.connection_quotas.connections_throttled
        admins = [AdminClient({"bootstrap.servers": broker.bootstrap_servers,
                               "reconnect.backoff.ms": 50, "reconnect.backoff.max.ms": 500,
                               "socket.connection.setup.timeout.ms": 20000})
                  for _ in range(6)]
        for admin in admins:  # each one's connections are throttled until the rate drops
            md = admin.list_topics(timeout=60)
            assert md.brokers and md.cluster_id
        assert broker.broker.connection_quotas.connections_throttled > throttled_before


def test_max_connection_creation_rate_delays_accepts_and_serves_all():
    with EmbeddedBroker(config={**WINDOWS, "max.connection.creation.rate": "5"}) as broker:
        assert broker.port is not None
        quotas = broker.broker.connection_quotas
        start = time.monotonic()
        socks = [open_and_ask(broker.port, None) for _ in range(20)]
        assert all(answered(s) for s in socks)  # late, but every one is served
        elapsed = time.monotonic() - start
        # Accepting 20 connections at 5/s after a one-second burst of 5 takes Kafka's pacing
        # (tests/unit/test_connection_rate_quotas.py) at least 3 s; half of it, to be safe
        # against anything but a broker that does not wait.
        assert elapsed >= 1.5, elapsed
        assert quotas.accepts_delayed >= 10
        assert quotas.connections_throttled == 0


def _alter_broker_config(broker: EmbeddedBroker, name: str, value: str | None) -> None:
    from integration.helpers import ck_alter_broker_configs

    ck_alter_broker_configs(broker.bootstrap_servers, {name: value},
                            str(broker.broker.node_id))


def test_max_connection_creation_rate_set_and_removed_at_run_time():
    """A plain listener without a creation rate accepts through asyncio's server; a rate set
    with IncrementalAlterConfigs makes it pace its accepts from then on (every connection still
    served), and removing the rate hands the accepts back, on the same listening socket."""
    from integration.helpers import wait_until

    with EmbeddedBroker(config=WINDOWS) as broker:
        assert broker.port is not None
        quotas = broker.broker.connection_quotas
        srv = broker.broker.listener_servers[0]
        assert srv._plain_servers and not srv._plain_loops
        assert all(answered(open_and_ask(broker.port, None)) for _ in range(10))
        assert quotas.accepts_delayed == 0

        _alter_broker_config(broker, "max.connection.creation.rate", "5")
        wait_until(lambda: srv._plain_loops and not srv._plain_servers, 30,
                   "the listener paces its accepts")
        socks = [open_and_ask(broker.port, None) for _ in range(20)]
        assert all(answered(s) for s in socks)  # late, but every one is served
        assert quotas.broker_rate_limit == 5
        assert quotas.accepts_delayed >= 10

        _alter_broker_config(broker, "max.connection.creation.rate", None)
        wait_until(lambda: srv._plain_servers and not srv._plain_loops, 30,
                   "the asyncio server accepts again")
        delayed = quotas.accepts_delayed
        assert all(answered(open_and_ask(broker.port, None)) for _ in range(20))
        assert quotas.accepts_delayed == delayed
        # A real client on the same port after both switches.
        md = AdminClient({"bootstrap.servers": broker.bootstrap_servers}).list_topics(timeout=30)
        assert md.brokers
