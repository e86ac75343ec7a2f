"""A minimal asyncio Kafka connection built on snakka's generated protocol.

Owns one TCP connection to one broker: it negotiates versions with ApiVersions on connect,
matches responses to requests by correlation id (requests may be pipelined), and raises on
timeouts and disconnects. It speaks only the public protocol, so it works against any Kafka
broker; snakka's CLI admin verbs and (later) the share consumer are built on it.

TLS: Kafka's client configs (``security.protocol=SSL``, ``ssl.truststore.*``,
``ssl.keystore.*``, ``ssl.endpoint.identification.algorithm``; librdkafka's
``ssl.ca.location`` / ``ssl.certificate.location`` / ``ssl.key.location`` too) build the context
through util/tls.py, the code the broker's listeners use.

SASL (``security.protocol=SASL_*``, client/sasl.py) runs after ApiVersions. When the broker
gives the session a lifetime (SaslAuthenticate v1+ ``session_lifetime_ms`` > 0, KIP-368,
``connections.max.reauth.ms`` on the broker), the connection re-authenticates on the same
socket at a random point between 85 % and 95 % of it (Kafka's Java client does the same),
timed from the start of the previous exchange. A re-authentication is: stop writing new
requests (callers of :meth:`KafkaConnection.send` wait), wait for the responses in flight,
SaslHandshake + SaslAuthenticate, resume. The broker closes a connection that sends anything
but a SaslHandshake while re-authenticating or after its session expired, hence the pause. A
timer starts it even when the connection is idle; if the loop did not run in time (the session
already expired), the next request re-authenticates first: the broker accepts a SaslHandshake
on an expired session. A refused re-authentication closes the connection: the waiting callers,
and later ones, get :class:`~snakka.client.sasl.SaslAuthenticationError` ("SASL
re-authentication failed: <the broker's message>"), and one WARNING on ``snakka.client``.

Not a full producer/consumer client: no batching, retries or metadata refresh policy.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import random
import ssl
import struct
from collections.abc import Mapping
from typing import Any

from snakka.client.sasl import SaslAuthenticationError, SaslClientConfig
from snakka.client.sasl import authenticate as sasl_authenticate
from snakka.limits import INT32_MAX
from snakka.protocol import decode_response_header, encode_request
from snakka.protocol.apis import api_spec
from snakka.protocol.messages.api_versions_request import ApiVersionsRequest
from snakka.util.tls import SSL_CONFIG_NAMES, TlsConfigError, TlsSettings, client_context

CLIENT_SOFTWARE_NAME = "snakka-client"
CLIENT_SOFTWARE_VERSION = "0.1.0"
# Largest response frame this client accepts; larger frames are a protocol error.
MAX_RESPONSE_BYTES = 256 * 1024 * 1024
# KIP-368: where in the session's lifetime a re-authentication starts, a random point in this
# range (Kafka's SaslClientAuthenticator: 85 % plus up to 10 %), so that many connections
# opened together do not re-authenticate together.
REAUTH_AT_LIFETIME_MIN = 0.85
REAUTH_AT_LIFETIME_MAX = 0.95

log = logging.getLogger("snakka.client")


class ConnectionClosed(ConnectionError):
    pass


class UnsupportedApi(RuntimeError):
    pass


# Kafka's client security configs this client understands (Java names), plus librdkafka's
# names for PEM files (kcat users bring them): ssl.ca.location is a PEM trust store,
# ssl.certificate.location + ssl.key.location a client certificate and its key.
_LIBRDKAFKA_SSL = ("ssl.ca.location", "ssl.certificate.location", "ssl.key.location")


def client_ssl_context(config: Mapping[str, Any] | None) -> ssl.SSLContext | None:
    """The TLS context for Kafka client configs (``security.protocol``, ``ssl.*``), or None
    for PLAINTEXT. ValueError (TlsConfigError) names a bad config."""
    cfg = {k: str(v) for k, v in (config or {}).items() if v is not None}
    protocol = cfg.get("security.protocol", "PLAINTEXT").strip().upper()
    if protocol in ("PLAINTEXT", "SASL_PLAINTEXT"):
        return None
    if protocol not in ("SSL", "SASL_SSL"):
        raise TlsConfigError("security.protocol", f"{protocol}: this client supports "
                             "PLAINTEXT, SSL, SASL_PLAINTEXT and SASL_SSL")
    settings = {k: v for k, v in cfg.items() if k in SSL_CONFIG_NAMES}
    if "ssl.ca.location" in cfg and "ssl.truststore.location" not in settings:
        settings |= {"ssl.truststore.type": "PEM",
                     "ssl.truststore.location": cfg["ssl.ca.location"]}
    ctx = client_context(TlsSettings(settings))
    cert, key = cfg.get("ssl.certificate.location"), cfg.get("ssl.key.location")
    if cert:
        try:
            ctx.load_cert_chain(cert, key or None,
                                password=lambda: cfg.get("ssl.key.password", ""))
        except (OSError, ssl.SSLError) as e:
            raise TlsConfigError("ssl.certificate.location", f"{cert}: {e}") from None
    return ctx


class KafkaConnection:
    def __init__(self, host: str, port: int, *, client_id: str = "snakka-cli",
                 request_timeout: float = 30.0, config: Mapping[str, Any] | None = None,
                 ssl_context: ssl.SSLContext | None = None,
                 sasl: SaslClientConfig | None = None) -> None:
        """``config``: Kafka client configs (``security.protocol``, ``ssl.*``, ``sasl.*``); or
        give a ready ``ssl_context`` / ``sasl`` (connections to several brokers share them)."""
        self.host, self.port = host, port
        self.config = dict(config or {})
        self.ssl_context = ssl_context if ssl_context is not None else \
            client_ssl_context(self.config)
        self.client_id = client_id
        self.request_timeout = request_timeout
        self._reader: asyncio.StreamReader | None = None
        self._writer: asyncio.StreamWriter | None = None
        self._corr = itertools.count(1)
        self._inflight: dict[int, tuple[asyncio.Future, int, int, Any]] = {}
        self._read_task: asyncio.Task | None = None
        self.versions: dict[int, tuple[int, int]] = {}
        # SASL_*: authenticate after ApiVersions (client/sasl.py).
        self.sasl = sasl if sasl is not None else SaslClientConfig.from_config(
            {k: str(v) for k, v in self.config.items() if v is not None})
        # KIP-368 re-authentication (see the module docstring).
        self.session_lifetime_ms = 0  # of the current SASL session; 0: it never expires
        self.reauthentications = 0  # completed re-authentications of this connection
        self._reauth_at: float | None = None  # loop time to re-authenticate at
        self._reauth_timer: asyncio.TimerHandle | None = None
        self._reauth_task: asyncio.Task | None = None
        self._reauth_failure: SaslAuthenticationError | None = None
        self._drained = asyncio.Event()  # set while no response is awaited
        self._drained.set()

    async def connect(self, timeout: float = 10.0) -> KafkaConnection:
        ctx = self.ssl_context
        self._reader, self._writer = await asyncio.wait_for(
            asyncio.open_connection(
                self.host, self.port, ssl=ctx,
                server_hostname=(self.host if ctx.check_hostname else "") if ctx else None,
                ssl_handshake_timeout=timeout if ctx else None), timeout)
        self._read_task = asyncio.ensure_future(self._read_loop())
        resp = await self.send(ApiVersionsRequest(client_software_name=CLIENT_SOFTWARE_NAME,
                                                  client_software_version=CLIENT_SOFTWARE_VERSION),
                               version=3)
        if resp.error_code == 35:  # UNSUPPORTED_VERSION: the broker told us its range
            resp = await self.send(ApiVersionsRequest(), version=0)
        self.versions = {k.api_key: (k.min_version, k.max_version) for k in resp.api_keys}
        if self.sasl is not None:
            try:
                await self._authenticate(self)
            except BaseException:
                await self.close()
                raise
        return self

    # -- KIP-368 re-authentication -------------------------------------------------------------
    async def _authenticate(self, sender: Any) -> None:
        """One SASL exchange through ``sender``; schedules the next one if the session has a
        lifetime."""
        assert self.sasl is not None
        loop = asyncio.get_running_loop()
        started = loop.time()
        lifetime = await sasl_authenticate(sender, self.sasl)
        self.session_lifetime_ms = lifetime
        if self._reauth_timer is not None:
            self._reauth_timer.cancel()
            self._reauth_timer = None
        self._reauth_at = None
        if lifetime > 0:
            share = random.uniform(REAUTH_AT_LIFETIME_MIN, REAUTH_AT_LIFETIME_MAX)  # noqa: S311
            self._reauth_at = started + lifetime / 1000 * share
            self._reauth_timer = loop.call_at(self._reauth_at, self._start_reauthentication)

    def _start_reauthentication(self) -> asyncio.Task:
        self._reauth_timer = None
        if self._reauth_task is None or self._reauth_task.done():
            self._reauth_task = asyncio.ensure_future(self._reauthenticate())
            # The failure is kept for the callers (self._reauth_failure); an idle connection's
            # task may have nobody awaiting it.
            self._reauth_task.add_done_callback(
                lambda t: None if t.cancelled() else t.exception())
        return self._reauth_task

    async def _reauthenticate(self) -> None:
        """Hold new requests (send() waits while this task runs), wait for the responses in
        flight, run the exchange again, resume. A failure closes the connection."""
        self._reauth_at = None
        try:
            await self._drained.wait()
            if self._writer is None:
                return
            await self._authenticate(_Unheld(self))
            self.reauthentications += 1
        except asyncio.CancelledError:
            raise
        except Exception as e:
            failure = SaslAuthenticationError(f"SASL re-authentication failed: {e}")
            self._reauth_failure = failure
            log.warning("closing connection to %s:%s: %s", self.host, self.port, failure)
            await self._close_transport()
            raise failure from e

    async def _before_write(self) -> None:
        """Wait for a re-authentication in progress, or start one that is overdue."""
        while True:
            if self._reauth_failure is not None:
                raise self._reauth_failure
            task = self._reauth_task
            if task is not None and not task.done():
                await asyncio.shield(task)
                continue
            if self._reauth_at is not None and \
                    asyncio.get_running_loop().time() >= self._reauth_at:
                if self._reauth_timer is not None:
                    self._reauth_timer.cancel()
                self._start_reauthentication()
                continue
            if self._writer is None:
                raise ConnectionClosed("not connected")
            return

    def version_for(self, api_key: int) -> int:
        spec = api_spec(api_key)
        if spec is None or api_key not in self.versions:
            raise UnsupportedApi(f"broker does not support API key {api_key}")
        lo, hi = self.versions[api_key]
        ours_hi = spec.max_version - (1 if spec.latest_version_unstable else 0)
        v = min(hi, ours_hi)
        if v < max(lo, spec.min_version):
            raise UnsupportedApi(f"no common version for API key {api_key}")
        return v

    async def send(self, request: Any, version: int | None = None) -> Any:
        if self._reauth_failure is not None:
            raise self._reauth_failure
        if self._writer is None:
            raise ConnectionClosed("not connected")
        if self._reauth_at is not None or self._reauth_task is not None:
            await self._before_write()
        return await self._send_now(request, version)

    async def _send_now(self, request: Any, version: int | None = None) -> Any:
        if self._writer is None:
            raise self._reauth_failure or ConnectionClosed("not connected")
        api_key = request.API_KEY
        if version is None:
            version = self.version_for(api_key)
        corr = next(self._corr) & INT32_MAX
        fut = asyncio.get_running_loop().create_future()
        self._inflight[corr] = (fut, api_key, version, request)
        self._drained.clear()
        try:
            self._writer.write(encode_request(corr, self.client_id, version, request))
            return await asyncio.wait_for(fut, self.request_timeout)
        finally:
            self._inflight.pop(corr, None)
            if not self._inflight:
                self._drained.set()

    async def send_no_response(self, request: Any, version: int | None = None) -> None:
        """Send a request that gets no response (Produce with acks=0)."""
        if self._reauth_failure is not None:
            raise self._reauth_failure
        if self._writer is None:
            raise ConnectionClosed("not connected")
        if self._reauth_at is not None or self._reauth_task is not None:
            await self._before_write()
        assert self._writer is not None
        if version is None:
            version = self.version_for(request.API_KEY)
        corr = next(self._corr) & INT32_MAX
        self._writer.write(encode_request(corr, self.client_id, version, request))
        await self._writer.drain()

    async def _read_loop(self) -> None:
        assert self._reader is not None
        err: Exception = ConnectionClosed("connection closed by broker")
        try:
            while True:
                size = struct.unpack(">i", await self._reader.readexactly(4))[0]
                if size < 4 or size > MAX_RESPONSE_BYTES:
                    err = ConnectionClosed(f"bad response size {size}")
                    break
                frame = await self._reader.readexactly(size)
                corr = struct.unpack_from(">i", frame, 0)[0]
                entry = self._inflight.get(corr)
                if entry is None:
                    continue
                fut, api_key, version, _req = entry
                if not fut.done():
                    try:
                        _hdr, pos = decode_response_header(frame, api_key, version)
                        spec = api_spec(api_key)
                        assert spec is not None  # we sent a request of this key
                        fut.set_result(spec.response_class.read(frame, pos, version)[0])
                    except Exception as e:  # a decode error fails that request only
                        fut.set_exception(e)
        except (asyncio.IncompleteReadError, ConnectionError, OSError) as e:
            err = ConnectionClosed(str(e) or "connection closed")
        except asyncio.CancelledError:
            err = ConnectionClosed("connection closed")
        for fut, *_ in list(self._inflight.values()):
            if not fut.done():
                fut.set_exception(err)

    async def close(self) -> None:
        if self._reauth_timer is not None:
            self._reauth_timer.cancel()
            self._reauth_timer = None
        self._reauth_at = None
        task, self._reauth_task = self._reauth_task, None
        if task is not None and task is not asyncio.current_task():
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        await self._close_transport()

    async def _close_transport(self) -> None:
        if self._writer is not None:
            self._writer.close()
            try:
                await self._writer.wait_closed()
            except OSError:
                pass
            self._writer = None
        if self._read_task is not None:
            self._read_task.cancel()
            try:
                await self._read_task
            except (asyncio.CancelledError, Exception):
                pass

    async def __aenter__(self) -> KafkaConnection:
        return await self.connect()

    async def __aexit__(self, *exc: object) -> None:
        await self.close()


class _Unheld:
    """The connection's sender for the re-authentication exchange itself (not held)."""

    def __init__(self, conn: KafkaConnection) -> None:
        self._conn = conn

    async def send(self, request: Any, version: int | None = None) -> Any:
        return await self._conn._send_now(request, version)

    def version_for(self, api_key: int) -> int:
        return self._conn.version_for(api_key)


def parse_bootstrap(servers: str) -> tuple[str, int]:
    """First host:port of a bootstrap list ('[::1]:9092' style IPv6 allowed)."""
    first = servers.split(",")[0].strip()
    if first.startswith("["):
        host, _, port = first[1:].partition("]:")
    else:
        host, _, port = first.rpartition(":")
    return host, int(port)
