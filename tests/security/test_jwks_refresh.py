"""An http(s) ``sasl.oauthbearer.jwks.endpoint.url`` is kept fresh as Kafka's RefreshingHttpsJwks
does: every ``sasl.oauthbearer.jwks.endpoint.refresh.ms``, at once on an unknown key id, with
retries backing off (``...retry.backoff.ms`` / ``...retry.backoff.max.ms``), never blocking
validation. The JWKS is served by a local HTTP server (loopback, http.server in a thread) whose
keys the tests rotate."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from snakka.client.connection import KafkaConnection
from snakka.client.sasl import SaslAuthenticationError, SaslClientConfig
from snakka.protocol.messages.metadata_request import MetadataRequest
from snakka.security.sasl.oauthbearer import JwksValidator, TokenInvalid
from snakka.testing import EmbeddedBroker
from tests.integration.helpers import run_async, wait_until

jwt = pytest.importorskip("jwt")
rsa = pytest.importorskip("cryptography.hazmat.primitives.asymmetric.rsa")

NOW_MS = int(time.time() * 1000)


class Key:
    def __init__(self, kid: str) -> None:
        self.kid = kid
        self.private = rsa.generate_private_key(public_exponent=65537, key_size=2048)
        self.jwk = json.loads(jwt.algorithms.RSAAlgorithm.to_jwk(self.private.public_key()))
        self.jwk.update(kid=kid, use="sig", alg="RS256")

    def token(self, sub: str = "svc", exp_in: int = 300) -> str:
        now = int(time.time())
        return jwt.encode({"sub": sub, "iat": now, "exp": now + exp_in}, self.private,
                          algorithm="RS256", headers={"kid": self.kid})


@pytest.fixture(scope="module")
def keys() -> dict[str, Key]:
    return {kid: Key(kid) for kid in ("a", "b", "c")}  # c is never served


class JwksServer:
    """Serves ``{"keys": [...]}`` at /jwks; ``fail`` answers 500 that many times first;
    ``hold``, when set, is waited on before answering (bounded)."""

    def __init__(self) -> None:
        self.jwks: list[dict] = []
        self.hits = 0
        self.fail = 0
        self.hold: threading.Event | None = None
        self.held_released_by_test: list[bool] = []
        self.served = threading.Condition()
        server = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 - http.server's name
                if server.hold is not None:
                    server.held_released_by_test.append(server.hold.wait(30))
                with server.served:
                    server.hits += 1
                    failing = server.fail > 0
                    server.fail -= 1 if failing else 0
                    body = json.dumps({"keys": server.jwks}).encode()
                    server.served.notify_all()
                self.send_response(500 if failing else 200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(0 if failing else len(body)))
                self.end_headers()
                if not failing:
                    self.wfile.write(body)

            def log_message(self, *args: object) -> None:
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/jwks"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    def serve(self, *keys: Key) -> None:
        self.jwks = [k.jwk for k in keys]

    def close(self) -> None:
        if self.hold is not None:
            self.hold.set()
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def server() -> Iterator[JwksServer]:
    s = JwksServer()
    yield s
    s.close()


def validator(server: JwksServer, **kw: int) -> JwksValidator:
    kw.setdefault("retry_backoff_ms", 10)
    return JwksValidator(server.url, clock_skew_s=5, **kw)


def refreshed_after(v: JwksValidator, n: int) -> None:
    assert v.refresher is not None
    wait_until(lambda: v.refresher.refreshes > n, 10, f"JWKS refresh #{n + 1}")


def test_periodic_refresh_rotates_keys(server, keys):
    server.serve(keys["a"])
    v = validator(server, refresh_ms=200)
    try:
        assert v.validate(keys["a"].token(), NOW_MS).principal_name == "svc"
        server.serve(keys["b"])  # the identity provider rotates: a removed, b added
        refreshed_after(v, 0)
        assert v.validate(keys["b"].token(), NOW_MS).principal_name == "svc"
        with pytest.raises(TokenInvalid, match="no key with kid 'a'"):
            v.validate(keys["a"].token(), NOW_MS)
        hits = server.hits
        refreshed_after(v, v.refresher.refreshes)  # and again, every refresh.ms
        assert server.hits > hits
    finally:
        v.close()


def test_unknown_kid_refreshes_at_once_and_that_token_is_refused(server, keys):
    server.serve(keys["a"])
    v = validator(server)  # refresh.ms: Kafka's default, an hour
    try:
        assert server.hits == 1  # the fetch at start
        server.serve(keys["a"], keys["b"])
        with pytest.raises(TokenInvalid, match="refreshing"):
            v.validate(keys["b"].token(), NOW_MS)
        refreshed_after(v, 0)
        assert v.validate(keys["b"].token(), NOW_MS).principal_name == "svc"
        assert v.validate(keys["a"].token(), NOW_MS).principal_name == "svc"
        # An id still unknown after its refresh asks again only after a minute.
        hits = server.hits
        for _ in range(3):
            with pytest.raises(TokenInvalid, match="no key with kid 'c'"):
                v.validate(keys["c"].token(), NOW_MS)
        refreshed_after(v, 1)
        with pytest.raises(TokenInvalid) as e:
            v.validate(keys["c"].token(), NOW_MS)
        assert "refreshing" not in str(e.value)
        assert server.hits == hits + 1
    finally:
        v.close()


def test_validation_does_not_wait_for_the_fetch(server, keys):
    server.serve(keys["a"])
    v = validator(server)
    try:
        server.serve(keys["a"], keys["b"])
        server.hold = threading.Event()
        # The fetch this starts is held by the server until the test releases it: had
        # validate() waited for it, it would only return after the server's 30 s bound.
        with pytest.raises(TokenInvalid):
            v.validate(keys["b"].token(), NOW_MS)
        assert v.validate(keys["a"].token(), NOW_MS).principal_name == "svc"
        server.hold.set()
        refreshed_after(v, 0)
        assert server.held_released_by_test == [True]
        assert v.validate(keys["b"].token(), NOW_MS).principal_name == "svc"
    finally:
        v.close()


def test_failed_fetch_is_retried_with_backoff_and_keeps_the_keys(server, keys, caplog):
    server.serve(keys["a"])
    v = validator(server, retry_backoff_ms=20, retry_backoff_max_ms=10_000)
    try:
        server.serve(keys["a"], keys["b"])
        server.fail = 3
        with pytest.raises(TokenInvalid):
            v.validate(keys["b"].token(), NOW_MS)
        assert v.validate(keys["a"].token(), NOW_MS).principal_name == "svc"  # kept
        refreshed_after(v, 0)
        assert server.hits == 1 + 4  # start, three failures, the success
        assert v.validate(keys["b"].token(), NOW_MS).principal_name == "svc"
    finally:
        v.close()


def test_fetch_failing_past_the_backoff_budget_logs_and_keeps_the_keys(server, keys, caplog):
    server.serve(keys["a"])
    v = validator(server, retry_backoff_ms=20, retry_backoff_max_ms=100)
    try:
        server.fail = 1000
        with pytest.raises(TokenInvalid):
            v.validate(keys["b"].token(), NOW_MS)
        wait_until(lambda: any("JWKS refresh from" in r.getMessage() and "failed" in
                               r.getMessage() for r in caplog.records), 10, "the warning")
        assert v.validate(keys["a"].token(), NOW_MS).principal_name == "svc"
        assert 2 <= server.hits <= 1 + 8  # retries doubling from 20 ms within 100 ms
    finally:
        v.close()


def test_broker_accepts_a_rotated_key_and_refuses_a_removed_one(server, keys):
    server.serve(keys["a"])
    cfg = {"listeners": "SASL_PLAINTEXT://localhost:0", "sasl.enabled.mechanisms": "OAUTHBEARER",
           "sasl.oauthbearer.jwks.endpoint.url": server.url,
           "sasl.oauthbearer.jwks.endpoint.refresh.ms": "3600000",
           "sasl.oauthbearer.jwks.endpoint.retry.backoff.ms": "10",
           "connection.failed.authentication.delay.ms": "10"}
    with EmbeddedBroker(config=cfg, log_level="INFO") as b:
        host, _, port = b.bootstrap_servers.rpartition(":")

        async def login(key: Key) -> None:
            sasl = SaslClientConfig("OAUTHBEARER", token=key.token())
            async with KafkaConnection(host, int(port), sasl=sasl) as conn:
                await conn.send(MetadataRequest(topics=None))

        run_async(login(keys["a"]))
        server.serve(keys["b"])  # a rotated out, b in
        with pytest.raises(SaslAuthenticationError, match="invalid_token"):
            run_async(login(keys["b"]))  # unknown kid: refused, and a refresh starts
        wait_until(lambda: server.hits >= 2, 10, "the expedited JWKS fetch")

        def b_accepted() -> bool:
            try:
                run_async(login(keys["b"]))
                return True
            except SaslAuthenticationError:
                return False
        wait_until(b_accepted, 10, "the new key to be accepted")
        with pytest.raises(SaslAuthenticationError, match="invalid_token"):
            run_async(login(keys["a"]))
        validator_thread = [t for t in threading.enumerate() if t.name.startswith("jwks-refresh")
                            and server.url in t.name]
        assert validator_thread
    wait_until(lambda: not any(t.is_alive() for t in validator_thread), 10,
               "the refresher thread to stop with the broker")


def test_configs_have_kafkas_names_and_defaults():
    from snakka.config import BROKER_CONFIGS

    assert BROKER_CONFIGS["sasl.oauthbearer.jwks.endpoint.refresh.ms"].default == "3600000"
    assert BROKER_CONFIGS["sasl.oauthbearer.jwks.endpoint.retry.backoff.ms"].default == "100"
    assert BROKER_CONFIGS["sasl.oauthbearer.jwks.endpoint.retry.backoff.max.ms"].default \
        == "10000"
