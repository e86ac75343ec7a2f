"""KIP-368 in snakka's own client: KafkaConnection (and so Admin, ShareConsumer, the CLI)
re-authenticates before the session ``connections.max.reauth.ms`` gives it expires.

The broker counts re-authentications with its DEBUG line "re-authenticated" (logger
snakka.security) and logs a WARNING "closing connection ... expired" when a connection sends a
request after its session ended; the tests want many of the first and none of the second.
"""

from __future__ import annotations

import asyncio
import logging
import time

import pytest

from snakka.client.admin import Admin
from snakka.client.connection import KafkaConnection
from snakka.client.sasl import SaslAuthenticationError, SaslClientConfig, unsecured_token
from snakka.protocol.messages.metadata_request import MetadataRequest
from snakka.testing import EmbeddedBroker
from tests.integration.helpers import run_async

pytestmark = pytest.mark.usefixtures("no_broker_errors")

PLAIN_JAAS = ('org.apache.kafka.common.security.plain.PlainLoginModule required '
              'user_alice="alice-secret";')
SEC = {"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "PLAIN",
       "sasl.username": "alice", "sasl.password": "alice-secret"}
LIFETIME_MS = 1500


def broker(**config: str) -> EmbeddedBroker:
    cfg = {"listeners": "SASL_PLAINTEXT://localhost:0", "sasl.enabled.mechanisms": "PLAIN",
           "sasl.jaas.config": PLAIN_JAAS, "connections.max.reauth.ms": str(LIFETIME_MS),
           "connection.failed.authentication.delay.ms": "10", **config}
    return EmbeddedBroker(config=cfg, log_level="INFO")


def reauth_count(caplog: pytest.LogCaptureFixture) -> int:
    return sum(1 for r in caplog.records if r.name == "snakka.security"
               and "re-authenticated" in r.getMessage())


def expired_closes(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records
            if "closing connection" in r.getMessage() and "expired" in r.getMessage()]


@pytest.fixture
def plain_broker(caplog):
    caplog.set_level(logging.DEBUG, logger="snakka.security")
    with broker() as b:
        yield b


def test_admin_keeps_working_for_several_session_lifetimes(plain_broker, caplog):
    async def go() -> int:
        requests = 0
        async with Admin(plain_broker.bootstrap_servers, config=SEC) as admin:
            await admin.create_topic("reauth-admin", 1)
            deadline = time.monotonic() + 4.5 * LIFETIME_MS / 1000
            while time.monotonic() < deadline:
                # Several requests in flight at once, then a short pause.
                await asyncio.gather(*(admin.list_topics() for _ in range(3)))
                requests += 3
                await asyncio.sleep(0.05)
            assert "reauth-admin" in {t.name for t in await admin.list_topics()}
        return requests

    assert run_async(go()) > 20
    assert expired_closes(caplog) == []
    assert reauth_count(caplog) >= 3


def test_idle_connection_reauthenticates_in_the_background(plain_broker, caplog):
    async def go() -> None:
        conn = await KafkaConnection(*_hp(plain_broker), config=SEC).connect()
        try:
            assert conn.session_lifetime_ms == LIFETIME_MS
            await asyncio.sleep(2.5 * LIFETIME_MS / 1000)  # idle past two lifetimes
            await conn.send(MetadataRequest(topics=None))
        finally:
            await conn.close()

    run_async(go())
    assert expired_closes(caplog) == []
    assert reauth_count(caplog) >= 2


def test_session_that_expired_while_idle_reauthenticates_before_the_next_request(
        plain_broker, caplog):
    """The event loop did not run the re-authentication in time (here: its timer is cancelled,
    as when a synchronous caller leaves the loop stopped): the next request re-authenticates
    first, the broker accepting a SaslHandshake on an expired session."""
    async def go() -> None:
        conn = await KafkaConnection(*_hp(plain_broker), config=SEC).connect()
        try:
            assert conn._reauth_timer is not None
            conn._reauth_timer.cancel()
            await asyncio.sleep(1.3 * LIFETIME_MS / 1000)
            resp = await conn.send(MetadataRequest(topics=None))
            assert resp.brokers
            await conn.send(MetadataRequest(topics=None))
        finally:
            await conn.close()

    run_async(go())
    assert expired_closes(caplog) == []
    assert reauth_count(caplog) == 1


def test_oauthbearer_reauthenticates_with_a_fresh_unsecured_token(caplog):
    """The broker ends an OAUTHBEARER session with its token (2 s here); a re-authentication
    with the same token would be refused, so each one makes a new token."""
    caplog.set_level(logging.DEBUG, logger="snakka.security")
    sec = {"security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "OAUTHBEARER",
           "sasl.jaas.config": "org.apache.kafka.common.security.oauthbearer."
           "OAuthBearerLoginModule required unsecuredLoginStringClaim_sub=\"alice\" "
           "unsecuredLoginLifetimeSeconds=\"2\";"}
    with broker(**{"sasl.enabled.mechanisms": "OAUTHBEARER",
                   "connections.max.reauth.ms": "60000"}) as b:
        async def go() -> None:
            conn = await KafkaConnection(*_hp(b), config=sec).connect()
            try:
                assert 0 < conn.session_lifetime_ms <= 2000
                deadline = time.monotonic() + 5
                while time.monotonic() < deadline:
                    await conn.send(MetadataRequest(topics=None))
                    await asyncio.sleep(0.1)
            finally:
                await conn.close()

        run_async(go())
    assert expired_closes(caplog) == []
    assert reauth_count(caplog) >= 2


def test_failed_reauthentication_closes_the_connection_with_a_clear_error(caplog):
    """A fixed token that expires: the re-authentication is refused, the connection closes and
    the next request says why."""
    caplog.set_level(logging.DEBUG, logger="snakka.security")
    with broker(**{"sasl.enabled.mechanisms": "OAUTHBEARER",
                   "connections.max.reauth.ms": "60000"}) as b:
        async def go() -> None:
            token = unsecured_token("alice", time.time(), lifetime_s=2)
            sasl = SaslClientConfig("OAUTHBEARER", token=token)
            conn = await KafkaConnection(*_hp(b), sasl=sasl).connect()
            try:
                lifetime = conn.session_lifetime_ms
                assert 0 < lifetime <= 2000
                await asyncio.sleep(lifetime / 1000 + 0.5)
                with pytest.raises(SaslAuthenticationError, match="re-authentication"):
                    await conn.send(MetadataRequest(topics=None))
                with pytest.raises(ConnectionError):
                    await conn.send(MetadataRequest(topics=None))
            finally:
                await conn.close()

        run_async(go())
    assert expired_closes(caplog) == []


def test_share_consumer_polls_across_session_lifetimes(plain_broker, caplog):
    from confluent_kafka import Producer
    from confluent_kafka.admin import (
        AdminClient,
        AlterConfigOpType,
        ConfigEntry,
        ConfigResource,
        ResourceType,
    )

    from snakka.client.share_consumer import ShareConsumer

    bs = plain_broker.bootstrap_servers

    async def mk() -> None:
        async with Admin(bs, config=SEC) as admin:
            await admin.create_topic("reauth-share", 1)
    run_async(mk())
    confluent_admin = AdminClient({"bootstrap.servers": bs, **SEC})
    fs = confluent_admin.incremental_alter_configs([
        ConfigResource(ResourceType.GROUP, "reauth-workers", incremental_configs=[ConfigEntry(
            "share.auto.offset.reset", "earliest",
            incremental_operation=AlterConfigOpType.SET)])])
    for f in fs.values():
        f.result(timeout=30)
    p = Producer({"bootstrap.servers": bs, **SEC})
    c = ShareConsumer({"bootstrap.servers": bs, "group.id": "reauth-workers",
                       "fetch.max.wait.ms": 200, **SEC})
    got: list[bytes] = []
    sent = 0
    try:
        c.subscribe(["reauth-share"])
        deadline = time.monotonic() + 4.5 * LIFETIME_MS / 1000
        while time.monotonic() < deadline:
            p.produce("reauth-share", f"job{sent}".encode())
            sent += 1
            p.poll(0)
            got += [r.value for r in c.poll(0.1)]
        assert p.flush(30) == 0
        deadline = time.monotonic() + 30
        while len(got) < sent and time.monotonic() < deadline:
            got += [r.value for r in c.poll(0.2)]
    finally:
        c.close()
    assert sorted(got) == sorted(f"job{i}".encode() for i in range(sent))
    assert len(got) == sent  # nothing delivered twice: no session was lost
    assert expired_closes(caplog) == []
    assert reauth_count(caplog) >= 3


def _hp(b: EmbeddedBroker) -> tuple[str, int]:
    host, _, port = b.bootstrap_servers.rpartition(":")
    return host, int(port)
