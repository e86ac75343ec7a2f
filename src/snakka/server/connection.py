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
bound); frames above ``socket.request.max.bytes`` close the connection; a request must arrive
completely within ``socket.request.arrival.timeout.ms`` (``request_started``, enforced by the
listener's connection reaper). Anything undecodable closes this connection with a log line;
nothing here can take the broker down.

Response memory (server/memory.py): every response is counted in the broker-wide
``queued.max.response.bytes`` budget from the moment it exists (a Fetch reserves before it reads
from disk: ``reserve_response_bytes``) until the transport has written it to the socket. The
transport's write-buffer limits are high=0/low=0, so ``pause_writing`` means "something is
buffered" and ``resume_writing`` means "everything written": that is when this connection's
charge is released. Reading pauses while more than ``queued.max.response.bytes.per.connection``
bytes are buffered, or while the budget is spent and this connection holds unsent bytes, so a
client that does not read cannot make the broker queue more responses for it.
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
from snakka.server.quotas import normalize_ip

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

    __slots__ = ("broker", "services", "connection", "api_key", "api_version", "correlation_id", "client_id",
                 "header", "response_bytes")

    def __init__(self, broker: Broker, connection: KafkaConnection, header: Any, api_key: int,
                 api_version: int) -> None:
        self.broker = broker
        self.services = broker.services
        self.connection = connection
        self.header = header
        self.api_key = api_key
        self.api_version = api_version
        self.correlation_id = header.correlation_id
        self.client_id = header.client_id
        # Bytes reserved in the response-memory budget for this request's response (Fetch).
        self.response_bytes = 0

    @property
    def listener(self) -> Listener:
        return self.connection.listener


class _Pending:
    __slots__ = ("correlation_id", "api_key", "api_version", "task", "result", "ctx", "request",
                 "handler")

    def __init__(self, correlation_id: int, api_key: int, api_version: int,
                 task: asyncio.Future | None, result: Any, ctx: RequestContext | None = None,
                 request: Any = None, handler: Any = None) -> None:
        self.correlation_id = correlation_id
        self.api_key = api_key
        self.api_version = api_version
        self.task = task
        self.result = result
        self.ctx = ctx
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
        self.peer_ip = "?"
        self._buf = bytearray()
        self._pending: deque[_Pending] = deque()
        self._max_frame = self._max_inflight = self._max_buffered = 0  # set once admitted
        self._memory = broker.response_memory
        # Bytes this connection counts in the response-memory budget: reservations of responses
        # not yet written plus _in_transport (written, not yet drained to the socket).
        self._held = 0
        self._in_transport = 0
        # When the incomplete request now in _buf started to arrive (None: no partial request).
        self.request_started: float | None = None
        self._last_buffered = 0  # write-buffer size the reaper saw last (drain progress)
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
        if peer:
            self.peer_ip = normalize_ip(peer[0])
            self.peer = f"{peer[0]}:{peer[1]}"
        if not self.broker.register_connection(self):
            # Refused (max.connections, max.connections.per.ip): the quotas log it, rate-limited.
            self._closed = True
            transport.abort()
            return
        config = self.broker.config
        self._max_frame = config.int("socket.request.max.bytes")
        self._max_inflight = config.int("queued.max.requests")
        self._max_buffered = config.int("queued.max.response.bytes.per.connection")
        # high=0/low=0: pause_writing whenever anything is buffered, resume_writing once all of
        # it is written; the per-connection bound is checked in _update_reading.
        transport.set_write_buffer_limits(high=0, low=0)

    def connection_lost(self, exc: Exception | None) -> None:
        self._closed = True
        self.broker.unregister_connection(self)
        self._memory.notify_on_release(self, None)
        held, self._held, self._in_transport = self._held, 0, 0
        self._memory.release(held)
        for p in self._pending:
            if p.task is not None and not p.task.done():
                p.task.cancel()
        self._pending.clear()
        self._buf = bytearray()

    def pause_writing(self) -> None:
        self._writing_paused = True  # something is buffered (high-water mark 0)
        self._update_reading()

    def resume_writing(self) -> None:
        self._writing_paused = False  # everything written (low-water mark 0)
        self.last_active = time.monotonic()
        self._drained()
        self._update_reading()
        if not self._reading_paused and self._buf:
            self._process()

    def _drained(self) -> None:
        n, self._in_transport = self._in_transport, 0
        if n:
            self._held -= n
            self._memory.release(n)

    # -- response memory (server/memory.py) ------------------------------------------------
    def reserve_response_bytes(self, wanted: int) -> int | None:
        """Reserve up to ``wanted`` bytes of the response budget before reading from disk.

        Returns what the response may hold: ``wanted`` when the budget has room, what is left
        when it has less, 0 when it is spent but this connection holds nothing (the caller still
        returns the first whole batch, KIP-74); None when it is spent and this connection holds
        unsent bytes (wait for ``ResponseMemoryPool.wait_for_release``, or answer without data).
        The reservation is settled with ``settle_response_bytes`` once the size is known.
        """
        if self._closed:
            return wanted  # nothing will be written; nothing is counted
        avail = self._memory.available
        if avail >= wanted:
            grant = wanted
        elif avail > 0:
            grant = avail
        elif self._held == 0:
            grant = 0
        else:
            return None
        self._memory.charge(grant)
        self._held += grant
        return grant

    async def wait_for_response_memory(self, timeout_s: float) -> bool:
        """Wait until the broker-wide response budget frees some bytes (True) or the timeout."""
        return await self._memory.wait_for_release(timeout_s)

    def settle_response_bytes(self, reserved: int, actual: int) -> None:
        """Turn a reservation into the bytes really read (0 gives it back)."""
        if self._closed:
            return
        self._held += actual - reserved
        self._memory.charge(actual - reserved)

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
                break
            size = _SIZE.unpack_from(buf, 0)[0]
            if size < 8 or size > self._max_frame:
                self.close_with_error(
                    f"invalid request size {size} (socket.request.max.bytes={self._max_frame})")
                return
            end = 4 + size
            if n < end:
                break
            if n == end:
                frame = buf
                frame[:4] = b""  # drop the size prefix in place
                self._buf = buf = bytearray()
            else:
                frame = buf[4:end]
                del buf[:end]
            self.request_started = None
            self._handle_frame(frame)
        else:
            # Paused (by us) or closed: whatever waits in _buf is not the client's delay.
            self.request_started = None
            return
        if not self._buf:
            self.request_started = None
        elif self.request_started is None:
            self.request_started = time.monotonic()

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
                    self._respond(corr, api_key, 0, response, 0)
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
            self._pending.append(_Pending(corr, api_key, api_version, task, None, ctx, request,
                                          handler))
            task.add_done_callback(self._on_task_done)
            self._update_reading()
        elif self._pending:
            self._pending.append(_Pending(corr, api_key, api_version, None,
                                          _NO_RESPONSE if result is None else result, ctx))
        elif result is not None:
            self._respond(corr, api_key, api_version, result, ctx.response_bytes)

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
            reserved = p.ctx.response_bytes if p.ctx is not None else 0
            if p.result is not _NO_RESPONSE:
                self._respond(p.correlation_id, p.api_key, p.api_version, p.result, reserved)
            elif reserved:
                self.settle_response_bytes(reserved, 0)
        self._update_reading()
        if not self._reading_paused and self._buf and not self._closed:
            self._process()

    def _respond(self, correlation_id: int, api_key: int, api_version: int, response: Any,
                 reserved: int = 0) -> None:
        """Write one response; ``reserved`` is what its handler reserved in the response budget
        (its records), converted here into a charge for the whole frame."""
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
        size = data.total_length()
        self._held += size - reserved
        self._memory.charge(size - reserved)
        self._in_transport += size
        if data.chunks:
            self.transport.writelines(data.pieces())
        else:
            self.transport.write(data)
        self.last_active = time.monotonic()
        if not self._writing_paused:  # the socket took it all at once
            self._drained()
        self._update_reading()

    # -- flow control & closing ----------------------------------------------------------
    def _update_reading(self) -> None:
        if self.transport is None or self._closed:
            return
        want_pause = len(self._pending) >= self._max_inflight
        if self._writing_paused and not want_pause:
            want_pause = self.transport.get_write_buffer_size() > self._max_buffered
        if not want_pause and self._held > 0 and self._memory.exhausted:
            # The budget is spent and this client has not taken what it holds: read nothing
            # more from it until it does (resume_writing) or the budget frees up.
            want_pause = True
            self._memory.notify_on_release(self, self._on_memory_released)
        if want_pause and not self._reading_paused:
            self._reading_paused = True
            self.transport.pause_reading()
        elif not want_pause and self._reading_paused:
            self._reading_paused = False
            self.transport.resume_reading()

    def _on_memory_released(self) -> None:
        self._update_reading()
        if not self._reading_paused and self._buf and not self._closed:
            self._process()

    def close_with_error(self, reason: str) -> None:
        log.warning("closing connection from %s: %s", self.peer, reason)
        self.close()

    def close(self) -> None:
        """Close the connection. Unsent response bytes are dropped (as Kafka drops a closing
        channel's sends): a graceful close would wait for a client that may never read them,
        holding their memory and this connection's slot forever."""
        if self._closed:
            return
        if self.write_buffer_size():
            self.abort()
            return
        self._closed = True
        if self.transport is not None:
            self.transport.close()

    def abort(self) -> None:
        """Close now (RST), dropping unsent responses."""
        self._closed = True
        if self.transport is not None:
            self.transport.abort()

    def write_buffer_size(self) -> int:
        return self.transport.get_write_buffer_size() if self.transport is not None else 0

    def note_write_progress(self) -> None:
        """Count bytes drained to a slow reader since the last call as activity (the reaper
        calls this: a partially drained buffer gives no callback)."""
        size = self.write_buffer_size()
        if size < self._last_buffered:
            self.last_active = time.monotonic()
        self._last_buffered = size

    def has_pending(self) -> bool:
        return bool(self._pending)

    @property
    def closed(self) -> bool:
        return self._closed
