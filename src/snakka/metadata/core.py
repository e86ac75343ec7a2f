"""Cluster metadata: topics, topic ids, partition counts, dynamic configs, producer-id blocks.

Sans-I/O, in the KRaft style: the state changes only by *applying records*. An operation
(create a topic, alter a config, ...) validates its input against the current state, returns the
records that express the change, and applies them. The I/O shell (metadata.store) appends those
records to the metadata log before the change is acknowledged to a client; at start-up the log is
replayed through the same ``apply`` to rebuild exactly the same state. Nothing here touches files,
sockets or the clock.

Records are small dicts with a ``type`` key:
    {"type": "topic", "name", "topic_id" (hex), "partitions", "configs": {..}}
    {"type": "partitions", "topic_id", "partitions", "first"}  # CreatePartitions (first: the
                                                              # old count)
    {"type": "partition", "topic_id", "partition"}            # KRaft's PartitionRecord
    {"type": "feature_level", "name", "level"}                # KRaft's FeatureLevelRecord
    {"type": "remove_topic", "topic_id"}
    {"type": "config", "resource_type": 2|4|16|32, "resource_name", "configs": {k: v|None}}
                                                              # 32 = GROUP: group configs
                                                              # 16 = CLIENT_METRICS: KIP-714
                                                              # subscriptions (telemetry/)
    {"type": "producer_ids", "next": int}                     # producer-id block allocation
    {"type": "cluster", "cluster_id"}    # legacy JSON logs only: KRaft keeps it in meta.properties
    {"type": "user_scram_credential" | "remove_user_scram_credential", ...}  # metadata/scram.py
    {"type": "acl", "id", "resource_type", "resource_name", "pattern_type", "principal",
     "host", "operation", "permission_type"}   # KRaft's AccessControlEntryRecord
    {"type": "remove_acl", "id"}                 # KRaft's RemoveAccessControlEntryRecord
    {"type": "client_quota", "entity", "key", "value", "remove"}  # KRaft's ClientQuotaRecord
                                                 # (metadata/client_quotas.py)
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from snakka.config import (
    BROKER_CONFIGS,
    LISTENER_PREFIX,
    LISTENER_RECONFIGURABLE_SSL_CONFIGS,
    PER_BROKER_DYNAMIC_CONFIGS,
    TOPIC_CONFIGS,
    UNAPPLIED_DYNAMIC_BROKER_CONFIGS,
    ConfigError,
    apply_config_changes,
    dynamic_listener_ssl_config,
    is_static_broker_config,
    validate_group_configs,
    validate_topic_configs,
)
from snakka.limits import MAX_RECORDS_PER_USER_OP, MAX_TOPIC_NAME_LENGTH
from snakka.metadata import client_quotas as _client_quotas
from snakka.metadata import scram as _scram
from snakka.protocol.errors import ErrorCode, KafkaError
from snakka.protocol.primitives import random_uuid
from snakka.security.acl_authorizer import (
    AclBindingFilter,
    AclCache,
    StandardAcl,
    new_acl_id,
    remove_record,
    validate_new_acl,
)
from snakka.telemetry.subscriptions import validate_subscription

_LEGAL_TOPIC = re.compile(r"^[a-zA-Z0-9._-]+$")
# Producer ids are handed out in blocks; only the block boundary is logged (Kafka's
# AllocateProducerIds does the same with blocks of 1000).
PRODUCER_ID_BLOCK_SIZE = 1000

RESOURCE_TOPIC = 2
RESOURCE_BROKER = 4
RESOURCE_GROUP = 32
RESOURCE_CLIENT_METRICS = 16

# Kafka's internal topics (Topic.isInternal): reported with is_internal=true in Metadata.
INTERNAL_TOPICS = frozenset({"__consumer_offsets", "__transaction_state", "__share_group_state"})
# The KRaft metadata log's topic: its directory ``__cluster_metadata-0`` in the log dir is this
# broker's own metadata log (metadata.store), never a topic.
CLUSTER_METADATA_TOPIC = "__cluster_metadata"
# Every name the broker keeps for itself: the internal topics, the metadata log, and the tiered
# storage metadata topic (``__remote_log_metadata``, created by the broker when tiered storage
# exists). No client may create one (CreateTopics, auto-creation), write to one (Produce,
# DeleteRecords) or reshape one (CreatePartitions, AlterConfigs); only the owning coordinator
# creates and writes them. Kafka itself lets an admin create ``__transaction_state`` by hand
# and grow or reconfigure internal topics; snakka refuses, because its coordinators rely on the
# partition count and configs they created the topic with (see docs/configuration.md).
RESERVED_TOPICS = INTERNAL_TOPICS | {CLUSTER_METADATA_TOPIC, "__remote_log_metadata"}

#: One record of the metadata log (``__cluster_metadata``): a JSON object whose ``type`` says
#: which change it is.
MetadataRecord = dict[str, Any]


def random_topic_id() -> uuid.UUID:
    """A random non-zero topic id whose base64 form does not start with '-' (as Kafka does)."""
    return random_uuid()


def validate_topic_name(name: str) -> None:
    if not name:
        raise KafkaError(ErrorCode.INVALID_TOPIC_EXCEPTION, "Topic name is illegal, it can't be empty")
    if name in (".", ".."):
        raise KafkaError(ErrorCode.INVALID_TOPIC_EXCEPTION, "Topic name cannot be \".\" or \"..\"")
    if len(name) > MAX_TOPIC_NAME_LENGTH:
        raise KafkaError(ErrorCode.INVALID_TOPIC_EXCEPTION,
                         f"Topic name is illegal, it can't be longer than {MAX_TOPIC_NAME_LENGTH} characters")
    if not _LEGAL_TOPIC.match(name):
        raise KafkaError(ErrorCode.INVALID_TOPIC_EXCEPTION,
                         f"Topic name \"{name}\" is illegal, it contains a character other than "
                         "ASCII alphanumerics, '.', '_' and '-'")


# Kafka's message when an operation would write more than MAX_RECORDS_PER_USER_OP records (its
# QuorumController turns BoundedListTooLongException into this PolicyViolationException).
EXCESSIVELY_LARGE_OP = "Unable to perform excessively large batch operation."


def creation_records(partitions: int, configs: Mapping[str, str | None]) -> int:
    """The metadata records Kafka's controller writes to create a topic: its TopicRecord, a
    PartitionRecord per partition, a ConfigRecord per config given a value."""
    return 1 + partitions + sum(v is not None for v in configs.values())


# Kafka 4.0's message when a CreateTopics asks for more than MAX_RECORDS_PER_USER_OP partitions
# in all (ReplicationControlManager.validateTotalNumberOfPartitions, before anything else).
EXCESSIVE_PARTITIONS = "Excessively large number of partitions per request."


class UserOpTooLarge(KafkaError):
    """An operation of more than MAX_RECORDS_PER_USER_OP records (snakka.limits): Kafka's
    controller refuses the whole request, every entry POLICY_VIOLATION, so a handler that meets
    it for one entry answers all of them with it."""

    def __init__(self, message: str = EXCESSIVELY_LARGE_OP) -> None:
        super().__init__(ErrorCode.POLICY_VIOLATION, message)


def check_partitions_per_request(partitions: int) -> None:
    """Kafka 4.0's first check of a CreateTopics: the partitions its topics ask for in all
    (each ``-1`` counting the broker's ``num.partitions``) at most MAX_RECORDS_PER_USER_OP."""
    if partitions > MAX_RECORDS_PER_USER_OP:
        raise UserOpTooLarge(EXCESSIVE_PARTITIONS)


def check_user_op_records(records: int) -> None:
    if records > MAX_RECORDS_PER_USER_OP:
        raise UserOpTooLarge()


def _collision_key(name: str) -> str:
    return name.replace(".", "_")


# A reserved name blocks the names that collide with it even before its topic exists (a user's
# ``__share.group.state`` would otherwise make the lazily created share-group state topic
# impossible to create).
_RESERVED_COLLISIONS = {_collision_key(n): n for n in RESERVED_TOPICS}


def check_client_topic(name: str, what: str) -> None:
    """Refuse a client operation on a reserved topic (see RESERVED_TOPICS) with Kafka's
    INVALID_TOPIC_EXCEPTION (what Kafka answers for Produce and DeleteRecords on an internal
    topic: "Cannot append to internal topic ...")."""
    if name in RESERVED_TOPICS:
        raise KafkaError(ErrorCode.INVALID_TOPIC_EXCEPTION, f"Cannot {what} internal topic {name}")


@dataclass
class TopicInfo:
    name: str
    topic_id: uuid.UUID
    partitions: int
    configs: dict[str, str] = field(default_factory=dict)  # per-topic overrides only

    @property
    def is_internal(self) -> bool:
        return self.name in INTERNAL_TOPICS


class ClusterMetadata:
    """The replayable metadata state machine (see module docstring)."""

    def __init__(self) -> None:
        self.cluster_id: str | None = None
        self.topics: dict[str, TopicInfo] = {}
        self.topics_by_id: dict[uuid.UUID, TopicInfo] = {}
        self._collisions: dict[str, str] = {}
        # Creations in flight (name -> None): validated, partition logs being created, records
        # not applied yet. Not replayed state: the I/O shell (Broker) adds and removes them so
        # that a second creation of the same (or a colliding) name meanwhile is refused.
        self.pending: dict[str, None] = {}
        self._pending_collisions: dict[str, str] = {}
        # Dynamic configs: (resource_type, resource_name) -> {key: value}. Broker resource name
        # "" is the cluster-wide default (Kafka's <default> entity).
        self.dynamic_configs: dict[tuple[int, str], dict[str, str]] = {}
        self.next_producer_id_block = 0  # first id of the next unallocated block
        self.version = 0  # bumps on every applied record (cheap change detection)
        self.skipped: list[Mapping[str, Any]] = []  # replayed records that could not apply (see apply)
        # SCRAM credentials (salted; AlterUserScramCredentials), metadata/scram.py.
        self.scram = _scram.ScramCredentials()
        # remote.log.storage.system.enable (set by the broker): may topics be tiered at all.
        self.remote_storage_system_enabled = False
        # ACLs (security.acl_authorizer): the StandardAuthorizer reads this very cache.
        self.acls = AclCache()
        # Client quotas (AlterClientQuotas), metadata/client_quotas.py: the quota managers
        # read this very state.
        self.client_quotas = _client_quotas.ClientQuotaConfigs()
        # Finalized feature levels (KRaft's FeatureLevelRecord), metadata.version included.
        self.features: dict[str, int] = {}

    # -- replay --------------------------------------------------------------------------
    def apply(self, rec: Mapping[str, Any]) -> None:
        t = rec["type"]
        if t == "topic":
            if rec["name"] == CLUSTER_METADATA_TOPIC:
                # Written by versions that let a client create it (it shared the metadata log's
                # directory). It cannot be a topic: forget it; the shell logs the skip.
                self.skipped.append(rec)
                return
            new = TopicInfo(rec["name"], uuid.UUID(hex=rec["topic_id"]), int(rec["partitions"]),
                            dict(rec.get("configs") or {}))
            self.topics[new.name] = new
            self.topics_by_id[new.topic_id] = new
            self._collisions[_collision_key(new.name)] = new.name
        elif t == "partitions":
            ti = self.topics_by_id.get(uuid.UUID(hex=rec["topic_id"]))
            if ti is None:  # a skipped topic's
                self.skipped.append(rec)
                return
            ti.partitions = int(rec["partitions"])
        elif t == "partition":  # KRaft's PartitionRecord: the topic has at least this one
            ti = self.topics_by_id.get(uuid.UUID(hex=rec["topic_id"]))
            if ti is None:
                self.skipped.append(rec)
                return
            ti.partitions = max(ti.partitions, int(rec["partition"]) + 1)
        elif t == "remove_topic":
            ti = self.topics_by_id.pop(uuid.UUID(hex=rec["topic_id"]), None)
            if ti is None:
                self.skipped.append(rec)
                return
            del self.topics[ti.name]
            self._collisions.pop(_collision_key(ti.name), None)
        elif t == "config":
            key = (int(rec["resource_type"]), rec["resource_name"])
            if key[0] == RESOURCE_TOPIC:
                ti = self.topics.get(key[1])
                if ti is None:
                    return
                target = ti.configs
            else:
                target = self.dynamic_configs.setdefault(key, {})
            for k, v in rec["configs"].items():
                if v is None:
                    target.pop(k, None)
                else:
                    target[k] = v
            if not target and key[0] != RESOURCE_TOPIC:
                # No overrides left (e.g. every config of a group deleted): forget the entity,
                # so configuring many short-lived groups cannot accumulate state.
                self.dynamic_configs.pop(key, None)
        elif t == "producer_ids":
            self.next_producer_id_block = max(self.next_producer_id_block, int(rec["next"]))
        elif t == "cluster":
            self.cluster_id = rec["cluster_id"]
        elif t == "feature_level":
            if int(rec["level"]) == 0:
                self.features.pop(rec["name"], None)
            else:
                self.features[rec["name"]] = int(rec["level"])
        elif t in (_scram.RECORD, _scram.REMOVE_RECORD):
            self.scram.apply(rec)
        elif t == "acl":
            self.acls.add(str(rec["id"]), StandardAcl.from_record(rec))
        elif t == "remove_acl":
            self.acls.remove(str(rec["id"]))
        elif t == _client_quotas.RECORD:
            self.client_quotas.apply(rec)
        else:
            raise ValueError(f"unknown metadata record type {t!r}")
        self.version += 1

    def _emit(self, recs: list[MetadataRecord]) -> list[MetadataRecord]:
        for r in recs:
            self.apply(r)
        return recs

    # -- topics --------------------------------------------------------------------------
    def topic(self, name: str) -> TopicInfo | None:
        return self.topics.get(name)

    def check_create_topic(self, name: str, partitions: int, replication_factor: int,
                           configs: Mapping[str, str | None], *, internal: bool = False) -> None:
        """Validate a topic creation; raises KafkaError with CreateTopics' error codes.
        ``internal``: the broker's own coordinator creates a reserved topic."""
        validate_topic_name(name)
        if name in self.topics or name in self.pending:
            raise KafkaError(ErrorCode.TOPIC_ALREADY_EXISTS, f"Topic '{name}' already exists.")
        if not internal and name in RESERVED_TOPICS:
            raise KafkaError(ErrorCode.INVALID_REQUEST,
                             f"Creation of internal topic {name} is prohibited.")
        key = _collision_key(name)
        other = self._collisions.get(key) or self._pending_collisions.get(key) or \
            (None if internal else _RESERVED_COLLISIONS.get(key))
        if other is not None:
            raise KafkaError(ErrorCode.INVALID_TOPIC_EXCEPTION,
                             f"Topic '{name}' collides with existing topic: {other}")
        if partitions < 1:
            raise KafkaError(ErrorCode.INVALID_PARTITIONS, "Number of partitions must be larger than 0.")
        if replication_factor < 1:
            raise KafkaError(ErrorCode.INVALID_REPLICATION_FACTOR,
                             "Replication factor must be larger than 0.")
        if replication_factor > 1:
            raise KafkaError(ErrorCode.INVALID_REPLICATION_FACTOR,
                             f"Unable to replicate the partition {replication_factor} time(s): "
                             "The target replication factor of "
                             f"{replication_factor} cannot be reached because only 1 broker(s) are registered.")
        try:
            validate_topic_configs(configs)
        except ConfigError as e:
            raise KafkaError(ErrorCode.INVALID_CONFIG, str(e)) from None
        self._check_tiered_configs({}, {k: v for k, v in configs.items() if v is not None})
        check_user_op_records(creation_records(partitions, configs))

    def _check_tiered_configs(self, before: Mapping[str, str], after: Mapping[str, str]) -> None:
        """Kafka's tiered-storage rules for a topic's overrides (LogConfig.validate):
        remote storage only when the broker has it; never on a compacted topic; local
        retention within total retention; turning it off only with its remote data deleted
        (KIP-950). ``before``/``after``: the topic's overrides around the change."""
        def on(cfg: Mapping[str, str]) -> bool:
            return cfg.get("remote.storage.enable", "false").strip().lower() == "true"

        if not on(after):
            if on(before) and not (
                    after.get("remote.log.delete.on.disable", "false").lower() == "true"
                    and after.get("remote.log.copy.disable", "false").lower() == "true"):
                raise KafkaError(
                    ErrorCode.INVALID_CONFIG,
                    "It is invalid to disable remote storage without deleting remote data. If "
                    "you want to keep the remote data and turn to read only, please set "
                    "`remote.storage.enable=true,remote.log.copy.disable=true`. If you want to "
                    "disable remote storage and delete all remote data, please set "
                    "`remote.storage.enable=false,remote.log.copy.disable=true,"
                    "remote.log.delete.on.disable=true`.")
            return
        if not self.remote_storage_system_enabled:
            raise KafkaError(ErrorCode.INVALID_CONFIG,
                             "Tiered Storage functionality is disabled in the broker. Topic "
                             "cannot be configured with remote log storage.")
        if "compact" in after.get("cleanup.policy", "delete"):
            raise KafkaError(ErrorCode.INVALID_CONFIG,
                             "Remote log storage is unsupported for the compacted topics")
        for unit, default in (("ms", 604_800_000), ("bytes", -1)):
            total = int(after.get(f"retention.{unit}", default))
            local = int(after.get(f"local.retention.{unit}", -2))
            if local == -2 or total == -1:
                continue
            if local == -1:
                raise KafkaError(
                    ErrorCode.INVALID_CONFIG,
                    f"Invalid value -1 for configuration local.retention.{unit}: Value must not "
                    f"be -1 as retention.{unit} value is set as {total}.")
            if local > total:
                raise KafkaError(
                    ErrorCode.INVALID_CONFIG,
                    f"Invalid value {local} for configuration local.retention.{unit}: Value "
                    f"must not be more than retention.{unit} property value: {total}")

    def create_topic(self, name: str, partitions: int, configs: Mapping[str, str | None],
                     topic_id: uuid.UUID | None = None, *, internal: bool = False) -> list[MetadataRecord]:
        self.check_create_topic(name, partitions, 1, configs, internal=internal)
        return self._emit([self.topic_record(name, partitions, configs, topic_id)])

    def topic_record(self, name: str, partitions: int, configs: Mapping[str, str | None],
                     topic_id: uuid.UUID | None = None) -> MetadataRecord:
        """The record that creates a (validated) topic, with a fresh topic id; not applied."""
        tid = topic_id or random_topic_id()
        while tid in self.topics_by_id:
            tid = random_topic_id()
        return {"type": "topic", "name": name, "topic_id": tid.hex, "partitions": partitions,
                "configs": {k: v for k, v in configs.items() if v is not None}}

    def reserve(self, name: str) -> None:
        """Mark a validated creation as in flight (see ``pending``)."""
        self.pending[name] = None
        self._pending_collisions[_collision_key(name)] = name

    def release(self, name: str) -> None:
        """End an in-flight creation (committed or failed)."""
        if self.pending.pop(name, 0) is None:
            self._pending_collisions.pop(_collision_key(name), None)

    # -- ACLs (Kafka's AclControlManager) ------------------------------------------------
    def create_acls(self, acls: list[StandardAcl]
                    ) -> tuple[list[MetadataRecord], list[KafkaError | None]]:
        """Validate and add ACLs: (the applied records, one result per ACL: None or the
        error). An ACL that exists already (or twice in the request) succeeds without a new
        record, as in Kafka."""
        records: list[MetadataRecord] = []
        results: list[KafkaError | None] = []
        seen: set[StandardAcl] = set()
        for acl in acls:
            try:
                validate_new_acl(acl)
            except KafkaError as e:
                results.append(e)
                continue
            if acl not in self.acls and acl not in seen:
                seen.add(acl)
                records.append(acl.to_record(new_acl_id()))
            results.append(None)
        check_user_op_records(len(records))  # before anything is applied
        return self._emit(records), results

    def delete_acls(self, filters: list[AclBindingFilter]
                    ) -> tuple[list[MetadataRecord], list[list[StandardAcl] | KafkaError]]:
        """Remove the ACLs each filter matches: (the applied records, per filter the ACLs it
        matched or the error). An ACL several filters match is in each filter's result and
        removed once. A filter that would take the request beyond MAX_RECORDS_PER_USER_OP
        fails and removes nothing (Kafka kept that filter's first records)."""
        removing: dict[str, StandardAcl] = {}
        results: list[list[StandardAcl] | KafkaError] = []
        for flt in filters:
            matched = self.acls.acls(flt)
            new = {i: a for i, a in matched if i not in removing}
            if len(removing) + len(new) > MAX_RECORDS_PER_USER_OP:
                results.append(KafkaError(
                    ErrorCode.UNKNOWN_SERVER_ERROR,
                    f"Cannot remove more than {MAX_RECORDS_PER_USER_OP} acls in a single "
                    "delete operation."))
                continue
            removing.update(new)
            results.append([a for _, a in matched])
        return self._emit([remove_record(i) for i in removing]), results

    def apply_all(self, records: list[MetadataRecord]) -> list[MetadataRecord]:
        """Apply records built elsewhere (e.g. ``topic_record``) and return them."""
        return self._emit(records)

    def delete_topic(self, name: str) -> list[MetadataRecord]:
        ti = self.topics.get(name)
        if ti is None:
            raise KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                             "This server does not host this topic-partition.")
        return self._emit([{"type": "remove_topic", "topic_id": ti.topic_id.hex}])

    def check_create_partitions(self, name: str, count: int) -> TopicInfo:
        ti = self.topics.get(name)
        if ti is None:
            raise KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                             f"The topic '{name}' does not exist.")
        if name in RESERVED_TOPICS:
            # Its coordinator maps keys to partitions by the count it created the topic with.
            raise KafkaError(ErrorCode.INVALID_REQUEST,
                             f"Cannot change the partition count of internal topic {name}.")
        if count < ti.partitions:
            raise KafkaError(ErrorCode.INVALID_PARTITIONS,
                             f"Topic currently has {ti.partitions} partitions, which is higher than "
                             f"the requested {count}.")
        if count == ti.partitions:
            raise KafkaError(ErrorCode.INVALID_PARTITIONS,
                             f"Topic already has {ti.partitions} partitions.")
        return ti

    def create_partitions(self, name: str, count: int) -> list[MetadataRecord]:
        return self._emit([self.partitions_record(name, count)])

    def partitions_record(self, name: str, count: int) -> MetadataRecord:
        """The record that grows ``name`` to ``count`` partitions (validated, not applied)."""
        ti = self.check_create_partitions(name, count)
        return {"type": "partitions", "topic_id": ti.topic_id.hex, "partitions": count,
                "first": ti.partitions}

    # -- configs -------------------------------------------------------------------------
    def check_config_change(self, resource_type: int, resource_name: str,
                            changes: Mapping[str, str | None],
                            broker_value: Callable[[str], str | None] | None = None,
                            *, replace: bool = False) -> None:
        """Validate a config change; ``broker_value`` resolves the broker configs that bound
        group configs (built-in defaults if omitted). ``replace``: the changes become the whole
        set of overrides (legacy AlterConfigs)."""
        if resource_type == RESOURCE_GROUP:
            if not resource_name:
                raise KafkaError(ErrorCode.INVALID_REQUEST, "Group id must not be empty")
            current = {} if replace else self.current_overrides(resource_type, resource_name)
            try:
                validate_group_configs(
                    changes, broker_value or (lambda k: BROKER_CONFIGS[k].default), current)
            except ConfigError as e:
                raise KafkaError(ErrorCode.INVALID_CONFIG, str(e)) from None
        elif resource_type == RESOURCE_TOPIC:
            if resource_name not in self.topics:
                raise KafkaError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION,
                                 f"Topic {resource_name} does not exist.")
            if resource_name in RESERVED_TOPICS:
                # Its coordinator chose its retention and segment size (retention must never
                # delete coordinator state); a client may describe but not change them.
                raise KafkaError(ErrorCode.INVALID_REQUEST,
                                 f"Cannot alter the configs of internal topic {resource_name}.")
            try:
                validate_topic_configs(changes)
            except ConfigError as e:
                raise KafkaError(ErrorCode.INVALID_CONFIG, str(e)) from None
            before = self.current_overrides(resource_type, resource_name)
            self._check_tiered_configs(before, apply_config_changes(before, changes, replace))
        elif resource_type == RESOURCE_CLIENT_METRICS:
            # Kafka's ControllerConfigurationValidator: the subscription as it will be.
            current = {} if replace else self.current_overrides(resource_type, resource_name)
            validate_subscription(resource_name, apply_config_changes(current, changes, replace))
        elif resource_type == RESOURCE_BROKER:
            self._check_broker_config_change(resource_name, changes)
        else:
            raise KafkaError(ErrorCode.INVALID_REQUEST,
                             f"Unsupported resource type {resource_type} for config changes")

    @staticmethod
    def _check_broker_config_change(resource_name: str,
                                    changes: Mapping[str, str | None]) -> None:
        """Kafka's DynamicBrokerConfig.validateConfigs, in its order, on the configs a change
        sets (a DELETE is always accepted: the key just leaves the stored set). Every failure
        is INVALID_REQUEST with Kafka's message, as its ConfigAdminManager turns the
        ConfigException into InvalidRequestException (KAFKA-13609 keeps it so)."""
        sets = {k: v for k, v in changes.items() if v is not None}
        static = sorted(k for k in sets if is_static_broker_config(k))
        if static:
            raise KafkaError(ErrorCode.INVALID_REQUEST,
                             f"Cannot update these configs dynamically: {_scala_set(static)}")
        ClusterMetadata._check_listener_ssl_change(resource_name, changes, sets)
        for k, v in sets.items():
            d = BROKER_CONFIGS.get(k)
            if d is None or dynamic_listener_ssl_config(k) is not None:
                continue  # custom (plugin) configs are stored as given; SSL stores are loaded
            try:
                d.value(v)
            except ConfigError as e:
                raise KafkaError(ErrorCode.INVALID_REQUEST, str(e)) from None
        if resource_name == "":
            per_broker = sorted(k for k in sets if k in PER_BROKER_DYNAMIC_CONFIGS)
            if per_broker:
                raise KafkaError(ErrorCode.INVALID_REQUEST,
                                 "Cannot update these configs at default cluster level, broker "
                                 f"id must be specified: {_scala_set(per_broker)}")
        # Kafka would reconfigure these; snakka cannot apply them without a restart, so it
        # refuses rather than store a value that changes nothing (docs/configuration.md).
        unapplied = sorted(
            k for k in sets if k in UNAPPLIED_DYNAMIC_BROKER_CONFIGS
            or (k.startswith(LISTENER_PREFIX) and dynamic_listener_ssl_config(k) is None))
        if unapplied:
            raise KafkaError(ErrorCode.INVALID_REQUEST,
                             "snakka cannot update these configs at run time (set them in "
                             f"server.properties and restart): {_scala_set(unapplied)}")

    @staticmethod
    def _check_listener_ssl_change(resource_name: str, changes: Mapping[str, str | None],
                                   sets: Mapping[str, str] | None = None) -> None:
        """Kafka's DynamicBrokerConfig.validateConfigs for the SSL key and trust store configs
        (INVALID_REQUEST, as Kafka's ConfigAdminManager answers its ConfigException): only per
        listener, and only on one broker's resource, not the cluster default."""
        # Kafka looks at the configs as they will be: deleting an unprefixed one is accepted.
        unprefixed = sorted(k for k in (changes if sets is None else sets)
                            if k in LISTENER_RECONFIGURABLE_SSL_CONFIGS)
        if unprefixed:
            raise KafkaError(ErrorCode.INVALID_REQUEST,
                             "These security configs can be dynamically updated only "
                             # Kafka's filter of a mutable set prints as a HashSet
                             f"per-listener using the listener prefix: "
                             f"HashSet({', '.join(unprefixed)})")
        per_listener = sorted(k for k in changes if dynamic_listener_ssl_config(k) is not None)
        if per_listener and resource_name == "":
            raise KafkaError(ErrorCode.INVALID_REQUEST,
                             "Cannot update these configs at default cluster level, broker id "
                             f"must be specified: Set({', '.join(per_listener)})")

    def alter_configs(self, resource_type: int, resource_name: str,
                      changes: Mapping[str, str | None], *, replace: bool = False,
                      broker_value: Callable[[str], str | None] | None = None) -> list[MetadataRecord]:
        """Apply config changes (None deletes). ``replace`` = legacy AlterConfigs semantics:
        every existing override not named in ``changes`` is removed."""
        self.check_config_change(resource_type, resource_name, changes, broker_value,
                                 replace=replace)
        changes = dict(changes)
        if replace:
            for k in self.current_overrides(resource_type, resource_name):
                changes.setdefault(k, None)
        return self._emit([{"type": "config", "resource_type": resource_type,
                            "resource_name": resource_name, "configs": changes}])

    def set_internal_topic_configs(self, name: str, changes: Mapping[str, str]
                                   ) -> list[MetadataRecord]:
        """Overrides an internal topic's coordinator sets on it (clients cannot: see
        :meth:`check_config_change`), e.g. ``cleanup.policy=compact`` on a
        ``__consumer_offsets`` created before compaction existed. Values are validated."""
        if name not in RESERVED_TOPICS or name not in self.topics:
            raise KafkaError(ErrorCode.INVALID_REQUEST, f"{name} is not an existing internal topic")
        try:
            validate_topic_configs(changes)
        except ConfigError as e:
            raise KafkaError(ErrorCode.INVALID_CONFIG, str(e)) from None
        return self._emit([{"type": "config", "resource_type": RESOURCE_TOPIC,
                            "resource_name": name, "configs": dict(changes)}])

    def current_overrides(self, resource_type: int, resource_name: str) -> dict[str, str]:
        if resource_type == RESOURCE_TOPIC:
            ti = self.topics.get(resource_name)
            return dict(ti.configs) if ti else {}
        return dict(self.dynamic_configs.get((resource_type, resource_name), {}))

    # -- producer ids --------------------------------------------------------------------
    def allocate_producer_id_block(self) -> tuple[list[MetadataRecord], int]:
        """Reserve the next block; returns (records, first id of the block)."""
        start = self.next_producer_id_block
        return self._emit([{"type": "producer_ids", "next": start + PRODUCER_ID_BLOCK_SIZE}]), start

    def set_cluster_id(self, cluster_id: str) -> list[MetadataRecord]:
        return self._emit([{"type": "cluster", "cluster_id": cluster_id}])


def _scala_set(names: list[str]) -> str:
    """``Set(a, b)``: how Kafka's messages print a set of config names."""
    return f"Set({', '.join(names)})"


def state_records(md: ClusterMetadata) -> list[MetadataRecord]:
    """Records that rebuild ``md``'s replayed state from nothing (a snapshot of it, in the
    order of Kafka's MetadataImage.write: features, topics, configs, quotas, producer ids,
    ACLs, SCRAM credentials). The cluster id is not state of the log (meta.properties)."""
    out: list[MetadataRecord] = [{"type": "feature_level", "name": n, "level": lvl}
                                 for n, lvl in md.features.items()]
    for ti in md.topics.values():
        out.append({"type": "topic", "name": ti.name, "topic_id": ti.topic_id.hex,
                    "partitions": ti.partitions, "configs": dict(ti.configs)})
    for (rtype, rname), configs in md.dynamic_configs.items():
        if configs:
            out.append({"type": "config", "resource_type": rtype, "resource_name": rname,
                        "configs": dict(configs)})
    for entity, values in md.client_quotas.quotas.items():
        for key, value in values.items():
            out.append({"type": _client_quotas.RECORD, "entity": [list(p) for p in entity],
                        "key": key, "value": value, "remove": False})
    if md.next_producer_id_block:
        out.append({"type": "producer_ids", "next": md.next_producer_id_block})
    for acl_id, acl in md.acls.acls(AclBindingFilter()):
        out.append(acl.to_record(acl_id))
    for user, creds in md.scram.users.items():
        for mech, cred in creds.items():
            out.append({"type": _scram.RECORD, "name": user, "mechanism": int(mech),
                        "salt": cred.salt.hex(), "stored_key": cred.stored_key.hex(),
                        "server_key": cred.server_key.hex(), "iterations": cred.iterations})
    return out


__all__ = [
    "ClusterMetadata", "TopicInfo", "random_topic_id",
    "validate_topic_name", "RESOURCE_TOPIC", "RESOURCE_BROKER", "RESOURCE_GROUP",
    "RESOURCE_CLIENT_METRICS", "INTERNAL_TOPICS",
    "RESERVED_TOPICS", "CLUSTER_METADATA_TOPIC", "check_client_topic",
    "TOPIC_CONFIGS", "PRODUCER_ID_BLOCK_SIZE", "state_records",
]
