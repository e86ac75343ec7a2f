"""Connection limits changed at run time, as in Kafka (SocketServer.reconfigure):
``max.connections`` and ``max.connections.per.ip`` (+ ``max.connections.per.ip.overrides``)
set with a real admin client (confluent-kafka's
IncrementalAlterConfigs on the BROKER resource) apply to the next connection, without a restart,
and a DELETE restores the static value. Connections from 127.0.0.2 (loopback on Linux) stand for
another host; the admin client connects from 127.0.0.1.
"""

from __future__ import annotations

import socket
import struct

import pytest
from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ConfigSource,
)

from integration.helpers import run_async, wait_until  # tests/ is on sys.path
from snakka.client.connection import KafkaConnection, parse_bootstrap
from snakka.protocol import encode_request
from snakka.protocol.messages.api_versions_request import ApiVersionsRequest
from snakka.protocol.messages.api_versions_response import ApiVersionsResponse
from snakka.protocol.messages.incremental_alter_configs_request import (
    AlterableConfig,
    AlterConfigsResource,
    IncrementalAlterConfigsRequest,
)
from snakka.testing import EmbeddedBroker

pytestmark = pytest.mark.timeout(120)

OTHER_HOST = "127.0.0.2"


def _loopback_alias_usable() -> bool:
    try:
        with socket.socket() as s:
            s.bind((OTHER_HOST, 0))
        return True
    except OSError:
        return False


def _alter(admin: AdminClient, bootstrap: str, resource: str,
           changes: dict[str, str | None]) -> None:
    """IncrementalAlterConfigs on a BROKER resource: confluent-kafka for this node's; for the
    cluster default (the empty name, which confluent-kafka refuses to send) snakka's client."""
    if resource:
        res = ConfigResource(ConfigResource.Type.BROKER, resource, incremental_configs=[
            ConfigEntry(k, v, incremental_operation=AlterConfigOpType.DELETE if v is None
                        else AlterConfigOpType.SET) for k, v in changes.items()])
        admin.incremental_alter_configs([res])[res].result(30)
        return

    async def go():
        host, port = parse_bootstrap(bootstrap)
        async with KafkaConnection(host, port) as conn:
            return await conn.send(IncrementalAlterConfigsRequest(resources=[
                AlterConfigsResource(resource_type=4, resource_name="", configs=[
                    AlterableConfig(name=k, config_operation=1 if v is None else 0, value=v)
                    for k, v in changes.items()])], validate_only=False))
    r = run_async(go())
    assert [(x.error_code, x.error_message) for x in r.responses] == [(0, None)]


def _described(admin: AdminClient, resource: str, name: str) -> tuple[str | None, int]:
    res = ConfigResource(ConfigResource.Type.BROKER, resource)
    entry = admin.describe_configs([res])[res].result(30)[name]
    return entry.value, int(getattr(entry.source, "value", entry.source))


def _ask(port: int, source: str) -> socket.socket:
    """Connect from ``source`` and send an ApiVersions request (the socket stays open)."""
    s = socket.create_connection(("127.0.0.1", port), timeout=15, source_address=(source, 0))
    s.sendall(encode_request(18, "dyn-limits", 3, ApiVersionsRequest(
        client_software_name="dyn-limits", client_software_version="1")))
    return s


def _answered(s: socket.socket) -> bool:
    """The ApiVersions request was answered (True) or the broker closed the connection
    without a byte (False)."""
    try:
        head = s.recv(4, socket.MSG_WAITALL)
        if len(head) < 4:
            return False
        frame = s.recv(struct.unpack(">i", head)[0], socket.MSG_WAITALL)
        return ApiVersionsResponse.decode(frame[4:], 3).error_code == 0
    except ConnectionResetError:
        return False


@pytest.mark.skipif(not _loopback_alias_usable(), reason=f"{OTHER_HOST} is not a local address")
def test_connections_per_ip_change_at_run_time():
    with EmbeddedBroker() as broker:
        assert broker.port is not None
        admin = AdminClient({"bootstrap.servers": broker.bootstrap_servers})
        held: list[socket.socket] = []
        try:
            # The default is unbounded: 3 connections from the other host are served.
            held += [_ask(broker.port, OTHER_HOST) for _ in range(3)]
            assert [_answered(s) for s in held] == [True] * 3
            for s in held:
                s.close()
            held.clear()

            # 0 per address without overrides would lock every client out: refused, as Kafka.
            with pytest.raises(KafkaException) as e:
                _alter(admin, broker.bootstrap_servers, "1", {"max.connections.per.ip": "0"})
            assert e.value.args[0].code() == KafkaError.INVALID_REQUEST
            assert "can be set to zero only if" in e.value.args[0].str()

            # At most 2 per address on this node (the admin's own address exempted).
            _alter(admin, broker.bootstrap_servers, "1", {"max.connections.per.ip": "2",
                                "max.connections.per.ip.overrides": "127.0.0.1:1000"})
            assert _described(admin, "1", "max.connections.per.ip") == (
                "2", ConfigSource.DYNAMIC_BROKER_CONFIG.value)
            held += [_ask(broker.port, OTHER_HOST) for _ in range(2)]
            assert [_answered(s) for s in held] == [True, True]
            third = _ask(broker.port, OTHER_HOST)
            assert not _answered(third)
            third.close()

            # An override for the other host, as the cluster default: 3 now.
            _alter(admin, broker.bootstrap_servers, "", {"max.connections.per.ip.overrides":
                               "127.0.0.1:1000,127.0.0.2:3"})
            _alter(admin, broker.bootstrap_servers, "1", {"max.connections.per.ip.overrides": None})
            assert _described(admin, "1", "max.connections.per.ip.overrides") == (
                "127.0.0.1:1000,127.0.0.2:3", ConfigSource.DYNAMIC_DEFAULT_BROKER_CONFIG.value)
            held.append(_ask(broker.port, OTHER_HOST))
            assert _answered(held[-1])
            fourth = _ask(broker.port, OTHER_HOST)
            assert not _answered(fourth)
            fourth.close()

            # DELETE: the static (unbounded) value is back; the held connections stayed open.
            _alter(admin, broker.bootstrap_servers, "1", {"max.connections.per.ip": None})
            _alter(admin, broker.bootstrap_servers, "", {"max.connections.per.ip.overrides": None})
            more = _ask(broker.port, OTHER_HOST)
            held.append(more)
            assert _answered(more)
        finally:
            for s in held:
                s.close()


@pytest.mark.skipif(not _loopback_alias_usable(), reason=f"{OTHER_HOST} is not a local address")
def test_max_connections_changes_at_run_time():
    with EmbeddedBroker() as broker:
        assert broker.port is not None
        quotas = broker.broker.connection_quotas
        admin = AdminClient({"bootstrap.servers": broker.bootstrap_servers})
        static = _described(admin, "1", "max.connections")[0]
        # Room for the admin client's connections and one more.
        _alter(admin, broker.bootstrap_servers, "1", {"max.connections": str(quotas.total + 1)})
        first = _ask(broker.port, OTHER_HOST)
        try:
            assert _answered(first)
            second = _ask(broker.port, OTHER_HOST)
            assert not _answered(second)
            second.close()
            # Deleted (over the admin's open connection): the static value again.
            _alter(admin, broker.bootstrap_servers, "1", {"max.connections": None})
            assert _described(admin, "1", "max.connections")[0] == static
            third = _ask(broker.port, OTHER_HOST)
            assert _answered(third)
            third.close()
        finally:
            first.close()


def test_override_host_names_are_resolved_off_the_event_loop():
    """max.connections.per.ip.overrides naming a host (DNS may block) is resolved in a worker
    thread; the limits apply when it is, and a later change supersedes it. The broker keeps
    answering meanwhile."""
    with EmbeddedBroker() as broker:
        admin = AdminClient({"bootstrap.servers": broker.bootstrap_servers})
        quotas = broker.broker.connection_quotas
        _alter(admin, broker.bootstrap_servers, "1",
               {"max.connections.per.ip.overrides": "localhost:1000"})
        wait_until(lambda: quotas.max_per_ip_overrides.get("127.0.0.1") == 1000, 15,
                   "the resolved override of localhost")
        assert _described(admin, "1", "max.connections.per.ip.overrides") == (
            "localhost:1000", ConfigSource.DYNAMIC_BROKER_CONFIG.value)
        # Literal addresses apply at once, without a lookup.
        _alter(admin, broker.bootstrap_servers, "1",
               {"max.connections.per.ip.overrides": "127.0.0.1:900"})
        assert quotas.max_per_ip_overrides == {"127.0.0.1": 900}
