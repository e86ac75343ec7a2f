"""A small HTTP/1.1 server on the broker's event loop: what the console needs and nothing more.

What it owns: reading one request at a time from a connection (request line, headers, a body
sized by Content-Length), bounded in size and time, handing it to an async application
callable, and writing its response; keep-alive, so a browser loading a page, its stylesheet and
script and then polling the live charts reuses one connection. No chunked request bodies, no
pipelining beyond reading the next request after the answer, no TLS (the console binds
loopback by default, docs/console.md).

Why not an HTTP framework: the broker keeps its dependencies light and everything on one event
loop; the console's traffic is a handful of people's browsers. The Prometheus endpoint
(server/metrics.py) is one GET per connection and keeps its own few lines.

Bad input gets an HTTP error status and a closed connection, never an exception out of the
connection task: 400 for an unreadable request, 408 for a slow one, 413 for a body above
:data:`CONSOLE_HTTP_MAX_BODY_BYTES`, 431 for headers above :data:`CONSOLE_HTTP_MAX_HEADER_BYTES`,
500 (and a log line) when the application raises.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from urllib.parse import parse_qsl, unquote, urlsplit

log = logging.getLogger("snakka.console")

__all__ = [
    "CONSOLE_HTTP_IDLE_TIMEOUT_S",
    "CONSOLE_HTTP_MAX_BODY_BYTES",
    "CONSOLE_HTTP_MAX_CONNECTIONS",
    "CONSOLE_HTTP_MAX_HEADER_BYTES",
    "CONSOLE_HTTP_REQUEST_TIMEOUT_S",
    "HttpRequest",
    "HttpResponse",
    "HttpServer",
]

# Request line + headers of one request (a browser's are ~1 KiB; Basic credentials included).
CONSOLE_HTTP_MAX_HEADER_BYTES = 16 * 1024
# A form post (a test message's key, value and headers) at most this big.
CONSOLE_HTTP_MAX_BODY_BYTES = 1024 * 1024
# Time to receive one whole request once its first byte arrived.
CONSOLE_HTTP_REQUEST_TIMEOUT_S = 10.0
# A kept-alive connection with no new request for this long is closed.
CONSOLE_HTTP_IDLE_TIMEOUT_S = 30.0
# Open console connections at once; more are answered 503 and closed.
CONSOLE_HTTP_MAX_CONNECTIONS = 64

_REASONS = {200: "OK", 204: "No Content", 303: "See Other", 304: "Not Modified",
            400: "Bad Request", 401: "Unauthorized", 403: "Forbidden", 404: "Not Found",
            405: "Method Not Allowed", 408: "Request Timeout", 413: "Content Too Large",
            421: "Misdirected Request", 431: "Request Header Fields Too Large",
            500: "Internal Server Error", 503: "Service Unavailable"}


@dataclass(slots=True)
class HttpRequest:
    method: str
    path: str  # percent-decoded path
    raw_path: str  # as sent (segments may hold %2F)
    query: dict[str, str]
    headers: dict[str, str]  # lower-cased names; a repeated header keeps its last value
    body: bytes
    peer_host: str

    def form(self) -> dict[str, str]:
        """An application/x-www-form-urlencoded body (the last value of a repeated name)."""
        return dict(parse_qsl(self.body.decode("utf-8", "replace"), keep_blank_values=True))


@dataclass(slots=True)
class HttpResponse:
    status: int = 200
    body: bytes = b""
    content_type: str = "text/html; charset=utf-8"
    headers: dict[str, str] = field(default_factory=dict)

    @classmethod
    def text(cls, status: int, text: str) -> HttpResponse:
        return cls(status, text.encode(), "text/plain; charset=utf-8")

    @classmethod
    def redirect(cls, location: str) -> HttpResponse:
        return cls(303, b"", "text/plain; charset=utf-8", {"Location": location})


Application = Callable[[HttpRequest], Awaitable[HttpResponse]]

# Sent with every answer: no framing by other sites (clickjacking of the action forms), no
# content sniffing, scripts and styles from this origin only (an injected <script> would not
# run even if escaping missed something), no referrer leaking topic names elsewhere.
_SECURITY_HEADERS = (
    "X-Content-Type-Options: nosniff\r\n"
    "X-Frame-Options: DENY\r\n"
    "Referrer-Policy: no-referrer\r\n"
    "Content-Security-Policy: default-src 'self'; img-src 'self' data:; "
    "style-src 'self'; script-src 'self'; frame-ancestors 'none'; form-action 'self'\r\n"
)


class HttpServer:
    """Serves ``app`` on ``host:port`` (port 0: ephemeral; :attr:`port` is the bound one)."""

    def __init__(self, app: Application, host: str, port: int) -> None:
        self.app = app
        self.host = host
        self.port = port
        self._server: asyncio.Server | None = None
        self._connections: set[asyncio.StreamWriter] = set()

    async def start(self) -> None:
        self._server = await asyncio.start_server(
            self._serve, self.host or None, self.port, limit=CONSOLE_HTTP_MAX_HEADER_BYTES)
        self.port = self._server.sockets[0].getsockname()[1]

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
            for w in list(self._connections):
                w.close()
            await self._server.wait_closed()
            self._server = None

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if len(self._connections) >= CONSOLE_HTTP_MAX_CONNECTIONS:
            await self._write(writer, HttpResponse.text(503, "too many connections\n"), False)
            writer.close()
            return
        self._connections.add(writer)
        peer = writer.get_extra_info("peername")
        peer_host = str(peer[0]) if isinstance(peer, tuple) and peer else ""
        try:
            keep_alive = True
            while keep_alive:
                try:
                    first = await asyncio.wait_for(reader.readexactly(1),
                                                   CONSOLE_HTTP_IDLE_TIMEOUT_S)
                except (TimeoutError, asyncio.IncompleteReadError, ConnectionError):
                    return  # idle, or the browser closed it
                req, error = await self._read_request(first, reader, peer_host)
                if req is None:
                    assert error is not None
                    await self._write(writer, error, False)
                    return
                keep_alive = req.headers.get("connection", "").lower() != "close"
                try:
                    resp = await self.app(req)
                except Exception:  # a bug in a page: answer 500, keep serving others
                    log.exception("console: %s %s failed", req.method, req.raw_path)
                    resp = HttpResponse.text(500, "internal error (see the broker log)\n")
                if not await self._write(writer, resp, keep_alive, req.method == "HEAD"):
                    return
        finally:
            self._connections.discard(writer)
            writer.close()

    async def _read_request(self, first: bytes, reader: asyncio.StreamReader, peer_host: str
                            ) -> tuple[HttpRequest | None, HttpResponse | None]:
        try:
            head = first + await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"),
                                                  CONSOLE_HTTP_REQUEST_TIMEOUT_S)
        except (asyncio.LimitOverrunError, ValueError):
            return None, HttpResponse.text(431, "request headers too large\n")
        except (TimeoutError, asyncio.IncompleteReadError, ConnectionError):
            return None, HttpResponse.text(408, "request timeout\n")
        lines = head.decode("latin-1").split("\r\n")
        parts = lines[0].split()
        if len(parts) != 3 or not parts[2].startswith("HTTP/1."):
            return None, HttpResponse.text(400, "bad request line\n")
        method, target = parts[0], parts[1]
        headers: dict[str, str] = {}
        for line in lines[1:]:
            if not line:
                continue
            name, sep, value = line.partition(":")
            if not sep or not name or name != name.strip():
                return None, HttpResponse.text(400, "bad header line\n")
            headers[name.lower()] = value.strip()
        if "transfer-encoding" in headers:
            return None, HttpResponse.text(400, "chunked request bodies are not supported\n")
        try:
            length = int(headers.get("content-length", "0"))
        except ValueError:
            return None, HttpResponse.text(400, "bad Content-Length\n")
        if length < 0:
            return None, HttpResponse.text(400, "bad Content-Length\n")
        if length > CONSOLE_HTTP_MAX_BODY_BYTES:
            return None, HttpResponse.text(413, "request body too large\n")
        body = b""
        if length:
            try:
                body = await asyncio.wait_for(reader.readexactly(length),
                                              CONSOLE_HTTP_REQUEST_TIMEOUT_S)
            except (TimeoutError, asyncio.IncompleteReadError, ConnectionError):
                return None, HttpResponse.text(408, "request timeout\n")
        split = urlsplit(target)
        raw_path = split.path or "/"
        query = dict(parse_qsl(split.query, keep_blank_values=True))
        return HttpRequest(method, unquote(raw_path), raw_path, query, headers, body,
                           peer_host), None

    async def _write(self, writer: asyncio.StreamWriter, resp: HttpResponse, keep_alive: bool,
                     head_only: bool = False) -> bool:
        reason = _REASONS.get(resp.status, "Unknown")
        extra = "".join(f"{k}: {v}\r\n" for k, v in resp.headers.items())
        head = (f"HTTP/1.1 {resp.status} {reason}\r\nContent-Type: {resp.content_type}\r\n"
                f"Content-Length: {len(resp.body)}\r\n{_SECURITY_HEADERS}{extra}"
                f"Connection: {'keep-alive' if keep_alive else 'close'}\r\n\r\n")
        try:
            writer.write(head.encode("latin-1") + (b"" if head_only else resp.body))
            await writer.drain()
        except (ConnectionError, OSError):
            return False
        return True
