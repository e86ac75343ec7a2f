"""Dispatch (server/dispatch.py) without sockets: the authentication gate, handler lookup, version
checks and KIP-511, decoding, the typed RequestContext, the one authorize call per request for
declared API-level actions, and error answers for failing handlers."""

from __future__ import annotations

import dataclasses
import struct

import pytest

from snakka.config import Listener
from snakka.handlers import Handler, load_handlers
from snakka.handlers.context import RequestContext
from snakka.protocol import encode_request
from snakka.protocol.errors import ErrorCode
from snakka.protocol.messages.api_versions_request import ApiVersionsRequest
from snakka.protocol.messages.describe_log_dirs_request import DescribeLogDirsRequest
from snakka.protocol.messages.describe_log_dirs_response import DescribeLogDirsResponse
from snakka.protocol.messages.metadata_request import MetadataRequest
from snakka.protocol.messages.produce_request import ProduceRequest
from snakka.security.authorizer import (
    CLUSTER,
    AclOperation,
    Action,
    AuthorizationResult,
    ResourcePattern,
    ResourceType,
)
from snakka.security.principal import ANONYMOUS, SecurityProtocol
from snakka.server.authentication import AuthState
from snakka.server.channel import CLOSE, ChannelLimits, CloseConnection, KafkaChannel
from snakka.server.dispatch import RequestDispatcher
from snakka.server.memory import ResponseMemoryPool

LIMITS = ChannelLimits(1 << 20, 100, 1 << 20, 10_000)


class FakeConnection:
    """The connection handle dispatch and handlers see."""

    def __init__(self, protocol: SecurityProtocol = SecurityProtocol.PLAINTEXT) -> None:
        self.channel = KafkaChannel(LIMITS, ResponseMemoryPool(1 << 20), now=0.0,
                                    security_protocol=protocol)
        self.listener = Listener("PLAINTEXT", "localhost", 9092)
        self.peer = "10.1.2.3:4567"
        self.peer_host = "10.1.2.3"
        self.closed_with: list[str] = []

    def close_with_error(self, reason: str) -> None:
        self.closed_with.append(reason)

    def reserve_response_bytes(self, wanted: int) -> int | None:
        return self.channel.reserve_response_bytes(wanted)

    def settle_response_bytes(self, reserved: int, actual: int) -> None:
        self.channel.settle_response_bytes(reserved, actual)

    async def wait_for_response_memory(self, timeout_s: float) -> bool:
        return False

    def receive(self, wire: bytes):
        self.channel.receive_data(wire, now=0.0)
        return self.channel.next_event(0.0)


class RecordingAuthorizer:
    def __init__(self, allow: bool) -> None:
        self.allow = allow
        self.calls: list[tuple[RequestContext, list[Action]]] = []

    def authorize(self, context, actions):
        self.calls.append((context, list(actions)))
        result = AuthorizationResult.ALLOWED if self.allow else AuthorizationResult.DENIED
        return [result] * len(actions)


SERVICES = object()


def dispatcher(handlers=None, authorizer=None) -> RequestDispatcher:
    return RequestDispatcher(handlers if handlers is not None else load_handlers(), SERVICES,
                             authorizer=authorizer)


def raw_frame(api_key: int, version: int, corr: int, body: bytes = b"\0\0") -> bytes:
    frame = struct.pack(">hhi", api_key, version, corr) + body
    return struct.pack(">i", len(frame)) + frame


# -- lookup, versions, decoding --------------------------------------------------------------
@pytest.mark.parametrize("key,version,reason", [
    (999, 0, "unsupported API key 999 (version 0)"),
    (38, 1, "unsupported API key 38 (version 1)"),  # CreateDelegationToken: not served
    (3, 99, "unsupported version 99 of API key 3 (supported 0-13)"),
    (1, 3, "unsupported version 3 of API key 1 (supported 4-18)"),  # declared min_version=4
])
def test_unknown_apis_and_versions_close(key, version, reason):
    conn = FakeConnection()
    call, result = dispatcher().dispatch(conn, conn.receive(raw_frame(key, version, 5)))
    assert call is None and result == CloseConnection(reason)


def test_kip511_unknown_api_versions_version_is_answered_at_v0():
    handlers = load_handlers()
    conn = FakeConnection()
    call, resp = dispatcher(handlers).dispatch(conn, conn.receive(raw_frame(18, 99, 42)))
    assert call.api_version == 0 and call.event.request_id == 0
    assert resp.error_code == ErrorCode.UNSUPPORTED_VERSION
    assert [(k.api_key, k.min_version, k.max_version) for k in resp.api_keys] == [
        (h.api_key, h.min_version, h.max_version) for h in sorted(
            handlers.values(), key=lambda h: h.api_key)]


def test_undecodable_body_closes():
    conn = FakeConnection()
    _, result = dispatcher().dispatch(conn, conn.receive(raw_frame(3, 12, 1, b"\0\x05ab")))
    assert isinstance(result, CloseConnection) and result.reason.startswith(
        "undecodable request (API key 3 v12)")


# -- the typed context ----------------------------------------------------------------------
def test_handlers_get_a_typed_read_only_context():
    seen: list[RequestContext] = []

    def handle(ctx, req):
        seen.append(ctx)
        return "response"

    handlers = load_handlers()
    handlers[3] = dataclasses.replace(handlers[3], handle=handle)
    conn = FakeConnection()
    wire = encode_request(77, "my-client", 12, MetadataRequest(topics=None))
    call, result = dispatcher(handlers).dispatch(conn, conn.receive(wire))
    assert result == "response" and call.event.request_id == 0 and call.api_version == 12
    (ctx,) = seen
    assert (ctx.api_key, ctx.api_version, ctx.correlation_id, ctx.client_id) == (
        3, 12, 77, "my-client")
    assert ctx.client_address == "10.1.2.3" and ctx.listener_name == "PLAINTEXT"
    assert ctx.principal == ANONYMOUS and ctx.connection is conn
    assert ctx.services is SERVICES and ctx.apis is handlers
    ctx.response_bytes = 10  # the one field a handler sets
    assert call.reserved == 10
    with pytest.raises(AttributeError):
        ctx.other = 3  # slots: no new fields


def test_api_versions_records_the_client_software_on_the_connection():
    d = dispatcher()
    conn = FakeConnection()
    wire = encode_request(1, "c", 3, ApiVersionsRequest(client_software_name="librdkafka",
                                                       client_software_version="2.6.0"))
    _, resp = d.dispatch(conn, conn.receive(wire))
    assert resp.error_code == 0
    info = conn.channel.client_information
    assert (info.software_name, info.software_version) == ("librdkafka", "2.6.0")
    bad = FakeConnection()
    wire = encode_request(1, "c", 3, ApiVersionsRequest(client_software_name="a b",
                                                       client_software_version="1"))
    _, resp = d.dispatch(bad, bad.receive(wire))
    assert resp.error_code == ErrorCode.INVALID_REQUEST and bad.channel.client_information is None


# -- the authentication gate ----------------------------------------------------------------
def test_sasl_connection_may_only_negotiate_before_authenticating():
    d = dispatcher()
    conn = FakeConnection(SecurityProtocol.SASL_PLAINTEXT)
    _, result = d.dispatch(conn, conn.receive(encode_request(1, "c", 12, MetadataRequest())))
    assert result == CloseConnection(
        "Unexpected Kafka request of type METADATA during SASL handshake")
    conn = FakeConnection(SecurityProtocol.SASL_PLAINTEXT)
    wire = encode_request(1, "c", 3, ApiVersionsRequest(client_software_name="x",
                                                       client_software_version="1"))
    _, resp = d.dispatch(conn, conn.receive(wire))
    assert resp.error_code == 0 and conn.channel.auth.state is AuthState.VERSIONS_RECEIVED
    _, result = d.dispatch(conn, conn.receive(wire.replace(b"\0\0\0\x01", b"\0\0\0\x02", 1)))
    assert result == CloseConnection(
        "Unexpected Kafka request of type API_VERSIONS during SASL handshake")


def test_authenticated_sasl_connection_carries_its_principal():
    from snakka.security.principal import KafkaPrincipal
    seen = []
    handlers = load_handlers()
    handlers[3] = dataclasses.replace(handlers[3], handle=lambda ctx, req: seen.append(ctx))
    conn = FakeConnection(SecurityProtocol.SASL_PLAINTEXT)
    auth = conn.channel.auth
    assert auth.handshake("PLAIN", {"PLAIN"}, version=1) == ErrorCode.NONE
    auth.authentication_succeeded(KafkaPrincipal("User", "alice"))
    dispatcher(handlers).dispatch(conn, conn.receive(encode_request(1, "c", 12,
                                                                    MetadataRequest())))
    assert str(seen[0].principal) == "User:alice"


# -- authorization --------------------------------------------------------------------------
def _describe_log_dirs(handlers, actions, calls):
    def handle(ctx, req):
        calls.append(ctx.authorize([Action(AclOperation.DESCRIBE, ResourcePattern(
            ResourceType.TOPIC, "t"))]))
        return DescribeLogDirsResponse(error_code=0, results=[])
    handlers[35] = dataclasses.replace(handlers[35], handle=handle, actions=actions)


def test_declared_actions_are_authorized_once_before_the_handler():
    handlers = load_handlers()
    calls: list = []
    cluster_describe = (Action(AclOperation.DESCRIBE, CLUSTER),)
    _describe_log_dirs(handlers, cluster_describe, calls)
    allow = RecordingAuthorizer(allow=True)
    conn = FakeConnection()
    wire = encode_request(3, "c", 4, DescribeLogDirsRequest(topics=None))
    _, resp = dispatcher(handlers, allow).dispatch(conn, conn.receive(wire))
    assert resp.error_code == 0 and calls == [[AuthorizationResult.ALLOWED]]
    # one call for the declaration, one from the handler's own per-resource check
    assert [a for _, a in allow.calls] == [list(cluster_describe), [Action(
        AclOperation.DESCRIBE, ResourcePattern(ResourceType.TOPIC, "t"))]]
    assert allow.calls[0][0].principal == ANONYMOUS

    deny = RecordingAuthorizer(allow=False)
    calls.clear()
    conn = FakeConnection()
    _, resp = dispatcher(handlers, deny).dispatch(conn, conn.receive(wire))
    assert resp.error_code == ErrorCode.CLUSTER_AUTHORIZATION_FAILED
    assert calls == [] and len(deny.calls) == 1  # the handler never ran


def test_undeclared_apis_do_not_call_the_authorizer():
    auth = RecordingAuthorizer(allow=False)
    conn = FakeConnection()
    wire = encode_request(1, "c", 3, ApiVersionsRequest(client_software_name="x",
                                                       client_software_version="1"))
    _, resp = dispatcher(authorizer=auth).dispatch(conn, conn.receive(wire))
    assert resp.error_code == 0 and auth.calls == []


def test_only_the_cluster_admin_apis_declare_api_level_actions():
    # Kafka authorizes the ACL APIs (AclApis), the client-quota APIs and the SCRAM admin APIs
    # on the cluster before anything else; the other APIs authorize per resource in their
    # handlers.
    declared = {k: h.actions for k, h in load_handlers().items() if h.actions}
    assert declared == {
        29: (Action(AclOperation.DESCRIBE, CLUSTER),),
        30: (Action(AclOperation.ALTER, CLUSTER),),
        31: (Action(AclOperation.ALTER, CLUSTER),),
        48: (Action(AclOperation.DESCRIBE_CONFIGS, CLUSTER),),
        49: (Action(AclOperation.ALTER_CONFIGS, CLUSTER),),
        50: (Action(AclOperation.DESCRIBE, CLUSTER),),
        51: (Action(AclOperation.ALTER, CLUSTER),)}


# -- failing handlers -----------------------------------------------------------------------
def _raising(handler: Handler, exc: BaseException) -> Handler:
    def handle(ctx, req):
        raise exc
    return dataclasses.replace(handler, handle=handle)


def test_a_raising_handler_is_answered_with_its_error_response(caplog):
    handlers = load_handlers()
    handlers[3] = _raising(handlers[3], OSError(28, "No space left on device"))
    conn = FakeConnection()
    call, resp = dispatcher(handlers).dispatch(conn, conn.receive(encode_request(
        9, "c", 12, MetadataRequest(topics=None))))
    assert call is not None and resp.topics == []
    assert "Metadata v12 from 10.1.2.3:4567 failed" in caplog.text


def test_a_failed_acks0_produce_closes_in_order():
    handlers = load_handlers()
    handlers[0] = _raising(handlers[0], ValueError("bug"))
    conn = FakeConnection()
    wire = encode_request(9, "c", 9, ProduceRequest(acks=0, timeout_ms=1, topic_data=[]))
    call, result = dispatcher(handlers).dispatch(conn, conn.receive(wire))
    assert result is CLOSE and call.event.request_id == 0


def test_handler_modules_declare_their_api():
    import snakka.handlers as pkg
    for name, h in load_handlers().items():
        decl = h.module.API
        assert int(decl.api_key) == name == h.api_key
        assert h.module.__name__.startswith(pkg.__name__ + ".")
        assert not hasattr(h.module, "API_KEY")
