"""Incremental fetch sessions (KIP-227): the session cache, sans-I/O with an injected clock.

A consumer that fetches the same partitions over and over may open a session: the first (full)
fetch lists every partition, later (incremental) fetches list only partitions whose fetch position
changed, and the response lists only partitions with something new (records, a changed high
watermark / last stable offset / log start offset, or an error).

Session protocol, by (session_id, epoch) in the request:
- (0, -1): sessionless full fetch.
- (id, -1): close session ``id``, then a sessionless full fetch.
- (0 or id, 0): full fetch opening a new session (closing ``id`` if given). If no slot is free,
  the fetch is served sessionless and the response carries session id 0.
- (id, n>0): incremental fetch of session ``id``; ``n`` must equal the session's next epoch,
  else INVALID_FETCH_SESSION_EPOCH; unknown ``id`` gives FETCH_SESSION_ID_NOT_FOUND.

Bound: ``max.incremental.fetch.session.cache.slots`` sessions. When full, the least recently used
session idle for longer than EVICTION_MS makes room; otherwise no session is created.

The cache stores, per session and partition, the client's fetch position and the last
high watermark / LSO / log start offset it was told, so it can decide what changed.
"""

from __future__ import annotations

import random
from collections import OrderedDict
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from snakka.limits import INT32_MAX, MIN_INCREMENTAL_FETCH_SESSION_EVICTION_MS
from snakka.protocol.errors import ErrorCode

# Kafka's min.incremental.fetch.session.eviction.ms default (see snakka.limits).
EVICTION_MS = MIN_INCREMENTAL_FETCH_SESSION_EVICTION_MS

# A partition is identified by (topic key, partition) where the topic key is the topic name
# (Fetch < v13) or the topic id (v13+); the handler decides which.
PartitionKey = tuple[object, int]


@dataclass(slots=True)
class CachedPartition:
    fetch_offset: int
    max_bytes: int
    current_leader_epoch: int = -1
    log_start_offset: int = -1
    # What the client was last told (-2: never told anything).
    high_watermark: int = -2
    last_stable_offset: int = -2
    sent_log_start_offset: int = -2

    def needs_response(self, hw: int, lso: int, lso_start: int) -> bool:
        return (hw != self.high_watermark or lso != self.last_stable_offset
                or lso_start != self.sent_log_start_offset)

    def record_sent(self, hw: int, lso: int, log_start: int) -> None:
        self.high_watermark = hw
        self.last_stable_offset = lso
        self.sent_log_start_offset = log_start


class FetchSession:
    __slots__ = ("session_id", "epoch", "partitions", "last_used_ms", "topic_names")

    def __init__(self, session_id: int, now_ms: int) -> None:
        self.session_id = session_id
        self.epoch = 1  # the epoch the next (incremental) request must carry
        self.partitions: OrderedDict[PartitionKey, CachedPartition] = OrderedDict()
        self.last_used_ms = now_ms
        # topic key -> name, so responses can be built for id-keyed sessions.
        self.topic_names: dict[object, str] = {}


@dataclass(slots=True)
class FetchContext:
    """The outcome of resolving a Fetch request against the cache."""

    error: ErrorCode
    session_id: int  # to put in the response
    incremental: bool
    partitions: list[tuple[PartitionKey, CachedPartition]]
    session: FetchSession | None


class FetchSessionCache:
    def __init__(self, max_slots: int, clock_ms: Callable[[], int],
                 rng: random.Random | None = None) -> None:
        self.max_slots = max_slots
        self.clock_ms = clock_ms
        self._rng = rng or random.Random()
        self._sessions: OrderedDict[int, FetchSession] = OrderedDict()  # LRU order

    def __len__(self) -> int:
        return len(self._sessions)

    def _new_id(self) -> int:
        while True:
            sid = self._rng.randint(1, INT32_MAX)
            if sid not in self._sessions:
                return sid

    def _make_room(self, now: int) -> bool:
        if len(self._sessions) < self.max_slots:
            return True
        for sid, s in self._sessions.items():  # oldest first
            if now - s.last_used_ms >= EVICTION_MS:
                del self._sessions[sid]
                return True
            break
        return False

    def close(self, session_id: int) -> None:
        self._sessions.pop(session_id, None)

    def resolve(self, session_id: int, epoch: int,
                fetch: Iterable[tuple[PartitionKey, CachedPartition]],
                forgotten: Iterable[PartitionKey]) -> FetchContext:
        now = self.clock_ms()
        fetch = list(fetch)
        if epoch == -1:  # FINAL_EPOCH: sessionless
            if session_id:
                self.close(session_id)
            return FetchContext(ErrorCode.NONE, 0, False, fetch, None)
        if epoch == 0:  # INITIAL_EPOCH: full fetch, new session
            if session_id:
                self.close(session_id)
            if self.max_slots <= 0 or not self._make_room(now):
                return FetchContext(ErrorCode.NONE, 0, False, fetch, None)
            new = FetchSession(self._new_id(), now)
            for key, cp in fetch:
                new.partitions[key] = cp
            self._sessions[new.session_id] = new
            return FetchContext(ErrorCode.NONE, new.session_id, False,
                                list(new.partitions.items()), new)
        s = self._sessions.get(session_id)
        if s is None:
            return FetchContext(ErrorCode.FETCH_SESSION_ID_NOT_FOUND, 0, True, [], None)
        if epoch != s.epoch:
            return FetchContext(ErrorCode.INVALID_FETCH_SESSION_EPOCH, 0, True, [], None)
        for key in forgotten:
            s.partitions.pop(key, None)
        for key, cp in fetch:
            old = s.partitions.get(key)
            if old is None:
                s.partitions[key] = cp
            else:
                old.fetch_offset = cp.fetch_offset
                old.max_bytes = cp.max_bytes
                old.current_leader_epoch = cp.current_leader_epoch
                old.log_start_offset = cp.log_start_offset
        s.epoch = s.epoch + 1 if s.epoch < INT32_MAX else 1
        s.last_used_ms = now
        self._sessions.move_to_end(session_id)
        return FetchContext(ErrorCode.NONE, s.session_id, True, list(s.partitions.items()), s)

    def remove_topic(self, topic_key: object) -> None:
        """Forget a deleted topic in every session (its id will never come back)."""
        for s in self._sessions.values():
            for key in [k for k in s.partitions if k[0] == topic_key]:
                del s.partitions[key]
