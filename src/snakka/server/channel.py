"""The protocol state of one client connection, without sockets (Kafka's ``KafkaChannel``).

What it owns (a plain class: bytes in, events out, an injected clock; h11's shape):

- **Framing.** The byte stream is cut into size-prefixed request frames. A size below the
  smallest request header (8 bytes) or above ``socket.request.max.bytes`` is a protocol
  violation: :class:`CloseConnection`.
- **The request header's fixed part** (API key, API version, correlation id: the same 8 bytes in
  every header version) is read here for each frame; the rest of the header (client id, tagged
  fields) depends on the version and is decoded by dispatch once the version is known to be
  served (server/dispatch.py).
- **Request order.** Each :class:`RequestReceived` takes the next slot of this connection's
  response queue; handlers may finish out of order (a long-poll Fetch behind a quick Metadata)
  but :meth:`complete` releases responses strictly in request order, as Kafka does.
- **The in-flight bound** (``queued.max.requests``): no new request is read while that many
  are unanswered.
- **Response memory** (server/memory.py): the bytes this connection counts in the broker-wide
  ``queued.max.response.bytes`` budget (reservations of responses not yet written, plus written
  bytes the transport has not yet drained), and the decision to stop reading while more than
  ``queued.max.response.bytes.per.connection`` bytes wait for this client, or while the budget
  is spent and this client holds unsent bytes.
- **The arrival clock** (``socket.request.arrival.timeout.ms``): when the incomplete request now
  buffered started to arrive; a request that does not arrive in time is overdue (the listener's
  reaper closes the connection: slowloris).
- **Authentication** (server/authentication.py) and the **client information** an ApiVersions
  request reports (KIP-511): typed fields of the connection, read by dispatch.

What it does not own: the transport (server/connection.py writes the ``Send`` buffers and
turns :class:`CloseConnection` into a close plus a log line), handler lookup, decoding and
authorization (server/dispatch.py).

Time is passed in (``now``, seconds on a monotonic clock) so every rule is a fast unit test
(tests/server/test_channel.py). Single-threaded: the event loop's thread only.
"""

from __future__ import annotations

import struct
from collections import deque
from dataclasses import dataclass
from typing import Any, Final, Protocol

from snakka.protocol import ScatterBuffer, write_response
from snakka.security.principal import SecurityProtocol
from snakka.server.authentication import ChannelAuthentication

__all__ = [
    "CLOSE", "NEED_DATA", "NO_RESPONSE", "PAUSED", "ChannelLimits", "ClientInformation",
    "CloseConnection", "KafkaChannel", "RequestReceived", "ResponseBudget", "Send",
]

_SIZE = struct.Struct(">i")
_EMPTY = bytearray()
_FIXED_HEADER = struct.Struct(">hhi")  # request_api_key, request_api_version, correlation_id
# The smallest request: the fixed header above (8 bytes). Anything shorter is not a request.
MIN_REQUEST_BYTES: Final = _FIXED_HEADER.size


class _Marker:
    __slots__ = ("_name",)

    def __init__(self, name: str) -> None:
        self._name = name

    def __repr__(self) -> str:
        return self._name


# next_event results that are not events: nothing complete yet / reading is paused or closed.
NEED_DATA: Final = _Marker("NEED_DATA")
PAUSED: Final = _Marker("PAUSED")
# complete() results that are not responses: the request has no response (acks=0 produce, a
# cancelled handler) / close the connection once every earlier response is written.
NO_RESPONSE: Final = _Marker("NO_RESPONSE")
CLOSE: Final = _Marker("CLOSE")


@dataclass(frozen=True, slots=True)
class ChannelLimits:
    """The per-connection bounds (broker configs, Kafka's names)."""

    max_request_bytes: int             # socket.request.max.bytes
    max_inflight_requests: int         # queued.max.requests
    max_buffered_response_bytes: int   # queued.max.response.bytes.per.connection
    request_arrival_timeout_ms: int    # socket.request.arrival.timeout.ms

    def __post_init__(self) -> None:
        assert self.max_request_bytes >= MIN_REQUEST_BYTES, self
        assert self.max_inflight_requests >= 1, self
        assert self.max_buffered_response_bytes >= 1, self
        assert self.request_arrival_timeout_ms >= 1, self

    @classmethod
    def from_config(cls, config: Any) -> ChannelLimits:
        return cls(max_request_bytes=config.int("socket.request.max.bytes"),
                   max_inflight_requests=config.int("queued.max.requests"),
                   max_buffered_response_bytes=config.int(
                       "queued.max.response.bytes.per.connection"),
                   request_arrival_timeout_ms=config.int("socket.request.arrival.timeout.ms"))


class ResponseBudget(Protocol):
    """What the channel uses of the broker-wide response-memory pool (server/memory.py)."""

    @property
    def available(self) -> int: ...

    @property
    def exhausted(self) -> bool: ...

    def charge(self, n: int) -> None: ...

    def release(self, n: int) -> None: ...


@dataclass(frozen=True, slots=True)
class ClientInformation:
    """The client software an ApiVersions v3+ request named (Kafka's ClientInformation)."""

    software_name: str
    software_version: str


# -- events (plain slots classes: a frozen dataclass costs ~4x to build, once per request) -------
class RequestReceived:
    """One complete request frame (without its size prefix). The event is also the request's
    place in this connection's response order (the fields after ``frame`` are the channel's)."""

    __slots__ = ("request_id", "api_key", "api_version", "correlation_id", "frame", "result",
                 "reserved", "done")

    def __init__(self, request_id: int, api_key: int, api_version: int, correlation_id: int,
                 frame: bytearray) -> None:
        self.request_id = request_id  # its slot in this connection's response order
        self.api_key = api_key
        self.api_version = api_version
        self.correlation_id = correlation_id
        self.frame = frame
        self.result: Any = None
        self.reserved = 0
        self.done = False

    def __repr__(self) -> str:
        return (f"RequestReceived(request_id={self.request_id}, api_key={self.api_key}, "
                f"api_version={self.api_version}, correlation_id={self.correlation_id}, "
                f"{len(self.frame)} bytes)")


# A response frame to write, in the order complete() returns them: the transport writes its
# pieces (records read from disk stay separate chunks: writev, no copy).
Send = ScatterBuffer


@dataclass(slots=True)
class CloseConnection:
    """Close the connection. ``reason`` is for the log (None: already logged); ``exc`` is the
    exception behind it when it is a bug worth a traceback."""

    reason: str | None
    exc: BaseException | None = None


class KafkaChannel:
    """The sans-I/O state of one connection. See the module docstring."""

    def __init__(self, limits: ChannelLimits, budget: ResponseBudget, *, now: float,
                 listener_name: str = "PLAINTEXT",
                 security_protocol: SecurityProtocol = SecurityProtocol.PLAINTEXT) -> None:
        self.limits = limits
        self._budget = budget
        self.listener_name = listener_name
        self.security_protocol = security_protocol
        self.auth = ChannelAuthentication(security_protocol)
        self.client_information: ClientInformation | None = None
        self._buf = bytearray()
        self._slots: deque[RequestReceived] = deque()
        self._next_request_id = 0
        # Bytes counted in the response budget: reservations of responses not yet written plus
        # _in_transport (handed to the transport, not yet drained to the socket).
        self.held = 0
        self._in_transport = 0
        # When the incomplete request now in _buf started to arrive (None: no partial request).
        self.request_started: float | None = None
        self.last_active = now
        self._last_buffered = 0  # write-buffer size seen by the last note_write_progress
        self.reading_paused = False
        # Muted by a client quota (KIP-219: the response is sent, then nothing is read from
        # the client until its throttle time has passed; the connection shell times it).
        self.throttled = False
        self.closed = False

    # -- input ---------------------------------------------------------------------------
    def receive_data(self, data: bytes, now: float) -> None:
        """Bytes from the client (buffered; :meth:`next_event` cuts them into requests)."""
        if self.closed:
            return
        self.last_active = now
        if self._buf:
            self._buf += data
        else:
            self._buf = bytearray(data)

    def next_event(self, now: float) -> RequestReceived | CloseConnection | _Marker:
        """The next complete request, ``NEED_DATA``, ``PAUSED`` (not reading now: closed, or a
        bound holds) or :class:`CloseConnection` (a frame size no request can have)."""
        if self.closed or self.reading_paused or (
                len(self._slots) >= self.limits.max_inflight_requests):
            # Whatever waits in the buffer is our delay, not the client's.
            self.request_started = None
            return PAUSED
        buf = self._buf
        n = len(buf)
        if n >= 4:
            size = _SIZE.unpack_from(buf, 0)[0]
            if size < MIN_REQUEST_BYTES or size > self.limits.max_request_bytes:
                self.closed = True
                return CloseConnection(f"invalid request size {size} "
                                       f"(socket.request.max.bytes="
                                       f"{self.limits.max_request_bytes})")
            end = 4 + size
            if n >= end:
                if n == end:
                    frame = buf
                    frame[:4] = b""  # drop the size prefix in place
                    self._buf = bytearray()
                else:
                    frame = buf[4:end]
                    del buf[:end]
                self.request_started = None
                api_key, api_version, correlation_id = _FIXED_HEADER.unpack_from(frame, 0)
                ev = RequestReceived(self._next_request_id, api_key, api_version,
                                     correlation_id, frame)
                self._next_request_id += 1
                self._slots.append(ev)
                return ev
        if not buf:
            self.request_started = None
        elif self.request_started is None:
            self.request_started = now
        return NEED_DATA

    def arrival_overdue(self, now: float) -> bool:
        """A request started to arrive more than socket.request.arrival.timeout.ms ago and is
        still incomplete (while we read: a paused connection's buffer is not the client's
        fault)."""
        started = self.request_started
        return started is not None and (
            now - started > self.limits.request_arrival_timeout_ms / 1000)

    @property
    def buffered_request_bytes(self) -> int:
        return len(self._buf)

    # -- responses -----------------------------------------------------------------------
    @property
    def inflight(self) -> int:
        """Requests read and not yet answered (or answered behind an unanswered one)."""
        return len(self._slots)

    def complete(self, request: RequestReceived, result: Any, reserved: int = 0,
                 api_version: int | None = None,
                 now: float = 0.0) -> list[Send | CloseConnection]:
        """``request`` (an event of this channel) is done: ``result`` is its response object,
        ``NO_RESPONSE`` or ``CLOSE``. ``reserved`` is what its handler reserved in the response
        budget (turned into the charge of the whole frame); ``api_version`` overrides the
        version the response is encoded at (KIP-511: an unknown ApiVersions version is
        answered at v0).

        Returns what may go out now, in request order: the responses of this and of every
        later request already completed, up to the first still unanswered (a
        :class:`CloseConnection` ends the list)."""
        out: list[Send | CloseConnection] = []
        if self.closed:
            return out  # nothing is written or counted once closed
        assert not request.done, f"request {request.request_id} completed twice"
        slots = self._slots
        assert (slots and slots[0] is request) or request in slots, \
            f"request {request.request_id} is not in flight here"
        request.done = True
        request.result = result
        request.reserved = reserved
        if api_version is not None:
            request.api_version = api_version
        while slots and slots[0].done and not self.closed:
            head = slots.popleft()
            if head.result is NO_RESPONSE:
                if head.reserved:
                    self.settle_response_bytes(head.reserved, 0)
                continue
            if head.result is CLOSE:
                self.closed = True
                out.append(CloseConnection(None))
                break
            head.frame = _EMPTY  # the request's bytes are no longer needed
            # One buffer per response. Large record sets (Fetch) are not copied into it: they
            # go to the socket as separate chunks (writev), straight from the bytes read from
            # disk.
            data = ScatterBuffer()
            try:
                write_response(data, head.correlation_id, head.api_key, head.api_version,
                               head.result)
            except Exception as exc:  # a response its version cannot carry: a handler bug
                self.closed = True
                out.append(CloseConnection(f"cannot encode response to API key {head.api_key} "
                                           f"v{head.api_version}", exc))
                break
            head.result = None
            size = data.total_length()
            self.held += size - head.reserved
            self._budget.charge(size - head.reserved)
            self._in_transport += size
            out.append(data)
        if out:
            self.last_active = now
        return out

    # -- response memory -----------------------------------------------------------------
    def reserve_response_bytes(self, wanted: int) -> int | None:
        """Reserve up to ``wanted`` bytes of the response budget before reading from disk.

        Returns what the response may hold: ``wanted`` when the budget has room, what is left
        when it has less, 0 when it is spent but this connection holds nothing (the caller still
        returns the first whole batch, KIP-74); None when it is spent and this connection holds
        unsent bytes (wait for memory to be released, or answer without data). The reservation
        is settled with :meth:`settle_response_bytes` once the size is known.
        """
        assert wanted >= 0, wanted
        if self.closed:
            return wanted  # nothing will be written; nothing is counted
        avail = self._budget.available
        if avail >= wanted:
            grant = wanted
        elif avail > 0:
            grant = avail
        elif self.held == 0:
            grant = 0
        else:
            return None
        self._budget.charge(grant)
        self.held += grant
        return grant

    def settle_response_bytes(self, reserved: int, actual: int) -> None:
        """Turn a reservation into the bytes really read (0 gives it back)."""
        if self.closed:
            return
        self.held += actual - reserved
        assert self.held >= 0, (self.held, reserved, actual)
        self._budget.charge(actual - reserved)

    def drained(self, now: float) -> None:
        """The transport wrote everything handed to it: release those bytes' charge."""
        self.last_active = now
        n, self._in_transport = self._in_transport, 0
        if n:
            self.held -= n
            assert self.held >= 0, (self.held, n)
            self._budget.release(n)

    def note_write_progress(self, write_buffer_size: int, now: float) -> None:
        """Bytes drained to a slow reader since the last call count as activity (a partially
        drained buffer gives no other signal)."""
        if write_buffer_size < self._last_buffered:
            self.last_active = now
        self._last_buffered = write_buffer_size

    # -- flow control --------------------------------------------------------------------
    def read_decision(self, write_buffer_size: int) -> tuple[bool, bool]:
        """Whether to read from the client now: returns ``(pause, waiting_for_memory)``.

        Reading pauses while a client quota throttles the connection (``throttled``), at
        ``queued.max.requests`` unanswered requests, while more than
        ``queued.max.response.bytes.per.connection`` response bytes wait in the transport
        (``write_buffer_size``), and while the response budget is spent and this connection
        holds unsent bytes (``waiting_for_memory``: resume when bytes are released). The
        decision is remembered: :meth:`next_event` reads nothing while paused."""
        waiting = False
        pause = self.throttled or len(self._slots) >= self.limits.max_inflight_requests
        if not pause and write_buffer_size > self.limits.max_buffered_response_bytes:
            pause = True
        if not pause and self.held > 0 and self._budget.exhausted:
            # The budget is spent and this client has not taken what it holds: read nothing
            # more from it until it does or the budget frees up.
            pause = waiting = True
        self.reading_paused = pause
        return pause, waiting

    def close(self) -> int:
        """The connection is closed: give back everything it holds in the response budget
        (returned), forget unanswered requests and buffered bytes."""
        self.closed = True
        held, self.held, self._in_transport = self.held, 0, 0
        if held:
            self._budget.release(held)
        self._slots.clear()
        self._buf = bytearray()
        self.request_started = None
        return held
