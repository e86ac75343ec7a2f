"""One client connection: framing, decoding, dispatch, and in-order responses.

Owns the byte stream of a single TCP connection. It cuts the stream into size-prefixed frames,
enforces the frame-size limit (``socket.request.max.bytes``), decodes the request header and body
with the generated codecs, and hands the request to the API's handler module.

Ordering discipline: clients pipeline requests (librdkafka keeps up to 5 in flight) and Kafka
answers them in request order. A handler runs *synchronously* up to its first ``await``, in frame
order, so state changes such as appends happen in request order. Handlers that must wait (a
long-poll Fetch, an acks=all produce waiting for fsync) return a coroutine; the connection
keeps a queue of pending responses and writes each one only when every earlier one is written.

Handler failures: a handler that raises (synchronously or in its coroutine) never drops the
connection. The request is answered with Kafka's error response for it (every error code of the
response set, per topic/partition/group as the request listed them; see
:mod:`snakka.protocol.error_response`) and one log line. Only what Kafka closes on is closed:
undecodable frames, unknown APIs/versions, and a failed acks=0 produce (it has no response).

Bounds: at most ``queued.max.requests`` requests in flight per connection (reading pauses at the
bound), reading also pauses while the transport's write buffer is above its high-water mark (a
slow reader cannot make the broker buffer without limit), and frames above
``socket.request.max.bytes`` close the connection. Anything undecodable closes this connection with
a log line; nothing here can take the broker down.
"""

from __future__ import annotations

import asyncio
import logging
import struct
import time
from collections import deque
from typing import TYPE_CHECKING, Any

from snakka.protocol import ScatterBuffer, decode_request_header, write_response
from snakka.protocol.error_response import error_code_for, error_response
from snakka.protocol.errors import DecodeError, ErrorCode

if TYPE_CHECKING:
    from snakka.broker import Broker
    from snakka.config import Listener

log = logging.getLogger("snakka.server")

_SIZE = struct.Struct(">i")
_KEY_VER = struct.Struct(">hh")
_API_VERSIONS = 18
_PRODUCE = 0
_NO_RESPONSE = object()
_CLOSE = object()


class RequestContext:
    """What a handler may know about the request beyond its body."""

    __slots__ = ("broker", "connection", "api_key", "api_version", "correlation_id", "client_id",
                 "header")

    def __init__(self, broker: Broker, connection: KafkaConnection, header: Any, api_key: int,
                 api_version: int) -> None:
        self.broker = broker
        self.connection = connection
        self.header = header
        self.api_key = api_key
        self.api_version = api_version
        self.correlation_id = header.correlation_id
        self.client_id = header.client_id

    @property
    def listener(self) -> Listener:
        return self.connection.listener


class _Pending:
    __slots__ = ("correlation_id", "api_key", "api_version", "task", "result", "request",
                 "handler")

    def __init__(self, correlation_id: int, api_key: int, api_version: int,
                 task: asyncio.Future | None, result: Any, request: Any = None,
                 handler: Any = None) -> None:
        self.correlation_id = correlation_id
        self.api_key = api_key
        self.api_version = api_version
        self.task = task
        self.result = result
        # Kept while the handler's coroutine runs: a failure is answered with an error
        # response shaped like the request (protocol.error_response).
        self.request = request
        self.handler = handler


class KafkaConnection(asyncio.Protocol):
    def __init__(self, broker: Broker, listener: Listener) -> None:
        self.broker = broker
        self.listener = listener
        self.transport: asyncio.Transport | None = None
        self.peer = "?"
        self._buf = bytearray()
        self._pending: deque[_Pending] = deque()
        self._max_frame = broker.config.int("socket.request.max.bytes")
        self._max_inflight = broker.config.int("queued.max.requests")
        self._reading_paused = False
        self._writing_paused = False
        self._closed = False
        self.last_active = time.monotonic()
        self.client_software: tuple[str, str] | None = None
        # Per-connection scratch state handlers may use (e.g. ApiVersions client info).
        self.state: dict[str, Any] = {}

    # -- asyncio.Protocol ----------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]  # uvloop's is not a subclass
        peer = transport.get_extra_info("peername")
        self.peer = f"{peer[0]}:{peer[1]}" if peer else "?"
        if not self.broker.register_connection(self):
            log.warning("closing connection from %s: max.connections=%d reached", self.peer,
                        self.broker.config.int("max.connections"))
            self._closed = True
            transport.abort()
            return
        transport.set_write_buffer_limits(high=4 * 1024 * 1024)

    def connection_lost(self, exc: Exception | None) -> None:
        self._closed = True
        self.broker.unregister_connection(self)
        for p in self._pending:
            if p.task is not None and not p.task.done():
                p.task.cancel()
        self._pending.clear()
        self._buf = bytearray()

    def pause_writing(self) -> None:
        self._writing_paused = True
        self._update_reading()

    def resume_writing(self) -> None:
        self._writing_paused = False
        self._update_reading()
        if not self._reading_paused and self._buf:
            self._process()

    def data_received(self, data: bytes) -> None:
        self.last_active = time.monotonic()
        if self._buf:
            self._buf += data
        else:
            self._buf = bytearray(data)
        self._process()

    def eof_received(self) -> bool | None:
        return None  # close our side too

    # -- framing -------------------------------------------------------------------------
    def _process(self) -> None:
        buf = self._buf
        while not self._closed and not self._reading_paused:
            n = len(buf)
            if n < 4:
                return
            size = _SIZE.unpack_from(buf, 0)[0]
            if size < 8 or size > self._max_frame:
                self.close_with_error(
                    f"invalid request size {size} (socket.request.max.bytes={self._max_frame})")
                return
            end = 4 + size
            if n < end:
                return
            if n == end:
                frame = buf
                frame[:4] = b""  # drop the size prefix in place
                self._buf = buf = bytearray()
            else:
                frame = buf[4:end]
                del buf[:end]
            self._handle_frame(frame)

    def _handle_frame(self, frame: bytearray) -> None:
        broker = self.broker
        api_key, api_version = _KEY_VER.unpack_from(frame, 0)
        handler = broker.handlers.get(api_key)
        if handler is None:
            self.close_with_error(f"unsupported API key {api_key} (version {api_version})")
            return
        if not handler.min_version <= api_version <= handler.max_version:
            if api_key == _API_VERSIONS:
                # KIP-511: answer an unknown ApiVersions version with a v0-shaped response.
                corr = struct.unpack_from(">i", frame, 4)[0]
                response = handler.unsupported_version_response(broker)
                if self._pending:  # keep request order behind earlier pipelined requests
                    self._pending.append(_Pending(corr, api_key, 0, None, response))
                else:
                    self._respond(corr, api_key, 0, response)
                return
            self.close_with_error(
                f"unsupported version {api_version} of API key {api_key} "
                f"(supported {handler.min_version}-{handler.max_version})")
            return
        try:
            header, pos, spec = decode_request_header(frame)
            request = spec.request_class.read(frame, pos, api_version)[0]
        except DecodeError as e:
            self.close_with_error(f"undecodable request (API key {api_key} v{api_version}): {e}")
            return
        ctx = RequestContext(broker, self, header, api_key, api_version)
        corr = header.correlation_id
        try:
            result = handler.handle(ctx, request)
        except Exception as exc:
            result = self._failed(api_key, api_version, request, handler, exc)
            if result is _CLOSE:
                return
        if asyncio.iscoroutine(result):
            task = asyncio.ensure_future(result)
            self._pending.append(_Pending(corr, api_key, api_version, task, None, request,
                                          handler))
            task.add_done_callback(self._on_task_done)
            self._update_reading()
        elif self._pending:
            self._pending.append(_Pending(corr, api_key, api_version, None,
                                          _NO_RESPONSE if result is None else result))
        elif result is not None:
            self._respond(corr, api_key, api_version, result)

    # -- handler failures ----------------------------------------------------------------
    def _failed(self, api_key: int, api_version: int, request: Any, handler: Any,
                exc: BaseException) -> Any:
        """A handler raised (synchronously or in its coroutine): answer with Kafka's error
        response for that request, the exception mapped to an error code, and one log line.
        Returns the response, ``None`` for no response, or ``_CLOSE`` after closing (only
        where Kafka closes too)."""
        code = error_code_for(exc, api_key)
        log.error("%s v%d from %s failed, answering %s (%d): %s: %s", handler.name, api_version,
                  self.peer, code.name, int(code), type(exc).__name__, exc)
        log.debug("traceback of the failed %s request", handler.name, exc_info=exc)
        if api_key == _PRODUCE and getattr(request, "acks", -1) == 0:
            # acks=0: the client reads no response; Kafka closes the connection so that it
            # notices the failure (KafkaApis.handleProduceRequest).
            self.close()
            return _CLOSE
        message = None if code == ErrorCode.UNKNOWN_SERVER_ERROR else code.message
        try:
            return error_response(api_key, api_version, request, code, message,
                                  handler.module)
        except Exception:  # a bug in the error path itself: nothing sensible to answer
            log.exception("cannot build an error response to %s v%d; closing connection "
                          "from %s", handler.name, api_version, self.peer)
            self.close()
            return _CLOSE

    # -- responses -----------------------------------------------------------------------
    def _on_task_done(self, _task: asyncio.Future) -> None:
        pending = self._pending
        while pending and not self._closed:
            p = pending[0]
            if p.task is not None:
                if not p.task.done():
                    break
                if p.task.cancelled():
                    pending.popleft()
                    continue
                exc = p.task.exception()
                if exc is not None:
                    p.result = self._failed(p.api_key, p.api_version, p.request, p.handler, exc)
                    if p.result is _CLOSE:
                        return
                else:
                    p.result = p.task.result()
                p.request = p.handler = None
                if p.result is None:
                    p.result = _NO_RESPONSE
            pending.popleft()
            if p.result is not _NO_RESPONSE:
                self._respond(p.correlation_id, p.api_key, p.api_version, p.result)
        self._update_reading()
        if not self._reading_paused and self._buf and not self._closed:
            self._process()

    def _respond(self, correlation_id: int, api_key: int, api_version: int, response: Any) -> None:
        if self._closed or self.transport is None:
            return
        # One buffer per response. Large record sets (Fetch) are not copied into it: they go
        # to the socket as separate chunks (writev), straight from the bytes read from disk.
        data = ScatterBuffer()
        try:
            write_response(data, correlation_id, api_key, api_version, response)
        except Exception:  # a handler built a response its version cannot carry: a bug
            log.exception("cannot encode response to API key %d v%d; closing connection from %s",
                          api_key, api_version, self.peer)
            self.close()
            return
        if data.chunks:
            self.transport.writelines(data.pieces())
        else:
            self.transport.write(data)
        self.last_active = time.monotonic()

    # -- flow control & closing ----------------------------------------------------------
    def _update_reading(self) -> None:
        if self.transport is None or self._closed:
            return
        want_pause = self._writing_paused or len(self._pending) >= self._max_inflight
        if want_pause and not self._reading_paused:
            self._reading_paused = True
            self.transport.pause_reading()
        elif not want_pause and self._reading_paused:
            self._reading_paused = False
            self.transport.resume_reading()

    def close_with_error(self, reason: str) -> None:
        log.warning("closing connection from %s: %s", self.peer, reason)
        self.close()

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        if self.transport is not None:
            self.transport.close()

    def has_pending(self) -> bool:
        return bool(self._pending)

    @property
    def closed(self) -> bool:
        return self._closed
