"""The console's administration: ACLs, SCRAM users, topic creation, deletion, configs and
partitions, client quotas, as plain data and :class:`ActionResult`s (console/admin_pages.py
renders them, the ``/api/...`` endpoints return them as they are).

Every read and every change is a Kafka request answered by the broker's own handler, as the
console user's principal (console/kafka.py), so Kafka's authorization applies unchanged:

- ACLs: DescribeAcls (DESCRIBE on the cluster), CreateAcls and DeleteAcls (ALTER on the
  cluster); without ``authorizer.class.name`` the broker answers SECURITY_DISABLED, shown as is;
- SCRAM users: DescribeUserScramCredentials (mechanisms and iterations, never a salt or key;
  DESCRIBE on the cluster) and AlterUserScramCredentials (ALTER on the cluster). An upsertion
  carries a fresh random salt and the salted password computed here with util/scram.py, as
  Kafka's AdminClient (and snakka's client/admin.py) does: the password itself never reaches
  the metadata log. PBKDF2 runs in a worker thread, off the broker's event loop. PLAIN users
  of the listeners' JAAS lines are listed by name only, to users who may DESCRIBE the cluster;
- topics: CreateTopics (CREATE on the cluster or the topic), DeleteTopics (DELETE on the
  topic), IncrementalAlterConfigs SET/DELETE (ALTER_CONFIGS on the topic), CreatePartitions
  (ALTER on the topic);
- client quotas: DescribeClientQuotas (DESCRIBE_CONFIGS on the cluster), AlterClientQuotas
  (ALTER_CONFIGS on the cluster);
- broker configs: DescribeConfigs of the BROKER resource named by this node's id (every config
  with its source) and of the cluster-wide default entity (the empty name: only the dynamic
  defaults set), DESCRIBE_CONFIGS on the cluster; IncrementalAlterConfigs SET/DELETE on either
  (ALTER_CONFIGS on the cluster), as ``kafka-configs.sh --entity-type brokers --entity-name N``
  or ``--entity-default``. Which configs may change at run time, and the error when one may
  not, are the broker's (the console offers the dynamic ones, marked ``read_only`` false).

Form values are validated here before a request is built: an ACL code Kafka cannot parse
(UNKNOWN) would make the handler close a client's connection, so the console refuses it with
a message instead.
"""

from __future__ import annotations

import asyncio
import secrets
from typing import Any

from snakka.console.data import _CONFIG_SOURCES, ActionResult, ConsoleData, Viewer, _err_name
from snakka.protocol.acls import AclOperation, AclPermissionType, PatternType, ResourceType
from snakka.protocol.api_keys import ApiKey
from snakka.protocol.messages.alter_client_quotas_request import (
    AlterClientQuotasRequest,
    EntityData,
    EntryData,
    OpData,
)
from snakka.protocol.messages.alter_user_scram_credentials_request import (
    AlterUserScramCredentialsRequest,
    ScramCredentialDeletion,
    ScramCredentialUpsertion,
)
from snakka.protocol.messages.create_acls_request import AclCreation, CreateAclsRequest
from snakka.protocol.messages.create_partitions_request import (
    CreatePartitionsRequest,
    CreatePartitionsTopic,
)
from snakka.protocol.messages.create_topics_request import (
    CreatableTopic,
    CreatableTopicConfig,
    CreateTopicsRequest,
)
from snakka.protocol.messages.delete_acls_request import DeleteAclsFilter, DeleteAclsRequest
from snakka.protocol.messages.delete_topics_request import DeleteTopicsRequest, DeleteTopicState
from snakka.protocol.messages.describe_acls_request import DescribeAclsRequest
from snakka.protocol.messages.describe_client_quotas_request import DescribeClientQuotasRequest
from snakka.protocol.messages.describe_configs_request import (
    DescribeConfigsRequest,
    DescribeConfigsResource,
)
from snakka.protocol.messages.describe_user_scram_credentials_request import (
    DescribeUserScramCredentialsRequest,
)
from snakka.protocol.messages.incremental_alter_configs_request import (
    AlterableConfig,
    AlterConfigsResource,
    IncrementalAlterConfigsRequest,
)
from snakka.security.authorizer import CLUSTER_NAME
from snakka.util.scram import MAX_ITERATIONS, MIN_ITERATIONS, ScramMechanism, salted_password

__all__ = ["AclForm", "BROKER_CONFIG_SCOPES", "ConsoleAdmin", "QUOTA_ENTITY_TYPES",
           "SCRAM_MECHANISMS"]

# What the forms offer (Kafka's names).
SCRAM_MECHANISMS = ("SCRAM-SHA-256", "SCRAM-SHA-512")
QUOTA_ENTITY_TYPES = ("user", "client-id", "ip")
# Bytes of the random salt of a new SCRAM credential (as snakka's client/admin.py; Kafka's
# AdminClient draws its salt from SecureRandom too, and the broker accepts any non-empty salt).
CONSOLE_SCRAM_SALT_BYTES = 32
# A topic created without a partition count gets the broker's num.partitions (-1 on the wire).
_DEFAULT = -1
_TIMEOUT_MS = 30000
_SET, _DELETE = 0, 1  # IncrementalAlterConfigs operations
_RESOURCE_TOPIC, _RESOURCE_BROKER = 2, 4  # ConfigResource types
_DEFAULT_CONFIG = 5  # DescribeConfigs' ConfigSource of a built-in default
# Where a broker config change applies: this broker (the BROKER resource named by its node id,
# source DYNAMIC_BROKER_CONFIG) or every broker (the empty name, DYNAMIC_DEFAULT_BROKER_CONFIG).
BROKER_CONFIG_SCOPES = ("broker", "default")


class AclForm:
    """An ACL binding (or filter) as typed in a form, parsed into Kafka's codes; ``problem``
    says what is wrong with it (None: it parsed)."""

    def __init__(self, form: dict[str, str], *, as_filter: bool = False) -> None:
        self.problem: str | None = None
        self.resource_type = self._enum(ResourceType, form.get("resource_type"),
                                        "ANY" if as_filter else None)
        self.pattern_type = self._enum(PatternType, form.get("pattern_type"),
                                       "ANY" if as_filter else "LITERAL")
        self.operation = self._enum(AclOperation, form.get("operation"),
                                    "ANY" if as_filter else None)
        self.permission_type = self._enum(AclPermissionType, form.get("permission_type"),
                                          "ANY" if as_filter else "ALLOW")
        name = (form.get("resource_name") or "").strip()
        principal = (form.get("principal") or "").strip()
        host = (form.get("host") or "").strip()
        if as_filter:
            self.resource_name: str | None = name or None
            self.principal: str | None = principal or None
            self.host: str | None = host or None
        else:
            if self.resource_type is ResourceType.CLUSTER and not name:
                name = CLUSTER_NAME
            self.resource_name = name
            self.principal = principal
            self.host = host or "*"
            if self.problem is None and not name:
                self.problem = "a resource name is required (* for every resource)"
            if self.problem is None and ":" not in principal:
                self.problem = "a principal is Type:name, e.g. User:alice (User:* for all)"

    def _enum(self, cls: Any, text: str | None, default: str | None) -> Any:
        text = (text or "").strip() or default
        if text is None:
            self.problem = self.problem or f"{cls.__name__} is required"
            return cls(0)
        try:
            value = cls.parse(text)
        except ValueError as e:
            self.problem = self.problem or str(e)
            return cls(0)
        if value == 0:  # UNKNOWN: Kafka cannot parse it (the handler would close the link)
            self.problem = self.problem or f"{cls.__name__} UNKNOWN is not a valid choice"
        return value

    def binding(self) -> dict[str, Any]:
        return {"resource_type": self.resource_type.name, "resource_name": self.resource_name,
                "pattern_type": self.pattern_type.name, "principal": self.principal,
                "host": self.host, "operation": self.operation.name,
                "permission_type": self.permission_type.name}


def _acl_text(a: AclForm) -> str:
    return (f"{a.permission_type.name} {a.principal} {a.operation.name} from {a.host} on "
            f"{a.resource_type.name} {a.pattern_type.name} {a.resource_name!r}")


class ConsoleAdmin:
    """Administration reads and actions of one console (through ``data``'s handlers)."""

    def __init__(self, data: ConsoleData, plain_users: list[str]) -> None:
        self.data = data
        self.plain_users = sorted(plain_users)

    async def _call(self, viewer: Viewer, api: ApiKey, version: int, request: Any) -> Any:
        return await self.data._call(viewer, api, version, request)

    def _can(self, viewer: Viewer, op: AclOperation) -> bool:
        return self.data.allowed(viewer, op, ResourceType.CLUSTER, CLUSTER_NAME)

    # -- ACLs ----------------------------------------------------------------------------
    async def acls(self, viewer: Viewer, query: dict[str, str]) -> dict[str, Any]:
        """The ACL bindings DescribeAcls answers for the filter in ``query`` (resource_type,
        resource_name, pattern_type (ANY, MATCH, LITERAL, PREFIXED), principal, host,
        operation, permission_type; each ANY / any when absent)."""
        flt = AclForm(query, as_filter=True)
        out: dict[str, Any] = {"filter": flt.binding(), "acls": [], "error": None,
                               "can_alter": self._can(viewer, AclOperation.ALTER)}
        if flt.problem is not None:
            out["error"] = flt.problem
            return out
        resp = await self._call(viewer, ApiKey.DESCRIBE_ACLS, 3, DescribeAclsRequest(
            resource_type_filter=int(flt.resource_type), resource_name_filter=flt.resource_name,
            pattern_type_filter=int(flt.pattern_type), principal_filter=flt.principal,
            host_filter=flt.host, operation=int(flt.operation),
            permission_type=int(flt.permission_type)))
        if resp.error_code:
            out["error"] = f"{_err_name(resp.error_code)}: {resp.error_message or ''}".rstrip(
                ": ")
            return out
        rows = [{"resource_type": ResourceType.from_code(r.resource_type).name,
                 "resource_name": r.resource_name,
                 "pattern_type": PatternType.from_code(r.pattern_type).name,
                 "principal": a.principal, "host": a.host,
                 "operation": AclOperation.from_code(a.operation).name,
                 "permission_type": AclPermissionType.from_code(a.permission_type).name}
                for r in resp.resources for a in r.acls]
        rows.sort(key=lambda r: (r["resource_type"], r["resource_name"], r["pattern_type"],
                                 r["principal"], r["host"], r["operation"],
                                 r["permission_type"]))
        out["acls"] = rows
        return out

    async def create_acl(self, viewer: Viewer, form: dict[str, str]) -> ActionResult:
        a = AclForm(form)
        if a.problem is not None:
            return ActionResult(False, a.problem, "INVALID_REQUEST")
        resp = await self._call(viewer, ApiKey.CREATE_ACLS, 3, CreateAclsRequest(creations=[
            AclCreation(resource_type=int(a.resource_type), resource_name=a.resource_name,
                        resource_pattern_type=int(a.pattern_type), principal=a.principal,
                        host=a.host, operation=int(a.operation),
                        permission_type=int(a.permission_type))]))
        r = resp.results[0]
        if r.error_code:
            return _refused(r.error_code, r.error_message)
        return ActionResult(True, f"created ACL: {_acl_text(a)}")

    async def delete_acl(self, viewer: Viewer, form: dict[str, str]) -> ActionResult:
        """DeleteAcls with a filter naming one binding exactly (every field given)."""
        a = AclForm(form)
        if a.problem is None and (
                "ANY" in (a.resource_type.name, a.operation.name, a.permission_type.name)
                or a.pattern_type.name in ("ANY", "MATCH")):
            # ANY / MATCH would make the filter match many bindings: this form deletes one.
            a.problem = "deleting one ACL names it exactly (no ANY or MATCH)"
        if a.problem is not None:
            return ActionResult(False, a.problem, "INVALID_REQUEST")
        resp = await self._call(viewer, ApiKey.DELETE_ACLS, 3, DeleteAclsRequest(filters=[
            DeleteAclsFilter(resource_type_filter=int(a.resource_type),
                             resource_name_filter=a.resource_name,
                             pattern_type_filter=int(a.pattern_type),
                             principal_filter=a.principal, host_filter=a.host,
                             operation=int(a.operation),
                             permission_type=int(a.permission_type))]))
        r = resp.filter_results[0]
        if r.error_code:
            return _refused(r.error_code, r.error_message)
        if not r.matching_acls:
            return ActionResult(False, f"no such ACL: {_acl_text(a)}", "RESOURCE_NOT_FOUND")
        return ActionResult(True, f"deleted ACL: {_acl_text(a)}")

    # -- users ---------------------------------------------------------------------------
    async def users(self, viewer: Viewer) -> dict[str, Any]:
        """SCRAM users with their mechanisms and iteration counts (never salts or keys), and
        the PLAIN users of the JAAS config by name (to those who may DESCRIBE the cluster)."""
        out: dict[str, Any] = {"scram": [], "error": None, "plain": [],
                               "can_alter": self._can(viewer, AclOperation.ALTER),
                               "mechanisms": list(SCRAM_MECHANISMS),
                               "min_iterations": MIN_ITERATIONS,
                               "max_iterations": MAX_ITERATIONS}
        resp = await self._call(viewer, ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS, 0,
                                DescribeUserScramCredentialsRequest(users=None))
        if resp.error_code:
            out["error"] = _err_name(resp.error_code)
            return out
        out["plain"] = self.plain_users
        out["scram"] = [{"user": r.user, "error": _err_name(r.error_code) if r.error_code
                         else None,
                         "credentials": [{"mechanism": ScramMechanism(c.mechanism)
                                          .mechanism_name, "iterations": c.iterations}
                                         for c in r.credential_infos]}
                        for r in sorted(resp.results, key=lambda r: r.user)]
        return out

    async def upsert_user(self, viewer: Viewer, name: str, mechanism: str, password: str,
                          iterations: int | None) -> ActionResult:
        """Add or change ``name``'s credential: AlterUserScramCredentials with a fresh salt
        and the salted password (the password stays in this process)."""
        mech = ScramMechanism.from_mechanism_name(mechanism)
        if mech is ScramMechanism.UNKNOWN:
            return ActionResult(False, f"unknown mechanism {mechanism!r}",
                                "UNSUPPORTED_SASL_MECHANISM")
        if not name:
            return ActionResult(False, "a user name is required", "INVALID_REQUEST")
        if not password:
            return ActionResult(False, "a password is required", "INVALID_REQUEST")
        iters = MIN_ITERATIONS if iterations is None else iterations
        if not MIN_ITERATIONS <= iters <= MAX_ITERATIONS:
            # Still sent: the broker answers with Kafka's own error and message. PBKDF2 of a
            # bounded count only (a huge number would occupy a thread for nothing).
            iters = max(1, min(iters, MAX_ITERATIONS + 1))
        salt = secrets.token_bytes(CONSOLE_SCRAM_SALT_BYTES)
        salted = await asyncio.get_running_loop().run_in_executor(
            None, salted_password, mech, password.encode(), salt, iters)
        resp = await self._call(viewer, ApiKey.ALTER_USER_SCRAM_CREDENTIALS, 0,
                                AlterUserScramCredentialsRequest(deletions=[], upsertions=[
                                    ScramCredentialUpsertion(
                                        name=name, mechanism=int(mech), iterations=iters,
                                        salt=salt, salted_password=salted)]))
        r = resp.results[0]
        if r.error_code:
            return _refused(r.error_code, r.error_message)
        return ActionResult(True, f"set the {mech.mechanism_name} credential of {name} "
                                  f"({iters} iterations)")

    async def delete_user(self, viewer: Viewer, name: str, mechanism: str) -> ActionResult:
        mech = ScramMechanism.from_mechanism_name(mechanism)
        if mech is ScramMechanism.UNKNOWN:
            return ActionResult(False, f"unknown mechanism {mechanism!r}",
                                "UNSUPPORTED_SASL_MECHANISM")
        resp = await self._call(viewer, ApiKey.ALTER_USER_SCRAM_CREDENTIALS, 0,
                                AlterUserScramCredentialsRequest(upsertions=[], deletions=[
                                    ScramCredentialDeletion(name=name, mechanism=int(mech))]))
        r = resp.results[0]
        if r.error_code:
            return _refused(r.error_code, r.error_message)
        return ActionResult(True, f"deleted the {mech.mechanism_name} credential of {name}")

    # -- topics --------------------------------------------------------------------------
    async def create_topic(self, viewer: Viewer, name: str, partitions: int | None,
                           configs: dict[str, str]) -> ActionResult:
        """CreateTopics (replication factor: the broker's default; partitions: given, or
        num.partitions)."""
        resp = await self._call(viewer, ApiKey.CREATE_TOPICS, 7, CreateTopicsRequest(
            topics=[CreatableTopic(
                name=name, num_partitions=_DEFAULT if partitions is None else partitions,
                replication_factor=_DEFAULT, assignments=[],
                configs=[CreatableTopicConfig(name=k, value=v) for k, v in configs.items()])],
            timeout_ms=_TIMEOUT_MS, validate_only=False))
        t = resp.topics[0]
        if t.error_code:
            return _refused(t.error_code, t.error_message)
        return ActionResult(True, f"created topic {name} with {t.num_partitions} "
                                  f"partition(s)")

    async def delete_topic(self, viewer: Viewer, name: str) -> ActionResult:
        resp = await self._call(viewer, ApiKey.DELETE_TOPICS, 6, DeleteTopicsRequest(
            topics=[DeleteTopicState(name=name)], timeout_ms=_TIMEOUT_MS))
        r = resp.responses[0]
        if r.error_code:
            return _refused(r.error_code, r.error_message)
        return ActionResult(True, f"deleted topic {name}")

    async def alter_topic_config(self, viewer: Viewer, name: str, key: str,
                                 value: str | None) -> ActionResult:
        """IncrementalAlterConfigs on the topic: SET ``key`` to ``value``, or DELETE the
        override (back to the broker's or the default value) when ``value`` is None."""
        if not key:
            return ActionResult(False, "a config name is required", "INVALID_REQUEST")
        op = _SET if value is not None else _DELETE
        resp = await self._call(viewer, ApiKey.INCREMENTAL_ALTER_CONFIGS, 1,
                                IncrementalAlterConfigsRequest(resources=[AlterConfigsResource(
                                    resource_type=_RESOURCE_TOPIC, resource_name=name, configs=[
                                        AlterableConfig(name=key, config_operation=op,
                                                        value=value)])],
                                    validate_only=False))
        r = resp.responses[0]
        if r.error_code:
            return _refused(r.error_code, r.error_message)
        if value is None:
            return ActionResult(True, f"removed the override of {key}")
        return ActionResult(True, f"set {key}={value}")

    async def add_partitions(self, viewer: Viewer, name: str, total: int) -> ActionResult:
        """CreatePartitions: grow the topic to ``total`` partitions."""
        resp = await self._call(viewer, ApiKey.CREATE_PARTITIONS, 3, CreatePartitionsRequest(
            topics=[CreatePartitionsTopic(name=name, count=total, assignments=None)],
            timeout_ms=_TIMEOUT_MS, validate_only=False))
        r = resp.results[0]
        if r.error_code:
            return _refused(r.error_code, r.error_message)
        return ActionResult(True, f"{name} now has {total} partitions")

    # -- client quotas -------------------------------------------------------------------
    async def quotas(self, viewer: Viewer) -> dict[str, Any]:
        """Every client quota (DescribeClientQuotas with no filter)."""
        out: dict[str, Any] = {"quotas": [], "error": None,
                               "can_alter": self._can(viewer, AclOperation.ALTER_CONFIGS),
                               "entity_types": list(QUOTA_ENTITY_TYPES)}
        resp = await self._call(viewer, ApiKey.DESCRIBE_CLIENT_QUOTAS, 1,
                                DescribeClientQuotasRequest(components=[], strict=False))
        if resp.error_code:
            out["error"] = f"{_err_name(resp.error_code)}: {resp.error_message or ''}".rstrip(
                ": ")
            return out
        rows = []
        for entry in resp.entries or []:
            entity = {e.entity_type: e.entity_name for e in entry.entity}
            for v in entry.values:
                rows.append({"entity": entity, "key": v.key, "value": v.value})
        rows.sort(key=lambda r: (sorted((k, v or "") for k, v in r["entity"].items()),
                                 r["key"]))
        out["quotas"] = rows
        return out

    async def alter_quota(self, viewer: Viewer, entity_type: str, entity_name: str | None,
                          key: str, value: float | None) -> ActionResult:
        """AlterClientQuotas of one entity (``entity_name`` None: the default entity of that
        type): set ``key`` to ``value``, or remove it when ``value`` is None."""
        if entity_type not in QUOTA_ENTITY_TYPES:
            return ActionResult(False, f"entity type is one of {', '.join(QUOTA_ENTITY_TYPES)}",
                                "INVALID_REQUEST")
        if not key:
            return ActionResult(False, "a quota name is required", "INVALID_REQUEST")
        resp = await self._call(viewer, ApiKey.ALTER_CLIENT_QUOTAS, 1, AlterClientQuotasRequest(
            entries=[EntryData(entity=[EntityData(entity_type=entity_type,
                                                  entity_name=entity_name)],
                               ops=[OpData(key=key, value=value or 0.0,
                                           remove=value is None)])],
            validate_only=False))
        r = resp.entries[0]
        if r.error_code:
            return _refused(r.error_code, r.error_message)
        who = f"{entity_type} {entity_name if entity_name is not None else '<default>'}"
        if value is None:
            return ActionResult(True, f"removed {key} of {who}")
        shown = f"{int(value)}" if value.is_integer() else f"{value}"
        return ActionResult(True, f"set {key}={shown} for {who}")

    # -- broker configs ------------------------------------------------------------------
    async def broker(self, viewer: Viewer) -> dict[str, Any]:
        """This broker's configs (value, source, whether dynamic, synonyms; sensitive values
        never) and the cluster-wide dynamic defaults: one DescribeConfigs of both BROKER
        resources, as ``kafka-configs.sh --describe --entity-type brokers --entity-name N
        --all`` and ``--entity-default``. A refusal (CLUSTER_AUTHORIZATION_FAILED without
        DESCRIBE_CONFIGS on the cluster) takes the tables' place."""
        node = str(self.data.services.node_id)
        out: dict[str, Any] = {"node_id": self.data.services.node_id, "configs": [],
                               "defaults": [], "error": None,
                               "can_alter": self._can(viewer, AclOperation.ALTER_CONFIGS),
                               "scopes": list(BROKER_CONFIG_SCOPES)}
        resp = await self._call(viewer, ApiKey.DESCRIBE_CONFIGS, 4, DescribeConfigsRequest(
            resources=[DescribeConfigsResource(resource_type=_RESOURCE_BROKER,
                                               resource_name=name, configuration_keys=None)
                       for name in (node, "")],
            include_synonyms=True, include_documentation=False))
        for r in resp.results:
            if r.error_code:
                out["error"] = _refused(r.error_code, r.error_message).message
                out["configs"], out["defaults"] = [], []
                return out
            rows = [_config_row(c) for c in sorted(r.configs, key=lambda c: c.name)]
            out["configs" if r.resource_name else "defaults"] = rows
        return out

    async def alter_broker_config(self, viewer: Viewer, scope: str, key: str,
                                  value: str | None) -> ActionResult:
        """IncrementalAlterConfigs on this broker (``scope`` "broker") or on the cluster-wide
        default entity ("default"): SET ``key`` to ``value``, or DELETE it (None). The broker
        judges the rest: a config it cannot change at run time, a bad value, authorization."""
        if scope not in BROKER_CONFIG_SCOPES:
            return ActionResult(False, f"scope is one of {', '.join(BROKER_CONFIG_SCOPES)}",
                                "INVALID_REQUEST")
        if not key:
            return ActionResult(False, "a config name is required", "INVALID_REQUEST")
        node = self.data.services.node_id
        name = str(node) if scope == "broker" else ""
        op = _SET if value is not None else _DELETE
        resp = await self._call(viewer, ApiKey.INCREMENTAL_ALTER_CONFIGS, 1,
                                IncrementalAlterConfigsRequest(resources=[AlterConfigsResource(
                                    resource_type=_RESOURCE_BROKER, resource_name=name,
                                    configs=[AlterableConfig(name=key, config_operation=op,
                                                             value=value)])],
                                    validate_only=False))
        r = resp.responses[0]
        if r.error_code:
            return _refused(r.error_code, r.error_message)
        where = f"broker {node}" if scope == "broker" else "the cluster-wide default"
        if value is None:
            return ActionResult(True, f"removed {key} of {where}")
        return ActionResult(True, f"set {key}={value} for {where}")


def _config_row(c: Any) -> dict[str, Any]:
    """One DescribeConfigs entry for the page: never a sensitive value (the broker sends none;
    the synonyms' are dropped here too)."""
    return {"name": c.name, "value": None if c.is_sensitive else c.value,
            "source": _CONFIG_SOURCES.get(c.config_source, "UNKNOWN"),
            "default": c.config_source == _DEFAULT_CONFIG, "sensitive": c.is_sensitive,
            "read_only": c.read_only, "dynamic": not c.read_only,
            "synonyms": [{"source": _CONFIG_SOURCES.get(s.source, "UNKNOWN"), "name": s.name,
                          "value": None if c.is_sensitive else s.value}
                         for s in c.synonyms]}


def _refused(code: int, message: str | None) -> ActionResult:
    name = _err_name(code)
    return ActionResult(False, f"{name}: {message}" if message else name, name)
