"""The contract every group core follows, and the values they share.

Cores (classic, consumer, offsets) are sans-I/O state machines in the style of h11:

* **Time** comes only from the injected ``clock()`` (milliseconds). Nothing sleeps.
* **Deferred replies.** A call that may have to wait for other members (classic JoinGroup and
  SyncGroup) takes an opaque hashable ``token`` and returns either its result now or
  :data:`PENDING`. When the result is known later, ``drain_completions()`` returns
  ``[(token, result), ...]`` and forgets them. A pending token whose connection went away is
  dropped with ``cancel(token)`` (the core must then treat that member as it would one that
  never sent the request).
* **Timers.** ``next_deadline()`` is the earliest absolute time (ms) at which the core wants
  ``on_timer(now_ms)`` to run (``None`` if none). The shell calls ``on_timer`` at or after that
  time, and re-reads ``next_deadline()`` after *every* call into the core. ``on_timer`` may
  produce completions and records.
* **Persistence.** Every change that must survive a restart is emitted as a
  :class:`GroupRecord`; ``drain_records()`` returns and forgets them. The shell writes them to
  ``__consumer_offsets`` (offset commits before the client is answered). At start-up the shell
  calls ``replay(record)`` for every stored record in log order (the latest record of a key
  wins; a ``None`` value is a tombstone) and then ``loaded()`` once, after which session timers
  run from the load time.
* **Errors** for anything a client can get wrong are returned as Kafka error codes
  (``snakka.protocol.errors.ErrorCode``) inside results; cores raise only for programming errors.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from snakka.config import broker_default, broker_default_int

Clock = Callable[[], int]
_default = broker_default_int


def _default_list(name: str) -> list[str]:
    v = broker_default(name)
    assert isinstance(v, list)
    return v


class _Pending:
    __slots__ = ()

    def __repr__(self) -> str:
        return "PENDING"


PENDING = _Pending()


@dataclass(frozen=True, slots=True)
class GroupRecord:
    """One persisted fact. ``key`` is a tuple starting with the record kind and the group id,
    e.g. ``("offset", group, topic, partition)``, ``("classic", group)``,
    ``("consumer", group)``, ``("consumer_member", group, member_id)``; ``value`` is a
    JSON-serialisable dict (bytes as base64 strings), or ``None`` for a tombstone."""

    key: tuple[Any, ...]
    value: dict[str, Any] | None


@dataclass(frozen=True, slots=True)
class GroupConfig:
    """Broker configs of the group coordinator (Kafka's names, dots → underscores). The defaults
    are snakka.config's (one definition); the shell passes the broker's configured values."""

    group_min_session_timeout_ms: int = _default("group.min.session.timeout.ms")
    group_max_session_timeout_ms: int = _default("group.max.session.timeout.ms")
    group_initial_rebalance_delay_ms: int = _default("group.initial.rebalance.delay.ms")
    group_max_size: int = _default("group.max.size")
    offsets_retention_minutes: int = _default("offsets.retention.minutes")
    offset_metadata_max_bytes: int = _default("offset.metadata.max.bytes")
    group_consumer_session_timeout_ms: int = _default("group.consumer.session.timeout.ms")
    group_consumer_min_session_timeout_ms: int = _default("group.consumer.min.session.timeout.ms")
    group_consumer_max_session_timeout_ms: int = _default("group.consumer.max.session.timeout.ms")
    group_consumer_heartbeat_interval_ms: int = _default("group.consumer.heartbeat.interval.ms")
    group_consumer_min_heartbeat_interval_ms: int = _default("group.consumer.min.heartbeat.interval.ms")
    group_consumer_max_heartbeat_interval_ms: int = _default("group.consumer.max.heartbeat.interval.ms")
    group_consumer_max_size: int = _default("group.consumer.max.size")
    group_consumer_assignors: tuple[str, ...] = tuple(_default_list("group.consumer.assignors"))
    group_consumer_migration_policy: str = str(broker_default("group.consumer.migration.policy"))
    group_share_session_timeout_ms: int = _default("group.share.session.timeout.ms")
    group_share_heartbeat_interval_ms: int = _default("group.share.heartbeat.interval.ms")
    group_share_max_size: int = _default("group.share.max.size")
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def upgrade_enabled(self) -> bool:
        """Kafka's ``ConsumerGroupMigrationPolicy.isUpgradeEnabled``."""
        return self.group_consumer_migration_policy in ("bidirectional", "upgrade")

    @property
    def downgrade_enabled(self) -> bool:
        """Kafka's ``ConsumerGroupMigrationPolicy.isDowngradeEnabled``."""
        return self.group_consumer_migration_policy in ("bidirectional", "downgrade")

    @property
    def offsets_retention_ms(self) -> int:
        return self.offsets_retention_minutes * 60_000


# Group states as Kafka names them in DescribeGroups / ListGroups.
class ClassicState:
    EMPTY = "Empty"
    PREPARING_REBALANCE = "PreparingRebalance"
    COMPLETING_REBALANCE = "CompletingRebalance"
    STABLE = "Stable"
    DEAD = "Dead"


class ShareGroupState:
    """A share group's state (Kafka's ShareGroupState); not a share-partition's persisted
    state, which is ``snakka.share.types.SharePartitionState``."""

    EMPTY = "Empty"
    STABLE = "Stable"
    DEAD = "Dead"


class ConsumerState:
    EMPTY = "Empty"
    ASSIGNING = "Assigning"
    RECONCILING = "Reconciling"
    STABLE = "Stable"
    DEAD = "Dead"
