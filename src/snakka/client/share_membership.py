"""Share-group membership of one consumer (sans-I/O, injected clock): what the background
heartbeat loop sends in ShareGroupHeartbeat and what it does with the answers.

Share groups have no JoinGroup/SyncGroup: the heartbeat *is* the join. The member id is
generated here once (a random UUID in Kafka's base64 form) and kept for the consumer's lifetime,
across rejoins; the member epoch comes from the coordinator (0 to join, -1 to leave). The
coordinator is found with FindCoordinator key type 0 (GROUP) and the group id, as Kafka's
consumer does (key type 2 is the *share* coordinator of share-partition state, a broker-internal
concern).

Outcomes of a heartbeat (``on_response``):

* success: adopt the epoch, the heartbeat interval and, when present, the assignment (topic ids
  and partitions; names are resolved by the shell through Metadata);
* FENCED_MEMBER_EPOCH / UNKNOWN_MEMBER_ID / STALE_MEMBER_EPOCH: the coordinator no longer knows
  this member as it thinks: drop the assignment and rejoin at once from epoch 0 with the full
  subscription (same member id);
* NOT_COORDINATOR / COORDINATOR_NOT_AVAILABLE: find the coordinator again, then retry;
  COORDINATOR_LOAD_IN_PROGRESS and other retriable codes: retry after a backoff;
* anything else (authorization, INVALID_REQUEST, GROUP_MAX_SIZE_REACHED, a group of another
  type...): fatal; the consumer reports it from its next call.

An application that stops polling for longer than ``max.poll.interval.ms`` is taken out of the
group (``pause``: the shell sends the leave heartbeat, so its partitions' records are released to
the others at once) and rejoins when it polls again (``resume``), as Kafka's consumer does.

Backoff is exponential from ``retry.backoff.ms`` to ``retry.backoff.max.ms`` (Kafka's defaults
100 ms and 1 s), reset by a success.
"""

from __future__ import annotations

from collections.abc import Callable
from enum import Enum

from snakka.client.share_acks import TopicIdPartition
from snakka.protocol.errors import ErrorCode
from snakka.protocol.messages.share_group_heartbeat_request import ShareGroupHeartbeatRequest
from snakka.protocol.primitives import random_uuid, uuid_to_base64

JOIN_EPOCH = 0
LEAVE_EPOCH = -1
# Kafka's group.share.heartbeat.interval.ms default; the coordinator's value replaces it.
DEFAULT_HEARTBEAT_INTERVAL_MS = 5_000

_REJOIN = frozenset({ErrorCode.FENCED_MEMBER_EPOCH, ErrorCode.UNKNOWN_MEMBER_ID,
                     ErrorCode.STALE_MEMBER_EPOCH})
_FIND_COORDINATOR = frozenset({ErrorCode.NOT_COORDINATOR, ErrorCode.COORDINATOR_NOT_AVAILABLE})


class HeartbeatOutcome(Enum):
    OK = "ok"
    REJOIN = "rejoin"                      # fenced: heartbeat again now from epoch 0
    FIND_COORDINATOR = "find_coordinator"  # coordinator moved or not available
    RETRY = "retry"                        # transient: retry after the backoff
    FATAL = "fatal"                        # unrecoverable: surface to the application


def new_member_id() -> str:
    """A member id like Kafka's consumer makes (Uuid.randomUuid().toString())."""
    return uuid_to_base64(random_uuid())


class ShareMembership:
    """Member id, epoch, subscription and assignment of one share consumer."""

    def __init__(self, group_id: str, *, clock: Callable[[], int], member_id: str | None = None,
                 rack_id: str | None = None, retry_backoff_ms: int = 100,
                 retry_backoff_max_ms: int = 1_000) -> None:
        self.group_id = group_id
        self.member_id = member_id or new_member_id()
        self.rack_id = rack_id
        self.clock = clock
        self.member_epoch = JOIN_EPOCH
        self.heartbeat_interval_ms = DEFAULT_HEARTBEAT_INTERVAL_MS
        self.subscription: tuple[str, ...] = ()
        self.assignment: frozenset[TopicIdPartition] = frozenset()
        # Bumped whenever ``assignment`` changes, so the shell can tell without comparing sets.
        self.assignment_version = 0
        self.fatal_error: tuple[int, str | None] | None = None
        self.joined = False  # the coordinator answered this incarnation at least once
        # max.poll.interval.ms expired: out of the group until the application polls again.
        self.paused = False
        self._send_subscription = True
        self._send_rack = True
        self._backoff_ms = retry_backoff_ms
        self._backoff_min = retry_backoff_ms
        self._backoff_max = retry_backoff_max_ms
        self.next_heartbeat_ms = 0  # due now

    # -- subscription ----------------------------------------------------------------------
    @property
    def active(self) -> bool:
        """Whether the member should be in the group (it has a subscription)."""
        return bool(self.subscription) and self.fatal_error is None and not self.paused

    def subscribe(self, topics: list[str]) -> bool:
        """Replace the subscription; True if it changed (the next heartbeat carries it now)."""
        new = tuple(sorted(set(topics)))
        if new == self.subscription:
            return False
        self.subscription = new
        self._send_subscription = True
        self.next_heartbeat_ms = 0
        return True

    def left(self) -> None:
        """The member left (or is about to): back to a fresh join with the same member id."""
        self.subscription = ()
        self.paused = False
        self.member_epoch = JOIN_EPOCH
        self.joined = False
        self._send_subscription = True
        self._send_rack = True
        self._set_assignment(frozenset())

    def pause(self) -> None:
        """The application stopped polling for longer than ``max.poll.interval.ms``: the member
        has left (the shell sent the leave heartbeat) and stays out until ``resume``."""
        self.paused = True
        self._rejoin()

    def resume(self) -> bool:
        """The application polls again: rejoin (same member id). True if it was paused."""
        if not self.paused:
            return False
        self.paused = False
        self.next_heartbeat_ms = 0
        return True

    # -- requests --------------------------------------------------------------------------
    def heartbeat_request(self) -> ShareGroupHeartbeatRequest:
        send_subs = self._send_subscription or self.member_epoch == JOIN_EPOCH
        return ShareGroupHeartbeatRequest(
            group_id=self.group_id, member_id=self.member_id, member_epoch=self.member_epoch,
            rack_id=self.rack_id if self._send_rack else None,
            subscribed_topic_names=list(self.subscription) if send_subs else None)

    def leave_request(self) -> ShareGroupHeartbeatRequest:
        return ShareGroupHeartbeatRequest(group_id=self.group_id, member_id=self.member_id,
                                          member_epoch=LEAVE_EPOCH, rack_id=None,
                                          subscribed_topic_names=None)

    # -- responses -------------------------------------------------------------------------
    def on_response(self, resp, sent: ShareGroupHeartbeatRequest) -> HeartbeatOutcome:
        now = self.clock()
        code = ErrorCode.from_code(resp.error_code)
        if code == ErrorCode.NONE:
            self._backoff_ms = self._backoff_min
            if sent.subscribed_topic_names is not None and \
                    tuple(sent.subscribed_topic_names) == self.subscription:
                self._send_subscription = False
            if sent.rack_id is not None or self.rack_id is None:
                self._send_rack = False
            self.member_epoch = resp.member_epoch
            self.joined = True
            if resp.heartbeat_interval_ms > 0:
                self.heartbeat_interval_ms = resp.heartbeat_interval_ms
            if resp.assignment is not None:
                self._set_assignment(frozenset(
                    (tp.topic_id, p) for tp in resp.assignment.topic_partitions
                    for p in tp.partitions))
            self.next_heartbeat_ms = now + self.heartbeat_interval_ms
            if self._send_subscription:
                self.next_heartbeat_ms = now  # the subscription changed while in flight
            return HeartbeatOutcome.OK
        if code in _REJOIN:
            self._rejoin()
            return HeartbeatOutcome.REJOIN
        if code in _FIND_COORDINATOR:
            self._retry_later(now)
            return HeartbeatOutcome.FIND_COORDINATOR
        if code.retriable or code == ErrorCode.COORDINATOR_LOAD_IN_PROGRESS:
            self._retry_later(now)
            return HeartbeatOutcome.RETRY
        self.fatal_error = (int(code), resp.error_message)
        return HeartbeatOutcome.FATAL

    def on_failure(self) -> HeartbeatOutcome:
        """The heartbeat could not be sent or answered (connection lost, timeout): the
        coordinator may have moved; find it again after the backoff."""
        self._retry_later(self.clock())
        return HeartbeatOutcome.FIND_COORDINATOR

    def _rejoin(self) -> None:
        self.member_epoch = JOIN_EPOCH
        self.joined = False
        self._send_subscription = True
        self._send_rack = True
        self._set_assignment(frozenset())
        self.next_heartbeat_ms = 0

    def _retry_later(self, now: int) -> None:
        self.next_heartbeat_ms = now + self._backoff_ms
        self._backoff_ms = min(self._backoff_max, self._backoff_ms * 2)

    def _set_assignment(self, assignment: frozenset[TopicIdPartition]) -> None:
        if assignment != self.assignment:
            self.assignment = assignment
            self.assignment_version += 1
