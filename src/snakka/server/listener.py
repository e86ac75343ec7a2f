"""Listeners: bind sockets for each configured listener and accept connections.

A listener ``PLAINTEXT://localhost:9092`` binds *every* address ``localhost`` resolves to
(127.0.0.1 and ::1): librdkafka resolves ``localhost`` to ::1 first, Python clients usually to
127.0.0.1, and both must reach the same broker. With port 0 the first bind picks an ephemeral port
and the other addresses bind that same port, so one advertised ``host:port`` serves both
families. An empty host binds all interfaces (0.0.0.0 and ::).

An SSL or SASL_SSL listener runs each connection's TLS handshake before the connection exists
(``_accept_loop``), bounded by ``snakka.ssl.handshake.timeout.ms``; a failed handshake closes that
socket with one INFO line naming the peer and OpenSSL's reason, and nothing else.

Connection creation rates (server/quotas.py, docs/quotas.md): when ``max.connection.creation.
rate`` (or ``listener.name.<l>.``) limits a listener, it accepts sockets itself (``_accept_loop``,
as an SSL listener does) so that it can *wait* before accepting more, as Kafka's acceptor does:
new clients queue in the listen backlog meanwhile. A connection over its address's
``connection_creation_rate`` is held unread for the throttle time and then closed
(``hold_throttled``); held sockets are closed when the listener stops.

Also owns the connection reaper (``idle_sweeper``): idle connections (``connections.max.idle.ms``)
and requests that do not arrive in time (``socket.request.arrival.timeout.ms``).

Collaborators are given explicitly (the connection registry, the response-memory pool, the
channel limits, the dispatcher): nothing here reaches the broker.
"""

from __future__ import annotations

import asyncio
import errno
import logging
import socket
import ssl
import time
from collections.abc import Iterable

from snakka.config import Listener
from snakka.security.principal import SecurityProtocol
from snakka.security.ssl import ListenerTls
from snakka.server.channel import ChannelLimits
from snakka.server.connection import ServerConnection
from snakka.server.dispatch import RequestDispatcher
from snakka.server.memory import ResponseMemoryPool
from snakka.server.quotas import normalize_ip
from snakka.server.registry import ConnectionRegistry
from snakka.util.waiters import cancel_and_wait

log = logging.getLogger("snakka.server")

# How many times an ephemeral port is re-picked when the other address family has it taken.
_EPHEMERAL_BIND_ATTEMPTS = 20
# Wait after a failed accept() on an SSL listener (EMFILE...) before the next one.
_ACCEPT_RETRY_S = 0.1
# At most one warning this often about connections refused while handshakes fill max.connections.
_REFUSAL_LOG_INTERVAL_S = 10.0


def _addresses(host: str) -> list[tuple[int, str]]:
    if host == "":
        fams: list[tuple[int, str]] = [(socket.AF_INET, "0.0.0.0")]
        if socket.has_ipv6:
            fams.append((socket.AF_INET6, "::"))
        return fams
    if host == "localhost":
        # Both loopbacks, whatever /etc/hosts says: librdkafka tries ::1 first, most Python
        # clients 127.0.0.1, and both must reach this listener.
        fams = [(int(socket.AF_INET), "127.0.0.1")]
        if socket.has_ipv6:
            fams.append((socket.AF_INET6, "::1"))
        return fams
    seen: list[tuple[int, str]] = []
    for fam, _t, _p, _c, sa in socket.getaddrinfo(host, None, type=socket.SOCK_STREAM):
        if fam not in (socket.AF_INET, socket.AF_INET6):
            continue
        item = (int(fam), str(sa[0]))
        if item not in seen:
            seen.append(item)
    return seen


def _bind(fam: int, addr: str, port: int, backlog: int) -> socket.socket:
    s = socket.socket(fam, socket.SOCK_STREAM)
    try:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if fam == socket.AF_INET6:
            s.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
        s.bind((addr, port))
        s.listen(backlog)
        s.setblocking(False)
        return s
    except BaseException:
        s.close()
        raise


def bind_listener(listener: Listener, backlog: int) -> tuple[list[socket.socket], int]:
    """Bind all addresses of a listener on one port, each listening with ``backlog``
    (``socket.listen.backlog.size``); returns (sockets, port)."""
    addrs = _addresses(listener.host)
    if not addrs:
        raise OSError(f"listener {listener}: host resolves to no address")
    for _ in range(_EPHEMERAL_BIND_ATTEMPTS):
        socks: list[socket.socket] = []
        port = listener.port
        try:
            for fam, addr in addrs:
                try:
                    s = _bind(fam, addr, port, backlog)
                except OSError as e:
                    # An address family this host cannot bind (no IPv6 on loopback, say) is
                    # skipped as long as another one works.
                    if e.errno in (errno.EADDRNOTAVAIL, errno.EAFNOSUPPORT) and (socks or len(addrs) > 1):
                        log.warning("listener %s: cannot bind %s (%s); skipping it", listener, addr, e)
                        continue
                    # Say which address:port could not be bound (the bare OSError does not).
                    where = f"[{addr}]:{port}" if fam == socket.AF_INET6 else f"{addr}:{port}"
                    raise OSError(e.errno, f"listener {listener}: cannot bind {where}: "
                                           f"{e.strerror or e}") from None
                socks.append(s)
                port = s.getsockname()[1]
            if not socks:
                raise OSError(f"listener {listener}: no address could be bound")
            return socks, port
        except OSError as e:
            for s in socks:
                s.close()
            if listener.port == 0 and e.errno == errno.EADDRINUSE:
                continue  # the ephemeral port was free for one family only; pick another
            raise
    raise OSError(f"listener {listener}: could not find an ephemeral port free on all addresses")


class ListenerServer:
    """The asyncio servers for one listener."""

    def __init__(self, listener: Listener, *, registry: ConnectionRegistry,
                 memory: ResponseMemoryPool, limits: ChannelLimits,
                 dispatcher: RequestDispatcher,
                 security_protocol: SecurityProtocol = SecurityProtocol.PLAINTEXT,
                 tls: ListenerTls | None = None, backlog: int) -> None:
        self.listener = listener
        self.backlog = backlog  # socket.listen.backlog.size
        # SSL / SASL_SSL: the listener's TLS context (security/ssl.py); each connection runs
        # its own bounded handshake (server/connection.py). Replaced at run time by a dynamic
        # SSL config change (security/ssl_reload.py); read at each accept.
        self.tls = tls
        self.servers: list[asyncio.base_events.Server] = []
        self.port = listener.port
        self._registry = registry
        self._memory = memory
        self._limits = limits
        self._dispatcher = dispatcher
        self._security_protocol = security_protocol
        self._own_sockets: list[socket.socket] = []  # sockets _accept_loop accepts on
        self._tasks: set[asyncio.Future] = set()  # accept loops and running handshakes
        # A plain listener's sockets and, per socket, either the asyncio server that accepts
        # on a duplicate of it (unpaced) or the accept loop that paces it (see
        # update_pacing): a dynamic max.connection.creation.rate switches between the two
        # without closing the listening socket, so its backlog is kept.
        self._plain_sockets: list[socket.socket] = []
        self._plain_servers: dict[socket.socket, asyncio.base_events.Server] = {}
        self._plain_loops: dict[socket.socket, asyncio.Task] = {}
        self._accepting: set[socket.socket] = set()  # loops waiting in sock_accept
        self._pacing_lock = asyncio.Lock()
        self._handshakes = 0  # TLS handshakes in progress (they count as connections)
        self._handshake_refusals = 0
        self._refusal_log_at = 0.0
        # The accept loops of this listener's sockets (IPv4 and IPv6) wait in turn: one
        # acceptor per listener, as Kafka's, so one connection-rate wait holds both.
        self._accept_gate = asyncio.Lock()
        # Connections over their address's connection_creation_rate, held unread until their
        # throttle time ends: what is closed then (a socket or a transport) -> its timer.
        self._held: dict[socket.socket | asyncio.BaseTransport, asyncio.TimerHandle] = {}

    def _connection(self, bound: Listener, *, ip_checked: bool = False) -> ServerConnection:
        return ServerConnection(bound, registry=self._registry, memory=self._memory,
                                limits=self._limits, dispatcher=self._dispatcher,
                                security_protocol=self._security_protocol, tls=self.tls,
                                ip_checked=ip_checked, hold_throttled=self.hold_throttled)

    def hold_throttled(self, closeable: socket.socket | asyncio.BaseTransport,
                       throttle_ms: int) -> None:
        """Close a connection refused by its address's connection_creation_rate once its
        throttle time is over (Kafka's acceptor closes such sockets then, so a client that
        reconnects at once is slowed down too); nothing is read from it meanwhile."""
        loop = asyncio.get_running_loop()
        self._held[closeable] = loop.call_later(throttle_ms / 1000, self._close_held, closeable)

    def _close_held(self, closeable: socket.socket | asyncio.BaseTransport) -> None:
        timer = self._held.pop(closeable, None)
        if timer is not None:
            timer.cancel()
        closeable.close()

    async def start(self) -> None:
        socks, self.port = bind_listener(self.listener, self.backlog)
        bound = self.listener.__class__(self.listener.name, self.listener.host, self.port)
        self.listener = bound
        if self.tls is not None:
            for s in socks:
                self._own_sockets.append(s)
                self._tasks.add(asyncio.ensure_future(self._accept_loop(s, bound)))
        else:
            self._plain_sockets = socks
            await self._apply_pacing()
        log.info("listening on %s (%s)%s", bound,
                 ", ".join(f"{s.getsockname()[0]}" for s in socks),
                 f" with {self._security_protocol.name}" if self.tls is not None else "")

    def update_pacing(self) -> None:
        """A connection creation rate changed at run time (``max.connection.creation.rate``):
        a plain listener that must now pace its accepts takes them over from its asyncio
        server, and hands them back when no limit is left. An SSL listener always accepts
        itself and reads the limits at each accept."""
        if self._plain_sockets:
            task = asyncio.ensure_future(self._apply_pacing())
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def _apply_pacing(self) -> None:
        async with self._pacing_lock:
            if not self._plain_sockets:
                return  # stopped
            bound = self.listener
            paced = self._registry.quotas.rate_limited(bound.name)
            loop = asyncio.get_running_loop()
            for s in self._plain_sockets:
                if paced and s not in self._plain_loops:
                    srv = self._plain_servers.pop(s, None)
                    if srv is not None:
                        # Closes the server's duplicate only: the listening socket and the
                        # connections waiting in its backlog stay for the accept loop.
                        srv.close()
                        self.servers.remove(srv)
                    self._plain_loops[s] = asyncio.ensure_future(self._accept_loop(s, bound))
                elif not paced and s not in self._plain_servers:
                    task = self._plain_loops.pop(s, None)
                    if task is not None:
                        await self._end_accept_loop(s, task)
                    # The backlog again: create_server listen()s on the socket once more,
                    # with its own default of 100 when none is given. That default silently
                    # replaced the configured one, and serial connects outran the accepts by
                    # 100 within milliseconds: the kernel dropped SYNs, each costing its
                    # client a 1 s retransmission (5,000 connections took 19-23 s; now
                    # 0.2 s). The server gets a duplicate of the socket, so closing it (a
                    # limit set later) leaves the listening socket open.
                    srv = await loop.create_server(lambda: self._connection(bound),
                                                   sock=s.dup(), backlog=self.backlog)
                    self._plain_servers[s] = srv
                    self.servers.append(srv)

    async def _end_accept_loop(self, sock: socket.socket, task: asyncio.Task) -> None:
        """Stop a plain socket's accept loop between connections: cancelled while it waits in
        ``sock_accept`` (nothing accepted yet), otherwise it finishes handing over the
        connection it holds (after its pacing wait) and stops at the top of its loop. A
        connection whose accept completes in the very step of the cancellation is lost (its
        client sees a reset and reconnects): a change of the limit is rare, the race rarer."""
        if sock in self._accepting:
            task.cancel()
        try:
            await task
        except asyncio.CancelledError:
            if not task.cancelled():
                raise
        except Exception:  # noqa: BLE001 - the loop logs its own failures
            log.exception("listener %s: accept loop failed", self.listener)

    async def stop(self) -> None:
        # Stop accepting; the broker closes the open connections itself (wait_closed would wait
        # for them on Python >= 3.12). Handshakes still running are cancelled (their sockets
        # closed).
        for srv in self.servers:
            srv.close()
        self.servers.clear()
        tasks, self._tasks = self._tasks, set()
        await cancel_and_wait(tasks)
        plain_loops = list(self._plain_loops.values())
        self._plain_loops.clear()
        await cancel_and_wait(plain_loops)
        self._plain_servers.clear()
        for s in self._own_sockets + self._plain_sockets:
            s.close()
        self._own_sockets.clear()
        self._plain_sockets = []
        for closeable in list(self._held):
            self._close_held(closeable)

    # -- accepting sockets ourselves ------------------------------------------------------
    # An SSL listener accepts sockets itself and hands each to connect_accepted_socket with
    # the listener's context: the handshake completes (or fails, or times out after
    # snakka.ssl.handshake.timeout.ms) before the connection exists, and a failure is logged
    # here with its reason. asyncio's own TLS server logs nothing for a failed handshake, and
    # upgrading a plain connection with start_tls races the client's first bytes on uvloop.
    # A plain listener with a connection creation rate accepts itself too, to wait.
    async def _accept_loop(self, sock: socket.socket, bound: Listener) -> None:
        loop = asyncio.get_running_loop()
        quotas = self._registry.quotas
        plain = self.tls is None
        while True:
            if plain and self._plain_loops.get(sock) is not asyncio.current_task():
                return  # the limit was lifted: the asyncio server accepts again
            self._accepting.add(sock)
            try:
                client, addr = await loop.sock_accept(sock)
            except asyncio.CancelledError:
                raise
            except OSError as e:
                # EMFILE and friends: the connection stays in the backlog; try again shortly
                # rather than spinning (the fd headroom check at start makes this rare).
                log.warning("listener %s: accept failed (%s); retrying in %.0f ms", bound, e,
                            _ACCEPT_RETRY_S * 1000)
                await asyncio.sleep(_ACCEPT_RETRY_S)
                continue
            finally:
                self._accepting.discard(sock)
            # Read at each accept: max.connection.creation.rate may change at run time.
            if quotas.rate_limited(bound.name):
                # Kafka's acceptor waits the broker/listener throttle time before going on
                # (ConnectionQuotas.waitForConnectionSlot); the gate makes this listener's
                # other socket wait too.
                try:
                    async with self._accept_gate:
                        delay_ms = quotas.record_accept(bound.name)
                        if delay_ms > 0:
                            await asyncio.sleep(delay_ms / 1000)
                except asyncio.CancelledError:
                    client.close()
                    raise
            # The address's connection_creation_rate, before the TLS handshake (Kafka checks
            # it in the acceptor too).
            throttle_ms = quotas.ip_throttle_ms(bound.name, normalize_ip(str(addr[0])))
            if throttle_ms > 0:
                self.hold_throttled(client, throttle_ms)
                continue
            if self.tls is None:
                try:
                    client.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                    await loop.connect_accepted_socket(
                        lambda: self._connection(bound, ip_checked=True), client)
                except asyncio.CancelledError:
                    client.close()
                    raise
                except OSError as e:  # the client went away already
                    log.debug("listener %s: accepted connection lost at once: %s", bound, e)
                    client.close()
                continue
            # A connection counts against max.connections from its accept, as in Kafka (its
            # Acceptor counts before the processor runs the handshake): sockets that never
            # finish a handshake would otherwise hold descriptors beyond the bound until
            # snakka.ssl.handshake.timeout.ms closes them.
            quotas = self._registry.quotas
            if quotas.total + self._handshakes >= quotas.max_connections \
                    or quotas.listener_full(bound.name, self._handshakes):
                client.close()
                self._handshake_refusals += 1
                now = time.monotonic()
                if now >= self._refusal_log_at:
                    self._refusal_log_at = now + _REFUSAL_LOG_INTERVAL_S
                    limit = (f"max.connections={quotas.max_connections}"
                             if quotas.total + self._handshakes >= quotas.max_connections else
                             f"listener.name.{bound.name.lower()}.max.connections="
                             f"{quotas.listener_max.get(bound.name)}")
                    log.warning("listener %s: %s reached with TLS handshakes in progress; "
                                "refused %d connection(s) so far", bound, limit,
                                self._handshake_refusals)
                continue
            # ``self.tls`` at each accept: a dynamic reload (security/ssl_reload.py) replaces
            # it, and only handshakes that start afterwards see the new certificate.
            tls = self.tls
            assert tls is not None
            self._handshakes += 1
            task = asyncio.ensure_future(self._tls_handshake(client, bound, tls))
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def _tls_handshake(self, client: socket.socket, bound: Listener,
                             tls: ListenerTls) -> None:
        try:  # counted by the accept loop when it started this task
            await self._handshake(client, bound, tls)
        finally:
            self._handshakes -= 1

    async def _handshake(self, client: socket.socket, bound: Listener, tls: ListenerTls) -> None:
        loop = asyncio.get_running_loop()
        try:
            peer = _peer(client.getpeername())
        except OSError:
            client.close()  # already gone
            return
        try:
            client.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            await loop.connect_accepted_socket(
                lambda: self._connection(bound, ip_checked=True), client, ssl=tls.context,
                ssl_handshake_timeout=tls.handshake_timeout_s)
        except asyncio.CancelledError:
            client.close()
            raise
        except Exception as e:  # noqa: BLE001 - any failure closes this connection only
            # Kafka logs a failed SSL handshake at INFO ("Failed authentication with /ip (SSL
            # handshake failed)"): the client's mistake, not the broker's.
            log.info("Failed authentication with %s on listener %s (SSL handshake failed: %s)",
                     peer, bound.name, _handshake_failure(e, tls))
            client.close()


def _peer(addr: object) -> str:
    if isinstance(addr, tuple) and len(addr) >= 2:
        return f"{addr[0]}:{addr[1]}"
    return str(addr)


def _handshake_failure(e: BaseException, tls: ListenerTls) -> str:
    """One line for a failed handshake: OpenSSL's reason (WRONG_VERSION_NUMBER for plaintext
    on the SSL port, CERTIFICATE_VERIFY_FAILED, ...) or the timeout that closed it."""
    if isinstance(e, TimeoutError) or (isinstance(e, ConnectionAbortedError)
                                        and "longer than" in str(e)):
        return (f"not completed within snakka.ssl.handshake.timeout.ms="
                f"{round(tls.handshake_timeout_s * 1000)}")
    if isinstance(e, ssl.SSLError):
        return f"{e.reason or e}" + (f": {e.verify_message}" if isinstance(
            e, ssl.SSLCertVerificationError) and e.verify_message else "")
    return str(e) or type(e).__name__


def _reap_period_s(idle_ms: int, arrival_ms: int) -> float:
    bounds = [arrival_ms] + ([idle_ms] if idle_ms > 0 else [])
    return max(0.05, min(min(bounds) / 1000 / 2, 30.0))


async def idle_sweeper(registry: ConnectionRegistry, idle_ms: int, arrival_ms: int) -> None:
    """Close connections that hold resources without progress, one log line per kind and sweep:

    - a request started but not complete after ``socket.request.arrival.timeout.ms``
      (slowloris: a length prefix, then a byte now and then; partial bytes never count as
      activity, so ``connections.max.idle.ms`` alone would never close them);
    - nothing read and nothing drained to the client for ``connections.max.idle.ms`` (a
      client that stopped reading its responses is aborted: a graceful close would wait for it
      forever, holding the responses' memory).
    """
    period = _reap_period_s(idle_ms, arrival_ms)
    while True:
        await asyncio.sleep(period)
        reap_connections(registry.connections, idle_ms, arrival_ms)


def reap_connections(connections: Iterable[ServerConnection], idle_ms: int,
                     arrival_ms: int) -> int:
    """One sweep of idle_sweeper; returns how many connections it closed. The arrival bound
    is each channel's own (``ChannelLimits.request_arrival_timeout_ms``, the same config);
    ``arrival_ms`` names it in the log line."""
    now = time.monotonic()
    idle_cutoff = now - idle_ms / 1000
    slow: list[ServerConnection] = []
    idle: list[ServerConnection] = []
    for conn in list(connections):
        if conn.closed:
            continue
        if conn.arrival_overdue(now):
            slow.append(conn)
            conn.abort()
            continue
        if idle_ms > 0:
            conn.note_write_progress()
            if conn.last_active < idle_cutoff and not conn.has_pending():
                idle.append(conn)
                conn.close()  # aborts when unsent bytes wait for a client that stopped reading
    if slow:
        log.warning("closed %d connection(s) whose request did not arrive completely within "
                    "socket.request.arrival.timeout.ms=%d: %s", len(slow), arrival_ms,
                    _some_peers(slow))
    if idle:
        log.info("closed %d idle connection(s) (connections.max.idle.ms=%d): %s", len(idle),
                 idle_ms, _some_peers(idle))
    return len(slow) + len(idle)


def _some_peers(conns: list[ServerConnection], n: int = 5) -> str:
    peers = ", ".join(c.peer for c in conns[:n])
    return peers + (f" and {len(conns) - n} more" if len(conns) > n else "")
