"""The broker-wide budget for response bytes waiting for slow readers (``queued.max.response.bytes``).

What it owns: one counter of response bytes that are in memory on their way to a client, and the
futures of Fetch requests waiting for room in it. Kafka bounds the request side with
``queued.max.request.bytes``; a Fetch response in Kafka costs no heap while it waits (it is a
file region sent with ``transferTo``). Here a Fetch reads its records from disk into memory, and
without a bound 40 clients that send one large Fetch each and never read pin 40 responses
(reported: 2.2 GB RSS). So every response is counted here from the moment its bytes exist until the
connection's transport has written them to the socket.

The protocol, per connection (server/channel.py does the accounting):

- A Fetch *reserves* before it reads from disk (``KafkaChannel.reserve_response_bytes``): what
  it asks for if the budget has room, else what is left (KIP-74: the response still carries the
  first whole batch, so it may overshoot by at most one batch), and when the budget is spent it
  gets only the first batch if its connection holds nothing else, or waits (up to its
  ``max_wait_ms``, then answers without records) until bytes are released.
- Every written response is *charged* (what a Fetch reserved is converted, other responses are
  charged as they are written: they are small and never wait).
- A connection's charge is *released* when its transport's write buffer is empty again
  (``resume_writing`` with a low-water mark of 0) or when it closes.
- A connection that holds bytes while the budget is spent stops being read, so a client that never
  reads cannot queue more responses; one that reads gets its bytes released and is served.

So the memory held by responses is at most the budget plus, per connection, one response that
was admitted as "first batch only" or as a small non-Fetch response. Single event loop: no locks.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable


class ResponseMemoryPool:
    """Counts response bytes in memory broker-wide against ``limit``."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.used = 0
        self._waiters: list[asyncio.Future] = []
        # Callbacks of connections that paused reading because the budget was spent.
        self._on_release: dict[object, Callable[[], None]] = {}

    @property
    def available(self) -> int:
        return self.limit - self.used

    @property
    def exhausted(self) -> bool:
        return self.used >= self.limit

    def charge(self, n: int) -> None:
        """Count ``n`` bytes (negative: give back part of a reservation)."""
        self.used += n
        if n < 0:
            self._wake()

    def release(self, n: int) -> None:
        if n <= 0:
            return
        self.used -= n
        self._wake()

    def notify_on_release(self, key: object, callback: Callable[[], None] | None) -> None:
        """Call ``callback`` once bytes are released (a paused connection re-checks); None
        removes it."""
        if callback is None:
            self._on_release.pop(key, None)
        else:
            self._on_release[key] = callback

    async def wait_for_release(self, timeout_s: float) -> bool:
        """Wait until some bytes are released, or the timeout; True if woken."""
        fut = asyncio.get_running_loop().create_future()
        self._waiters.append(fut)
        try:
            await asyncio.wait_for(fut, timeout_s)
            return True
        except TimeoutError:
            return False
        finally:
            if not fut.done():
                fut.cancel()
            try:
                self._waiters.remove(fut)
            except ValueError:
                pass

    def _wake(self) -> None:
        if self._waiters:
            waiters, self._waiters = self._waiters, []
            for f in waiters:
                if not f.done():
                    f.set_result(None)
        if self._on_release and not self.exhausted:
            callbacks = list(self._on_release.values())
            self._on_release.clear()
            for cb in callbacks:
                cb()
