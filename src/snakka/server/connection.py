"""One client connection: the asyncio shell around its sans-I/O channel.

Owns the transport of a single TCP connection and nothing else of substance: bytes read go into
the channel (server/channel.py: framing, request order, in-flight and memory bounds, the arrival
clock, the authentication state), each complete request goes to the dispatcher
(server/dispatch.py: handler lookup, versions, decoding, authorization, the handler call), and
what the channel releases is written to the transport in request order.

Ordering discipline: clients pipeline requests (librdkafka keeps up to 5 in flight) and Kafka
answers them in request order. A handler runs *synchronously* up to its first ``await``, in frame
order, so state changes such as appends happen in request order. Handlers that must wait (a
long-poll Fetch, an acks=all produce waiting for fsync) return a coroutine, run here as a task;
the channel holds every later response until the earlier ones are written.

Collaborators are given explicitly (never the broker): the connection registry (admission,
quotas, close notifications), the response-memory pool, the channel limits and the dispatcher.

TLS (SSL and SASL_SSL listeners, security/ssl.py): the listener runs the handshake
(server/listener.py) and this connection starts once it is complete, on the TLS transport. On an
SSL listener the principal is the client certificate's subject mapped by
``ssl.principal.mapping.rules``, or ``User:ANONYMOUS`` without one; on SASL_SSL TLS is only the
transport and SASL decides the principal.

Response memory (server/memory.py): the transport's write-buffer limits are high=0/low=0, so
``pause_writing`` means "something is buffered" and ``resume_writing`` means "everything
written": that is when this connection's charge is released (``KafkaChannel.drained``). Reading
pauses when the channel says so (``KafkaChannel.read_decision``); a connection paused because the
budget is spent is woken when the pool releases bytes.

Zero-copy Fetch (Kafka's ``FileRecords.writeTo``): on a listener without TLS a Fetch handler
asks for large record sets as ``FileRegion`` s of the segment files (``zero_copy``), and this
connection sends them with ``os.sendfile`` from the file to the socket, never reading them
into memory. A response holding regions goes out in order: the bytes before a region through
the transport, then -- once the transport's buffer is empty (``resume_writing``) -- the region
with ``sendfile`` on a duplicate of the socket's descriptor, waiting for the socket to be
writable (``loop.add_writer`` on the duplicate: the transport keeps its own descriptor) when
the kernel's buffer is full, then the rest. Every later response queues behind it
(``_out``), so responses stay in request order; its bytes count as buffered for the
per-connection bound and are released from the response budget once all are sent. A region
holds its own descriptor of the segment file, so retention deleting the segment meanwhile
changes nothing; a file found shorter than its region (truncated under the send) cannot
complete the frame and closes the connection, as Kafka does. TLS listeners (sendfile cannot
encrypt) get record sets read into memory, and the Fetch handler caps such a response's
record bytes at ``snakka.fetch.memory.max.bytes``.

Client quotas (metadata/client_quotas.py, docs/quotas.md): when any quota is configured, each
answered request is recorded against its client's quota entity (Produce: the request's bytes;
every request: its handler's time; a Fetch's bytes are recorded by its handler, which answers a
throttled fetch empty), the throttle time (the larger of these and the handler's) goes
into the response's ``throttle_time_ms``, the response is sent at once, and then the channel is
muted (no reading) for that time, as Kafka 2.0+ (KIP-219). With no quota configured the cost is
one attribute read per request.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import os
import time
from collections import deque
from collections.abc import Callable
from typing import Any

from snakka.config import Listener
from snakka.protocol import FileRegion
from snakka.security.principal import KafkaPrincipal, SecurityProtocol
from snakka.security.ssl import ListenerTls, principal_from_certificate
from snakka.server.authentication import AuthState, ChannelAuthentication
from snakka.server.channel import (
    CLOSE,
    NEED_DATA,
    NO_RESPONSE,
    PAUSED,
    ChannelLimits,
    CloseConnection,
    KafkaChannel,
    RequestReceived,
    Send,
)
from snakka.server.dispatch import Call, RequestDispatcher
from snakka.server.memory import ResponseMemoryPool
from snakka.server.quotas import normalize_ip
from snakka.server.registry import ConnectionRegistry

log = logging.getLogger("snakka.server")

__all__ = ["ServerConnection"]

_SASL_AUTHENTICATE = 36  # ApiKey.SASL_AUTHENTICATE (a plain int on the request path)
_HAVE_SENDFILE = hasattr(os, "sendfile")

# Running handler coroutines (cancelled when the connection goes).
_Tasks = set[asyncio.Future]


class ServerConnection(asyncio.Protocol):
    def __init__(self, listener: Listener, *, registry: ConnectionRegistry,
                 memory: ResponseMemoryPool, limits: ChannelLimits,
                 dispatcher: RequestDispatcher,
                 security_protocol: SecurityProtocol = SecurityProtocol.PLAINTEXT,
                 tls: ListenerTls | None = None, ip_checked: bool = False,
                 hold_throttled: Callable[[Any, int], None] | None = None) -> None:
        self.listener = listener
        # Whether the listener already applied the address's connection_creation_rate (its own
        # accept loop did); if not, connection_made does (server/quotas.py).
        self._ip_checked = ip_checked
        self._hold_throttled = hold_throttled
        self._tls = tls
        # The principal the client certificate names (None: no TLS, or no certificate).
        self.tls_principal: KafkaPrincipal | None = None
        self._registry = registry
        self._memory = memory
        self._dispatcher = dispatcher
        self.channel = KafkaChannel(limits, memory, now=time.monotonic(),
                                    listener_name=listener.name,
                                    security_protocol=security_protocol)
        self.transport: asyncio.Transport | None = None
        self.peer = "?"
        self.peer_host = "?"
        self.peer_ip = "?"
        self._tasks: _Tasks = set()
        self._writing_paused = False
        self._transport_closed = False
        # _process is running: a re-entrant call (a memory-release callback fired inside a
        # handler) returns at once and the running loop reads on, so handlers still start in
        # frame order.
        self._processing = False
        self._quotas = dispatcher.quotas
        self._throttle_timer: asyncio.TimerHandle | None = None
        self._throttled_until = 0.0
        # Zero-copy Fetch (module docstring): what waits behind a file region being sent, the
        # bytes in it not yet handed to the socket, and a duplicate of the socket's descriptor
        # for sendfile and its writability callback (-1: none yet; None: no sendfile here).
        self._out: deque[Any] | None = None
        self._out_bytes = 0
        self._sock_fd: int | None = -1
        self._waiting_writable = False
        self._pumping = False
        self._pump_again = False
        self._pump_scheduled = False

    # -- typed connection state (what used to be a dict) ---------------------------------
    @property
    def closed(self) -> bool:
        return self.channel.closed

    @property
    def last_active(self) -> float:
        return self.channel.last_active

    @property
    def request_started(self) -> float | None:
        return self.channel.request_started

    @property
    def client_software(self) -> tuple[str, str] | None:
        info = self.channel.client_information
        return None if info is None else (info.software_name, info.software_version)

    @property
    def principal(self) -> Any:
        return self.channel.auth.principal

    @property
    def authentication(self) -> ChannelAuthentication:
        """The channel's authentication state (the SASL handlers drive it)."""
        return self.channel.auth

    @property
    def zero_copy(self) -> bool:
        """Whether Fetch may answer with file regions sent by ``sendfile`` (module docstring):
        not on TLS, which must encrypt the bytes."""
        return _HAVE_SENDFILE and self._tls is None and self._socket_fd() is not None

    # -- asyncio.Protocol ----------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]  # uvloop's is not a subclass
        peer = transport.get_extra_info("peername")
        if peer:
            self.peer_host = peer[0]
            self.peer_ip = normalize_ip(peer[0])
            self.peer = f"{peer[0]}:{peer[1]}"
        if not self._ip_checked:
            throttle_ms = self._registry.quotas.ip_throttle_ms(self.listener.name, self.peer_ip)
            if throttle_ms > 0:
                # Over the address's connection_creation_rate: not admitted, held unread for
                # the throttle time, then closed (Kafka's ConnectionThrottledException).
                self.channel.closed = True
                transport.pause_reading()  # type: ignore[attr-defined]
                if self._hold_throttled is not None:
                    self._hold_throttled(transport, throttle_ms)
                else:
                    self.abort()
                return
        if not self._registry.register(self):
            # Refused (max.connections, max.connections.per.ip): the quotas log it, rate-limited.
            self.abort()
            return
        if self._tls is not None and not self._tls_authenticate(transport):
            return
        # high=0/low=0: pause_writing whenever anything is buffered, resume_writing once all of
        # it is written; the per-connection bound is checked in _update_reading.
        transport.set_write_buffer_limits(high=0, low=0)  # type: ignore[attr-defined]

    def _tls_authenticate(self, transport: asyncio.BaseTransport) -> bool:
        """The handshake is complete (the listener ran it): the client certificate, if any,
        names the principal. False (and the connection aborted) when no mapping rule
        applies, as Kafka fails such an authentication."""
        assert self._tls is not None
        sslobj = transport.get_extra_info("ssl_object")
        der = sslobj.getpeercert(binary_form=True) if sslobj is not None else None
        try:
            principal = principal_from_certificate(der, self._tls.mapper)
        except ValueError as e:  # NoMatchingRule, an unreadable subject
            log.info("Failed authentication with %s on listener %s (no principal for the "
                     "client certificate: %s)", self.peer, self.listener.name, e)
            if self._dispatcher.metrics is not None:
                self._dispatcher.metrics.authenticated(self.listener.name, False)
            self.abort()
            return False
        if der:
            self.tls_principal = principal
            if self._dispatcher.metrics is not None:  # a client certificate accepted
                self._dispatcher.metrics.authenticated(self.listener.name, True)
        if not self.channel.security_protocol.uses_sasl:
            # SSL: the certificate authenticates (Kafka's DefaultKafkaPrincipalBuilder);
            # SASL_SSL: TLS is the transport and the SASL exchange names the principal.
            self.channel.auth.principal = principal
        return True

    def connection_lost(self, exc: Exception | None) -> None:
        self._drop_out()
        self.channel.close()
        self._registry.unregister(self)
        self._memory.notify_on_release(self, None)
        if self._throttle_timer is not None:
            self._throttle_timer.cancel()
            self._throttle_timer = None
        tasks, self._tasks = self._tasks, set()
        for task in tasks:
            if not task.done():
                task.cancel()

    def pause_writing(self) -> None:
        self._writing_paused = True  # something is buffered (high-water mark 0)
        self._update_reading()

    def resume_writing(self) -> None:
        self._writing_paused = False  # everything written (low-water mark 0)
        if self._out is not None:
            # A file region waited for the transport's buffer to empty. Sent from the next
            # loop iteration, not from inside this callback: a TLS transport calls it from
            # inside its own write path, which must not be re-entered with more data.
            if not self._pump_scheduled:
                self._pump_scheduled = True
                asyncio.get_running_loop().call_soon(self._on_writable)
            return
        self.channel.drained(time.monotonic())
        self._update_reading()
        self._process()

    def data_received(self, data: bytes) -> None:
        self.channel.receive_data(data, time.monotonic())
        self._process()

    def eof_received(self) -> bool | None:
        return None  # close our side too

    # -- requests ------------------------------------------------------------------------
    def _process(self) -> None:
        if self._processing:
            return
        self._processing = True
        try:
            channel = self.channel
            now = time.monotonic()  # one reading per batch: the arrival clock needs no more
            while True:
                ev = channel.next_event(now)
                if ev is NEED_DATA:
                    return
                if ev is PAUSED:
                    # A bound holds (or the channel closed): stop the transport reading too,
                    # so the client's bytes wait in the kernel, not here.
                    self._update_reading()
                    return
                if isinstance(ev, CloseConnection):
                    self._close_for(ev)
                    return
                assert ev.__class__ is RequestReceived
                quotas = self._quotas
                started = time.perf_counter() if quotas is not None and quotas.enabled else 0.0
                call, result = self._dispatcher.dispatch(self, ev)  # type: ignore[arg-type]
                handler_s = time.perf_counter() - started if started else 0.0
                if result.__class__ is CloseConnection:
                    self._close_for(result)
                    return
                assert call is not None
                call.started = now
                if asyncio.iscoroutine(result):
                    self._run(call, result, handler_s)
                else:
                    self._complete(call, NO_RESPONSE if result is None else result, handler_s)
        finally:
            self._processing = False

    def _run(self, call: Call, coroutine: Any, handler_s: float = 0.0) -> None:
        task = asyncio.ensure_future(coroutine)
        self._tasks.add(task)
        task.add_done_callback(functools.partial(self._on_task_done, call, handler_s))

    def _on_task_done(self, call: Call, handler_s: float, task: asyncio.Future) -> None:
        self._tasks.discard(task)
        if self.channel.closed:
            return
        if task.cancelled():
            result: Any = NO_RESPONSE
        else:
            exc = task.exception()
            if exc is not None:
                result = self._dispatcher.failed(call, exc, self.peer)
            else:
                result = task.result()
                if result is None:
                    result = NO_RESPONSE
        self._complete(call, result, handler_s)
        call.request = None  # kept only while the handler ran (its error response, metrics)
        self._update_reading()
        self._process()

    def _complete(self, call: Call, result: Any, handler_s: float = 0.0) -> None:
        now = time.monotonic()
        ctx = call.ctx
        quotas = self._quotas
        throttle_ms = 0
        if quotas is not None and quotas.enabled and ctx is not None and result is not CLOSE:
            throttle_ms = self._quota_throttle_ms(call, result, handler_s)
        metrics = self._dispatcher.metrics
        if metrics is not None:
            metrics.request_done(call.api_key, call.api_version, call.request, result,
                                 now - call.started)
        for item in self.channel.complete(call.event, result,
                                          ctx.response_bytes if ctx is not None else 0,
                                          call.api_version, now):
            if item.__class__ is CloseConnection:
                self._close_for(item)  # type: ignore[arg-type]
                return
            self._write(item, now)  # type: ignore[arg-type]
        if throttle_ms > 0:
            self._throttle(throttle_ms)
        auth = self.channel.auth
        if metrics is not None and call.api_key == _SASL_AUTHENTICATE:
            # Counted once the exchange ends (a SCRAM exchange takes two requests).
            if auth.state is AuthState.AUTHENTICATED:
                metrics.authenticated(self.listener.name, True)
            elif auth.must_close:
                metrics.authenticated(self.listener.name, False)
        if auth.state is not AuthState.AUTHENTICATED and auth.must_close:
            self.close()  # authentication failed: its response is written, then the close

    def _write(self, data: Send, now: float) -> None:
        transport = self.transport
        assert transport is not None
        if data.chunks:
            pieces = data.pieces()
            out = self._out
            if out is not None:  # a file region is being sent: wait behind it
                out.extend(pieces)
                self._out_bytes += data.total_length()
                self._update_reading()
                return
            if any(isinstance(p, FileRegion) for p in pieces):
                self._out = deque(pieces)
                self._out_bytes = data.total_length()
                self._pump()
                if self._out is None and not self._writing_paused:
                    self.channel.drained(now)
                self._update_reading()
                return
            transport.writelines(pieces)  # type: ignore[arg-type]  # no regions
        elif self._out is not None:
            self._out.append(data)
            self._out_bytes += len(data)
            self._update_reading()
            return
        else:
            transport.write(data)
        if not self._writing_paused:  # the socket took it all at once
            self.channel.drained(now)
        self._update_reading()

    # -- zero-copy sends (module docstring) ----------------------------------------------
    def _pump(self) -> None:
        """Send what waits in ``_out`` in order, as far as the socket takes it now: bytes
        through the transport, a file region with sendfile once the transport's buffer is
        empty. Returns when done (``_out`` None) or waiting (for ``resume_writing`` or for the
        socket to be writable).

        Not re-entrant: a transport may call ``pause_writing`` / ``resume_writing`` from inside
        ``write`` (the TLS transport does), and a nested pass would send the region at the
        head twice; the nested call only asks the running pass to look again."""
        if self._pumping:
            self._pump_again = True
            return
        self._pumping = True
        try:
            while True:
                self._pump_again = False
                self._pump_pass()
                if not self._pump_again or self._out is None:
                    return
        finally:
            self._pumping = False

    def _pump_pass(self) -> None:
        out = self._out
        transport = self.transport
        if out is None or transport is None or self.channel.closed or transport.is_closing():
            return
        while out:
            piece = out[0]
            if not isinstance(piece, FileRegion):
                batch = []
                n = 0
                while out and not isinstance(out[0], FileRegion):
                    p = out.popleft()
                    batch.append(p)
                    n += p.nbytes if isinstance(p, memoryview) else len(p)
                self._out_bytes -= n
                transport.writelines(batch)
                continue
            if self._writing_paused:
                return  # resume_writing calls again once the transport has written it all
            if transport.get_write_buffer_size():
                # The transport holds bytes without having paused us (cannot happen with the
                # write-buffer limits at 0): sendfile must not overtake them; wait for them.
                self._writing_paused = True
                return
            if not self._sendfile(piece):
                return  # waiting for the socket (or closed)
            out.popleft()
            piece.close()
        self._out = None
        self._out_bytes = 0

    def _sendfile(self, region: FileRegion) -> bool:
        """Send as much of ``region`` as the socket takes now; True once all of it is sent.
        Otherwise waits for the socket to be writable (or the connection was closed)."""
        fd = self._socket_fd()
        if fd is None:  # no descriptor to send on: cannot happen when zero_copy was True
            self._close_for(CloseConnection("no socket descriptor for sendfile"))
            return False
        while region.length > 0:
            try:
                sent = os.sendfile(fd, region.fd, region.position, region.length)
            except (BlockingIOError, InterruptedError):
                self._wait_writable(fd)
                return False
            except OSError as exc:  # the peer went away (EPIPE, ECONNRESET, ...)
                log.debug("sendfile to %s failed: %s", self.peer, exc)
                self.abort()
                return False
            if sent == 0:
                # The file ends before the region does (truncated meanwhile): the frame's
                # size is already on the wire, so the response cannot be completed.
                self._close_for(CloseConnection(
                    f"segment file shorter than the record set being sent "
                    f"({region.length} bytes missing at position {region.position})"))
                return False
            region.position += sent
            region.length -= sent
            self._out_bytes -= sent
            self.channel.last_active = time.monotonic()  # progress to a slow reader
        return True

    def _socket_fd(self) -> int | None:
        fd = self._sock_fd
        if fd is not None and fd < 0:
            sock = self.transport.get_extra_info("socket") if self.transport else None
            try:
                fd = os.dup(sock.fileno()) if sock is not None else None
            except (OSError, AttributeError, ValueError):
                fd = None
            self._sock_fd = fd
        return fd

    def _wait_writable(self, fd: int) -> None:
        if not self._waiting_writable:
            self._waiting_writable = True
            asyncio.get_running_loop().add_writer(fd, self._on_writable)

    def _on_writable(self) -> None:
        """The socket can take more (or the transport wrote everything): go on sending."""
        self._pump_scheduled = False
        fd = self._sock_fd
        if self._waiting_writable and fd is not None and fd >= 0:
            self._waiting_writable = False
            asyncio.get_running_loop().remove_writer(fd)
        self._pump()
        if self._out is None and not self.channel.closed:
            if not self._writing_paused:
                self.channel.drained(time.monotonic())
            self._update_reading()
            self._process()

    def _drop_out(self) -> None:
        """The connection is going: stop waiting for the socket, close the regions and the
        socket's duplicate descriptor (removed from the loop first: epoll would keep
        watching the socket through a closed duplicate)."""
        out, self._out = self._out, None
        self._out_bytes = 0
        if out:
            for piece in out:
                if isinstance(piece, FileRegion):
                    piece.close()
        fd = self._sock_fd
        if fd is not None and fd >= 0:
            if self._waiting_writable:
                self._waiting_writable = False
                try:
                    asyncio.get_running_loop().remove_writer(fd)
                except RuntimeError:  # no running loop (shutdown)
                    pass
            self._sock_fd = -1
            os.close(fd)

    # -- client quotas -------------------------------------------------------------------
    def _quota_throttle_ms(self, call: Call, result: Any, handler_s: float) -> int:
        """Record the request against its client's quotas; put the throttle time in the
        response (the larger of ours and any the handler set, e.g. a controller mutation
        quota's) and return it."""
        quotas = self._quotas
        ctx = call.ctx
        assert quotas is not None and ctx is not None
        throttle = quotas.throttle_time_ms(call.api_key, ctx.principal.name, ctx.client_id or "",
                                           len(call.event.frame), ctx.response_bytes, handler_s)
        current = getattr(result, "throttle_time_ms", None)
        if current is not None:
            if throttle > current:
                result.throttle_time_ms = throttle
            else:
                throttle = current
        return throttle

    def _throttle(self, throttle_ms: int) -> None:
        """Mute the channel (read nothing) for ``throttle_ms`` (KIP-219)."""
        if self.channel.closed:
            return
        loop = asyncio.get_running_loop()
        until = loop.time() + throttle_ms / 1000
        if until <= self._throttled_until:
            return
        self._throttled_until = until
        self.channel.throttled = True
        if self._throttle_timer is not None:
            self._throttle_timer.cancel()
        self._throttle_timer = loop.call_at(until, self._end_throttling)
        self._update_reading()

    def _end_throttling(self) -> None:
        self._throttle_timer = None
        self.channel.throttled = False
        self._update_reading()
        self._process()

    # -- response memory (what handlers use through their ConnectionHandle) --------------
    def reserve_response_bytes(self, wanted: int) -> int | None:
        """See ``KafkaChannel.reserve_response_bytes``."""
        return self.channel.reserve_response_bytes(wanted)

    def settle_response_bytes(self, reserved: int, actual: int) -> None:
        self.channel.settle_response_bytes(reserved, actual)

    async def wait_for_response_memory(self, timeout_s: float) -> bool:
        """Wait until some response memory is released broker-wide (True) or the timeout."""
        return await self._memory.wait_for_release(timeout_s)

    # -- flow control & closing ----------------------------------------------------------
    def _update_reading(self) -> None:
        transport = self.transport
        if transport is None or self.channel.closed:
            return
        was_paused = self.channel.reading_paused
        buffered = transport.get_write_buffer_size() if self._writing_paused else 0
        if self._out is not None:
            buffered += self._out_bytes  # waiting behind a file region being sent
        pause, waiting_for_memory = self.channel.read_decision(buffered)
        if waiting_for_memory:
            self._memory.notify_on_release(self, self._on_memory_released)
        if pause and not was_paused:
            transport.pause_reading()
        elif not pause and was_paused:
            transport.resume_reading()

    def _on_memory_released(self) -> None:
        self._update_reading()
        self._process()

    def _close_for(self, ev: CloseConnection) -> None:
        if ev.reason is None:
            self.close()
        elif ev.exc is not None:
            log.error("%s; closing connection from %s", ev.reason, self.peer, exc_info=ev.exc)
            self.close()
        else:
            self.close_with_error(ev.reason)

    def close_with_error(self, reason: str) -> None:
        log.warning("closing connection from %s: %s", self.peer, reason)
        self.close()

    def close(self) -> None:
        """Close the connection. Unsent response bytes are dropped (as Kafka drops a closing
        channel's sends): a graceful close would wait for a client that may never read them,
        holding their memory and this connection's slot forever."""
        self.channel.closed = True
        if self._transport_closed:
            return
        if self.write_buffer_size():
            self.abort()
            return
        self._transport_closed = True
        if self.transport is not None:
            self.transport.close()

    def abort(self) -> None:
        """Close now (RST), dropping unsent responses."""
        self.channel.closed = True
        self._transport_closed = True
        self._drop_out()
        if self.transport is not None:
            self.transport.abort()

    def write_buffer_size(self) -> int:
        """Response bytes not yet handed to the socket (the transport's buffer and what
        waits behind a file region)."""
        n = self.transport.get_write_buffer_size() if self.transport is not None else 0
        return n + self._out_bytes if self._out is not None else n

    def note_write_progress(self) -> None:
        """Count bytes drained to a slow reader since the last call as activity (the reaper
        calls this: a partially drained buffer gives no callback)."""
        self.channel.note_write_progress(self.write_buffer_size(), time.monotonic())

    def arrival_overdue(self, now: float) -> bool:
        return self.channel.arrival_overdue(now)

    def has_pending(self) -> bool:
        return self.channel.inflight > 0

    def __repr__(self) -> str:
        return f"ServerConnection({self.peer} on {self.listener.name})"

