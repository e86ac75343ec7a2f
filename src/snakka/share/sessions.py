"""Share sessions (KIP-932): the share-session cache, sans-I/O with an injected clock.

A share consumer keeps one share session per broker, keyed by (group id, member id). The
session holds the set of share-partitions the member fetches, so that incremental ShareFetch
requests only name what changed. Kafka's rules (ShareSessionCache / SharePartitionManager.
newContext / acknowledgeSessionUpdate), by the request's ``ShareSessionEpoch``:

ShareFetch
- ``0`` opens a session with exactly the request's partitions (a full fetch). An existing session
  of the same member is replaced (as Kafka: the old one is dropped; its acquired records keep
  their locks, the member may still acknowledge them in the new session). Acknowledgements in an
  epoch-0 request are INVALID_REQUEST. No free slot (``group.share.max.share.sessions``):
  SHARE_SESSION_LIMIT_REACHED.
- ``n > 0``: an incremental fetch; the session must exist (SHARE_SESSION_NOT_FOUND) and ``n``
  must be its next epoch (INVALID_SHARE_SESSION_EPOCH). ``Topics`` adds partitions,
  ``ForgottenTopicsData`` removes them; the fetch covers every partition of the session.
- ``-1`` closes the session: it may carry final acknowledgements but fetches nothing; the
  session must exist (SHARE_SESSION_NOT_FOUND). Naming partitions to forget in a final request
  is INVALID_REQUEST (there is nothing left to forget from).
- any other epoch: the session's next epoch can never be it, so INVALID_SHARE_SESSION_EPOCH
  (SHARE_SESSION_NOT_FOUND without a session).

ShareAcknowledge
- ``0`` is INVALID_SHARE_SESSION_EPOCH (a session is opened by ShareFetch only); otherwise the
  session must exist, ``-1`` acknowledges and then closes it, ``n > 0`` must be the next epoch.

A session also remembers the connection it was (re)opened on: when that connection closes,
the session is removed and the shell releases the member's acquired records (Kafka's
ClientConnectionDisconnectListener). Which records to release, persistence and wake-ups are the
shell's job (``share.manager``); this module only says which sessions went away.

Epochs count 1, 2, ... and wrap from 2**31-1 to 1, as Kafka's ShareRequestMetadata.nextEpoch.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Hashable, Iterable
from dataclasses import dataclass, field

from snakka.limits import INT32_MAX
from snakka.protocol.errors import ErrorCode

INITIAL_EPOCH = 0
FINAL_EPOCH = -1

# (topic id, partition index)
SharePartitionKey = tuple[uuid.UUID, int]  # (topic id, partition)


def next_epoch(epoch: int) -> int:
    if epoch < 0:
        return FINAL_EPOCH
    return 1 if epoch == INT32_MAX else epoch + 1


def rotate_partitions(partitions: list[SharePartitionKey], epoch: int) -> list[SharePartitionKey]:
    """Kafka's PartitionRotateStrategy (round robin): the session's partitions rotated left by
    ``epoch % n`` (none for the initial/final epoch or n <= 1), so that over consecutive fetches
    every partition is first (gets the whole MaxRecords budget and the first read) in turn."""
    n = len(partitions)
    if n <= 1 or epoch < 1:
        return partitions
    k = epoch % n
    return partitions[k:] + partitions[:k] if k else partitions


@dataclass(slots=True)
class ShareSession:
    group_id: str
    member_id: str
    epoch: int  # the epoch the member's next request must carry
    partitions: dict[SharePartitionKey, None]  # insertion-ordered set
    connection: Hashable | None
    created_ms: int
    last_used_ms: int


@dataclass(slots=True)
class ShareFetchContext:
    """What a ShareFetch request resolved to."""

    error: ErrorCode = ErrorCode.NONE
    # "full" (epoch 0), "incremental" (epoch > 0), "final" (epoch -1)
    kind: str = "full"
    # The partitions to fetch from (every partition of the session; none for "final").
    partitions: list[SharePartitionKey] = field(default_factory=list)
    # Set when an error is answered: a human-readable reason for the log/response.
    message: str | None = None


class ShareSessionCache:
    """Share sessions keyed by (group id, member id), at most ``max_sessions`` of them."""

    def __init__(self, max_sessions: int, clock: Callable[[], int]) -> None:
        self.max_sessions = max_sessions
        self._clock = clock
        self._sessions: dict[tuple[str, str], ShareSession] = {}

    # -- queries -------------------------------------------------------------------------
    def __len__(self) -> int:
        return len(self._sessions)

    def get(self, group_id: str, member_id: str) -> ShareSession | None:
        return self._sessions.get((group_id, member_id))

    def sessions(self) -> list[ShareSession]:
        return list(self._sessions.values())

    def group_has_sessions(self, group_id: str) -> bool:
        return any(g == group_id for g, _m in self._sessions)

    # -- ShareFetch ----------------------------------------------------------------------
    def new_fetch_context(self, group_id: str, member_id: str, epoch: int,
                          fetch: Iterable[SharePartitionKey],
                          forgotten: Iterable[SharePartitionKey], *, has_acks: bool,
                          connection: Hashable | None = None) -> ShareFetchContext:
        """Resolve a ShareFetch against the cache, updating the session (see module doc)."""
        key = (group_id, member_id)
        now = self._clock()
        fetch = list(fetch)
        forgotten = list(forgotten)
        if epoch == FINAL_EPOCH:
            if key not in self._sessions:
                return ShareFetchContext(ErrorCode.SHARE_SESSION_NOT_FOUND, "final",
                                         message="no such share session")
            if forgotten:
                return ShareFetchContext(ErrorCode.INVALID_REQUEST, "final",
                                         message="a final ShareFetch cannot forget partitions")
            return ShareFetchContext(ErrorCode.NONE, "final")
        if epoch == INITIAL_EPOCH:
            if has_acks:
                return ShareFetchContext(
                    ErrorCode.INVALID_REQUEST, "full",
                    message="acknowledgements in a ShareFetch that opens a share session")
            old = self._sessions.pop(key, None)
            if old is None and len(self._sessions) >= self.max_sessions:
                return ShareFetchContext(
                    ErrorCode.SHARE_SESSION_LIMIT_REACHED, "full",
                    message=f"group.share.max.share.sessions={self.max_sessions} reached")
            parts = dict.fromkeys(fetch)
            self._sessions[key] = ShareSession(group_id, member_id, next_epoch(INITIAL_EPOCH),
                                               parts, connection, now, now)
            return ShareFetchContext(ErrorCode.NONE, "full", list(parts))
        session = self._sessions.get(key)
        if session is None:
            return ShareFetchContext(ErrorCode.SHARE_SESSION_NOT_FOUND, "incremental",
                                     message="no such share session")
        if session.epoch != epoch:
            return ShareFetchContext(
                ErrorCode.INVALID_SHARE_SESSION_EPOCH, "incremental",
                message=f"expected share session epoch {session.epoch}, got {epoch}")
        for tp in fetch:
            session.partitions.setdefault(tp, None)
        for tp in forgotten:
            session.partitions.pop(tp, None)
        session.epoch = next_epoch(session.epoch)
        session.last_used_ms = now
        if connection is not None:
            session.connection = connection
        return ShareFetchContext(ErrorCode.NONE, "incremental", list(session.partitions))

    # -- ShareAcknowledge ----------------------------------------------------------------
    def acknowledge_update(self, group_id: str, member_id: str, epoch: int) -> ErrorCode:
        """Check (and advance) the session of a ShareAcknowledge request."""
        if epoch == INITIAL_EPOCH:
            return ErrorCode.INVALID_SHARE_SESSION_EPOCH
        session = self._sessions.get((group_id, member_id))
        if session is None:
            return ErrorCode.SHARE_SESSION_NOT_FOUND
        if epoch == FINAL_EPOCH:
            return ErrorCode.NONE  # the caller closes the session after the acknowledgements
        if session.epoch != epoch:
            return ErrorCode.INVALID_SHARE_SESSION_EPOCH
        session.epoch = next_epoch(session.epoch)
        session.last_used_ms = self._clock()
        return ErrorCode.NONE

    # -- removal -------------------------------------------------------------------------
    def remove(self, group_id: str, member_id: str) -> ShareSession | None:
        return self._sessions.pop((group_id, member_id), None)

    def remove_connection(self, connection: Hashable) -> list[ShareSession]:
        """The connection closed: remove (and return) the sessions last used on it."""
        gone = [k for k, s in self._sessions.items() if s.connection == connection]
        return [self._sessions.pop(k) for k in gone]

    def remove_group(self, group_id: str) -> list[ShareSession]:
        gone = [k for k in self._sessions if k[0] == group_id]
        return [self._sessions.pop(k) for k in gone]

    def forget_topic(self, topic_id: object) -> None:
        """A deleted topic leaves every session."""
        for s in self._sessions.values():
            for tp in [tp for tp in s.partitions if tp[0] == topic_id]:
                del s.partitions[tp]
