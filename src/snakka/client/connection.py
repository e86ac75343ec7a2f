"""A minimal asyncio Kafka connection built on snakka's generated protocol.

Owns one TCP connection to one broker: it negotiates versions with ApiVersions on connect,
matches responses to requests by correlation id (requests may be pipelined), and raises on
timeouts and disconnects. It speaks only the public protocol, so it works against any Kafka
broker; snakka's CLI admin verbs and (later) the share consumer are built on it.

TLS: Kafka's client configs (``security.protocol=SSL``, ``ssl.truststore.*``,
``ssl.keystore.*``, ``ssl.endpoint.identification.algorithm``; librdkafka's
``ssl.ca.location`` / ``ssl.certificate.location`` / ``ssl.key.location`` too) build the context
through util/tls.py, the code the broker's listeners use.

Not a full producer/consumer client: no batching, retries or metadata refresh policy.
"""

from __future__ import annotations

import asyncio
import itertools
import ssl
import struct
from collections.abc import Mapping
from typing import Any

from snakka.client.sasl import SaslClientConfig
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
                await sasl_authenticate(self, self.sasl)
            except BaseException:
                await self.close()
                raise
        return self

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
        if self._writer is None:
            raise ConnectionClosed("not connected")
        api_key = request.API_KEY
        if version is None:
            version = self.version_for(api_key)
        corr = next(self._corr) & INT32_MAX
        fut = asyncio.get_running_loop().create_future()
        self._inflight[corr] = (fut, api_key, version, request)
        self._writer.write(encode_request(corr, self.client_id, version, request))
        try:
            return await asyncio.wait_for(fut, self.request_timeout)
        finally:
            self._inflight.pop(corr, None)

    async def send_no_response(self, request: Any, version: int | None = None) -> None:
        """Send a request that gets no response (Produce with acks=0)."""
        if self._writer is None:
            raise ConnectionClosed("not connected")
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


def parse_bootstrap(servers: str) -> tuple[str, int]:
    """First host:port of a bootstrap list ('[::1]:9092' style IPv6 allowed)."""
    first = servers.split(",")[0].strip()
    if first.startswith("["):
        host, _, port = first[1:].partition("]:")
    else:
        host, _, port = first.rpartition(":")
    return host, int(port)
