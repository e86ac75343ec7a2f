"""ACLs and Kafka's StandardAuthorizer (``org.apache.kafka.metadata.authorizer``).

What it owns, all sans-I/O (no sockets, no files, no clock):

- :class:`StandardAcl`: one ACL binding (resource type, name, pattern type LITERAL/PREFIXED;
  principal, host, operation, permission ALLOW/DENY), and its metadata record, shaped like
  KRaft's ``AccessControlEntryRecord`` (``RemoveAccessControlEntryRecord`` removes one by id).
- :class:`AclBindingFilter`: the filters of DescribeAcls / DeleteAcls, with Kafka's matching
  rules (``ResourcePatternFilter.matches`` / ``AccessControlEntryFilter.matches``): ANY pattern
  type compares names exactly, MATCH selects every ACL that applies to the named resource.
- :class:`AclCache`: the ACLs by id and indexed for authorization (Kafka's AclCache and the
  sorted set StandardAuthorizerData scans). The cluster metadata (metadata.core) owns one and
  replays the ACL records into it, so the authorizer, reading the same object, is up to date
  the moment a record is applied: at start-up (replay) and after CreateAcls / DeleteAcls.
- the validation the ACL APIs apply, as the reference Kafka 4.0 answers (checked by
  tests/reference/test_acls_reference.py): a code of 0 (UNKNOWN) anywhere in a binding or
  filter fails Kafka's request parsing and closes the connection (:func:`unparseable`); ANY or
  MATCH where a CreateAcls binding needs a value makes Kafka's AclBinding constructor throw,
  failing the whole request with UNKNOWN_SERVER_ERROR (:func:`binding_refused`); everything
  else is INVALID_REQUEST per binding with Kafka's message (:func:`check_new_acl`: AclApis and
  AclControlManager.validateNewAcl) or per DeleteAcls filter (:func:`check_delete_filter`).
- :class:`StandardAuthorizer`: Kafka's decision rules, in this order: a ``super.users``
  principal is allowed everything; else every ACL that applies to the resource is examined
  (literal name, the literal wildcard ``*``, PREFIXED ACLs whose name is a prefix of it); an ACL
  matches when its principal is the request's principal or ``User:*``, its host ``*`` or the
  client's address, and its operation the action's, ALL, or (ALLOW ACLs only) one implying it:
  DESCRIBE is implied by READ, WRITE, DELETE and ALTER, DESCRIBE_CONFIGS by ALTER_CONFIGS. A
  matching DENY wins over any ALLOW; a matching ALLOW allows; no match denies when the resource
  has ACLs, and gives ``allow.everyone.if.no.acl.found`` (default false: denied) when it has
  none at all.

Efficiency: the index is per resource type a dict of literal names and one of prefixes plus
the set of prefix lengths in use, so one decision costs a few dict lookups (literal, ``*``, one
per distinct prefix length), not a scan of every ACL: a Metadata request for thousands of
topics stays linear in the topics.

Audit log: logger ``snakka.authorizer`` (Kafka's ``kafka.authorizer.logger``): a denial of an
action with ``log_if_denied`` is one INFO line, an allowed action with ``log_if_allowed`` one
DEBUG line, in Kafka's words (principal, operation, host, resource, request). Never ERROR: a
denial is the authorizer working.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from snakka.protocol.acls import (
    WILDCARD,
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    PatternType,
    ResourceType,
)
from snakka.protocol.errors import ErrorCode, KafkaError
from snakka.security.authorizer import (
    CLUSTER_NAME,
    Action,
    AllowAllAuthorizer,
    AuthorizationResult,
    Authorizer,
    ResourcePattern,
)

__all__ = [
    "STANDARD_AUTHORIZER_CLASSES", "WILDCARD", "WILDCARD_PRINCIPAL", "AclBindingFilter",
    "AclCache", "StandardAcl", "StandardAuthorizer", "binding_refused", "check_delete_filter",
    "check_new_acl", "create_authorizer", "filter_from_codes", "find_result",
    "parse_super_users", "unparseable", "validate_new_acl",
]

audit_log = logging.getLogger("snakka.authorizer")

# The principal of ACLs for every principal.
WILDCARD_PRINCIPAL = "User:*"

# ``authorizer.class.name`` values that select this authorizer: Kafka's KRaft class, and ours.
STANDARD_AUTHORIZER_CLASSES = frozenset({
    "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
    "snakka.security.StandardAuthorizer",
})

_ALLOWED = AuthorizationResult.ALLOWED
_DENIED = AuthorizationResult.DENIED
_ALLOW = AclPermissionType.ALLOW
_ALL = AclOperation.ALL
_DESCRIBE = AclOperation.DESCRIBE
_DESCRIBE_CONFIGS = AclOperation.DESCRIBE_CONFIGS
# What an ALLOW ACL for the key also allows (Kafka's IMPLIES_DESCRIBE / _DESCRIBE_CONFIGS);
# a DENY ACL denies only its own operation (or everything, for ALL).
_IMPLIES_DESCRIBE = frozenset({AclOperation.DESCRIBE, AclOperation.READ, AclOperation.WRITE,
                               AclOperation.DELETE, AclOperation.ALTER})
_IMPLIES_DESCRIBE_CONFIGS = frozenset({AclOperation.DESCRIBE_CONFIGS, AclOperation.ALTER_CONFIGS})

# Kafka's SecurityUtils.resourceTypeName: how the audit log names a resource type.
_RESOURCE_TYPE_NAMES = {
    ResourceType.TOPIC: "Topic", ResourceType.GROUP: "Group", ResourceType.CLUSTER: "Cluster",
    ResourceType.TRANSACTIONAL_ID: "TransactionalId",
    ResourceType.DELEGATION_TOKEN: "DelegationToken", ResourceType.USER: "User",
}


@dataclass(frozen=True, slots=True)
class StandardAcl(AclBinding):
    """One ACL as the authorizer keeps it (Kafka's StandardAcl): an AclBinding that knows its
    metadata record."""

    def to_record(self, acl_id: str) -> dict[str, Any]:
        """The metadata record that adds it (KRaft's AccessControlEntryRecord)."""
        return {"type": "acl", "id": acl_id, "resource_type": int(self.resource_type),
                "resource_name": self.resource_name, "pattern_type": int(self.pattern_type),
                "principal": self.principal, "host": self.host,
                "operation": int(self.operation), "permission_type": int(self.permission_type)}

    @classmethod
    def from_record(cls, rec: Mapping[str, Any]) -> StandardAcl:
        return cls(ResourceType(int(rec["resource_type"])), str(rec["resource_name"]),
                   PatternType(int(rec["pattern_type"])), str(rec["principal"]),
                   str(rec["host"]), AclOperation(int(rec["operation"])),
                   AclPermissionType(int(rec["permission_type"])))

    def __str__(self) -> str:
        return (f"StandardAcl(resourceType={self.resource_type.name}, "
                f"resourceName={self.resource_name}, patternType={self.pattern_type.name}, "
                f"principal={self.principal}, host={self.host}, "
                f"op={self.operation.name}, permissionType={self.permission_type.name})")


def remove_record(acl_id: str) -> dict[str, Any]:
    """The metadata record that removes ACL ``acl_id`` (RemoveAccessControlEntryRecord)."""
    return {"type": "remove_acl", "id": acl_id}


def new_acl_id() -> str:
    """A fresh ACL id (Kafka uses a random Uuid too)."""
    return uuid.uuid4().hex


# -- validation (CreateAcls, DescribeAcls, DeleteAcls) -----------------------------------------

def unparseable(*codes: int) -> str | None:
    """Why Kafka cannot parse an ACL request whose binding or filter has these codes (resource
    type, pattern type, operation, permission type): a code of exactly 0 (UNKNOWN) makes the
    request's constructor throw and Kafka closes the connection. None: it parses. (Codes Kafka
    does not know, e.g. 42, read as UNKNOWN later and get an error code instead.)"""
    names = ("resource type", "pattern type", "operation", "permission type")
    for what, code in zip(names, codes, strict=True):
        if code == 0:
            return f"{what} UNKNOWN (0)"
    return None


def binding_refused(resource_type: int, pattern_type: int, operation: int,
                    permission_type: int) -> str | None:
    """Why Kafka cannot even build this CreateAcls binding (None: it can): ANY as resource
    type, operation or permission, ANY or MATCH as pattern type. Kafka's AclBinding
    constructors throw inside the handler, so the whole request is answered
    UNKNOWN_SERVER_ERROR."""
    if resource_type == ResourceType.ANY:
        return "resource type ANY"
    if pattern_type in (PatternType.ANY, PatternType.MATCH):
        return f"pattern type {PatternType(pattern_type).name}"
    if operation == AclOperation.ANY:
        return "operation ANY"
    if permission_type == AclPermissionType.ANY:
        return "permission type ANY"
    return None


def check_new_acl(resource_type: int, resource_name: str, pattern_type: int, principal: str,
                  host: str, operation: int, permission_type: int) -> StandardAcl:
    """A CreateAcls binding (wire codes) as an ACL, or KafkaError(INVALID_REQUEST) with Kafka's
    message: AclApis' checks first, then AclControlManager.validateNewAcl's."""
    rtype = ResourceType.from_code(resource_type)
    ptype = PatternType.from_code(pattern_type)
    op = AclOperation.from_code(operation)
    perm = AclPermissionType.from_code(permission_type)
    if rtype == ResourceType.CLUSTER and resource_name != CLUSTER_NAME:
        raise KafkaError(ErrorCode.INVALID_REQUEST,
                         f"The only valid name for the CLUSTER resource is {CLUSTER_NAME}")
    if not resource_name:
        raise KafkaError(ErrorCode.INVALID_REQUEST, "Invalid empty resource name")
    if rtype in (ResourceType.UNKNOWN, ResourceType.ANY):
        raise KafkaError(ErrorCode.INVALID_REQUEST, f"Invalid resourceType {rtype.name}")
    if ptype not in (PatternType.LITERAL, PatternType.PREFIXED):
        raise KafkaError(ErrorCode.INVALID_REQUEST, f"Invalid patternType {ptype.name}")
    if op in (AclOperation.UNKNOWN, AclOperation.ANY):
        raise KafkaError(ErrorCode.INVALID_REQUEST, f"Invalid operation {op.name}")
    if perm not in (AclPermissionType.ALLOW, AclPermissionType.DENY):
        raise KafkaError(ErrorCode.INVALID_REQUEST, f"Invalid permissionType {perm.name}")
    if ":" not in principal:
        raise KafkaError(ErrorCode.INVALID_REQUEST,
                         f"Could not parse principal from `{principal}` (no colon is "
                         "present separating the principal type from the principal name)")
    return StandardAcl(ResourceType(rtype), resource_name, PatternType(ptype), principal, host,
                       AclOperation(op), AclPermissionType(perm))


def validate_new_acl(acl: StandardAcl) -> None:
    """:func:`check_new_acl` of an ACL already built (the controller checks again)."""
    check_new_acl(acl.resource_type, acl.resource_name, acl.pattern_type, acl.principal,
                  acl.host, acl.operation, acl.permission_type)


def filter_from_codes(resource_type: int, resource_name: str | None, pattern_type: int,
                      principal: str | None, host: str | None, operation: int,
                      permission_type: int) -> AclBindingFilter:
    """A DescribeAcls / DeleteAcls filter from wire codes; a code Kafka does not know reads as
    UNKNOWN (which matches nothing), as Kafka's ``fromCode``."""
    return AclBindingFilter(ResourceType(ResourceType.from_code(resource_type)), resource_name,
                            PatternType(PatternType.from_code(pattern_type)), principal, host,
                            AclOperation(AclOperation.from_code(operation)),
                            AclPermissionType(AclPermissionType.from_code(permission_type)))


def check_delete_filter(flt: AclBindingFilter) -> None:
    """AclControlManager.validateFilter: a DeleteAcls filter with an UNKNOWN element is
    KafkaError(INVALID_REQUEST)."""
    if flt.resource_type == ResourceType.UNKNOWN or flt.pattern_type == PatternType.UNKNOWN:
        raise KafkaError(ErrorCode.INVALID_REQUEST, "Unknown patternFilter.")
    if flt.operation == AclOperation.UNKNOWN or \
            flt.permission_type == AclPermissionType.UNKNOWN:
        raise KafkaError(ErrorCode.INVALID_REQUEST, "Unknown entryFilter.")


# -- the ACL store and its index --------------------------------------------------------------

class _TypeIndex:
    """The ACLs of one resource type: by literal name, by prefix, and the prefix lengths in
    use (sorted), each ACL list in insertion order."""

    __slots__ = ("literal", "prefixed", "prefix_lengths")

    def __init__(self) -> None:
        self.literal: dict[str, list[StandardAcl]] = {}
        self.prefixed: dict[str, list[StandardAcl]] = {}
        self.prefix_lengths: dict[int, int] = {}  # length -> prefixes of that length

    def is_empty(self) -> bool:
        return not self.literal and not self.prefixed


class AclCache:
    """Every ACL, by id and indexed by resource (see module docstring). Changed only by
    :meth:`add` / :meth:`remove`, which metadata replay calls for ACL records."""

    def __init__(self) -> None:
        self.by_id: dict[str, StandardAcl] = {}
        self.ids: dict[StandardAcl, str] = {}  # duplicate detection (Kafka's existingAcls)
        self._index: dict[ResourceType, _TypeIndex] = {}

    def __len__(self) -> int:
        return len(self.by_id)

    def __contains__(self, acl: object) -> bool:
        return acl in self.ids

    def add(self, acl_id: str, acl: StandardAcl) -> None:
        if acl_id in self.by_id:
            raise ValueError(f"ACL id {acl_id} is already in use")
        if acl in self.ids:
            raise ValueError(f"{acl} already exists with id {self.ids[acl]}")
        self.by_id[acl_id] = acl
        self.ids[acl] = acl_id
        idx = self._index.get(acl.resource_type)
        if idx is None:
            idx = self._index[acl.resource_type] = _TypeIndex()
        if acl.pattern_type is PatternType.PREFIXED:
            bucket = idx.prefixed.get(acl.resource_name)
            if bucket is None:
                bucket = idx.prefixed[acl.resource_name] = []
                n = len(acl.resource_name)
                idx.prefix_lengths[n] = idx.prefix_lengths.get(n, 0) + 1
                idx.prefix_lengths = dict(sorted(idx.prefix_lengths.items()))
            bucket.append(acl)
        else:
            idx.literal.setdefault(acl.resource_name, []).append(acl)

    def remove(self, acl_id: str) -> StandardAcl:
        acl = self.by_id.pop(acl_id, None)
        if acl is None:
            raise ValueError(f"no ACL with id {acl_id}")
        del self.ids[acl]
        idx = self._index[acl.resource_type]
        table = idx.prefixed if acl.pattern_type is PatternType.PREFIXED else idx.literal
        bucket = table[acl.resource_name]
        bucket.remove(acl)
        if not bucket:
            del table[acl.resource_name]
            if table is idx.prefixed:
                n = len(acl.resource_name)
                idx.prefix_lengths[n] -= 1
                if not idx.prefix_lengths[n]:
                    del idx.prefix_lengths[n]
            if idx.is_empty():
                del self._index[acl.resource_type]
        return acl

    def applicable(self, resource_type: ResourceType, name: str) -> Iterator[StandardAcl]:
        """Every ACL that applies to the literal resource ``name``: literal on the name, the
        literal wildcard, PREFIXED on a prefix of it (Kafka's two checkSection passes)."""
        idx = self._index.get(resource_type)
        if idx is None:
            return
        literal = idx.literal
        bucket = literal.get(name)
        if bucket:
            yield from bucket
        if name != WILDCARD:
            bucket = literal.get(WILDCARD)
            if bucket:
                yield from bucket
        prefixed = idx.prefixed
        if prefixed:
            n = len(name)
            for length in idx.prefix_lengths:
                if length > n:
                    break
                bucket = prefixed.get(name[:length])
                if bucket:
                    yield from bucket

    def acls(self, flt: AclBindingFilter) -> list[tuple[str, StandardAcl]]:
        """(id, ACL) of every ACL the filter matches, in the order they were added."""
        return [(i, a) for i, a in self.by_id.items() if flt.matches(a)]


# -- decisions --------------------------------------------------------------------------------

def find_result(acl: StandardAcl, principals: tuple[str, str], host: str,
                operation: AclOperation) -> AuthorizationResult | None:
    """What ``acl`` says about ``operation`` by one of ``principals`` from ``host`` (None: it
    does not match); the resource is assumed to match (Kafka's findResult)."""
    if acl.principal not in principals:
        return None
    if acl.host != WILDCARD and acl.host != host:
        return None
    op = acl.operation
    if op != _ALL:
        if acl.permission_type == _ALLOW:
            if operation == _DESCRIBE:
                if op not in _IMPLIES_DESCRIBE:
                    return None
            elif operation == _DESCRIBE_CONFIGS:
                if op not in _IMPLIES_DESCRIBE_CONFIGS:
                    return None
            elif op != operation:
                return None
        elif op != operation:
            return None
    return _ALLOWED if acl.permission_type == _ALLOW else _DENIED


def parse_super_users(value: str) -> frozenset[str]:
    """``super.users``: principals separated by ';' (Kafka's format), blanks ignored."""
    return frozenset(p.strip() for p in value.split(";") if p.strip())


class StandardAuthorizer:
    """Kafka's StandardAuthorizer over an :class:`AclCache` (see module docstring). The cache
    belongs to the cluster metadata; this object only reads it."""

    def __init__(self, acls: AclCache, *, super_users: Iterable[str] = (),
                 allow_everyone_if_no_acl_found: bool = False) -> None:
        self.acls = acls
        self.super_users = frozenset(super_users)
        self.no_acl_result = _ALLOWED if allow_everyone_if_no_acl_found else _DENIED

    def authorize(self, context: Any, actions: Sequence[Action]) -> list[AuthorizationResult]:
        """One result per action. ``context`` has ``principal``, ``client_address`` and
        ``api_key`` (handlers.context.RequestContext)."""
        principal = str(context.principal)
        if principal in self.super_users:
            if audit_log.isEnabledFor(logging.DEBUG):
                for action in actions:
                    if action.log_if_allowed:
                        self._audit(context, principal, action, _ALLOWED, "SuperUser")
            return [_ALLOWED] * len(actions)
        principals = (principal, WILDCARD_PRINCIPAL)
        host = context.client_address
        out = []
        for action in actions:
            result, rule = self._decide(principals, host, action)
            if result is _DENIED:
                if action.log_if_denied:
                    self._audit(context, principal, action, result, rule)
            elif action.log_if_allowed and audit_log.isEnabledFor(logging.DEBUG):
                self._audit(context, principal, action, result, rule)
            out.append(result)
        return out

    def authorize_by_resource_type(self, context: Any, operation: AclOperation,
                                   resource_type: ResourceType) -> AuthorizationResult:
        """Kafka's ``Authorizer.authorizeByResourceType`` (the default StandardAuthorizer
        inherits): ALLOWED if the principal may perform ``operation`` on SOME resource of the
        type. A hard-coded literal name is authorized first (super users, and
        allow.everyone.if.no.acl.found on a name nobody has ACLs for); then an ALLOW ACL
        (principal or User:*, host or *, operation or ALL) counts unless a DENY on the same
        literal name, a DENY on a prefix of it, or a DENY on the wildcard dominates it."""
        if self.authorize(context, [Action(operation, ResourcePattern(
                resource_type, "hardcode"), resource_reference_count=0,
                log_if_allowed=True, log_if_denied=False)])[0] is _ALLOWED:
            return _ALLOWED
        principals = (str(context.principal), WILDCARD_PRINCIPAL)
        host = context.client_address
        deny_literal: set[str] = set()
        deny_prefixed: set[str] = set()
        allow: list[tuple[PatternType, str]] = []
        wildcard_allow = False
        for _id, acl in self.acls.acls(AclBindingFilter(resource_type=resource_type)):
            if acl.host not in (host, WILDCARD) or acl.principal not in principals or \
                    acl.operation not in (operation, _ALL):
                continue
            if acl.permission_type is not _ALLOW:
                if acl.pattern_type == PatternType.LITERAL:
                    if acl.resource_name == WILDCARD:
                        return _DENIED
                    deny_literal.add(acl.resource_name)
                elif acl.pattern_type == PatternType.PREFIXED:
                    deny_prefixed.add(acl.resource_name)
                continue
            if acl.pattern_type == PatternType.LITERAL and acl.resource_name == WILDCARD:
                wildcard_allow = True
            else:
                allow.append((acl.pattern_type, acl.resource_name))
        if wildcard_allow:
            return _ALLOWED
        for pattern_type, name in allow:
            if pattern_type == PatternType.LITERAL and name in deny_literal:
                continue
            if not any(name[:i] in deny_prefixed for i in range(1, len(name) + 1)):
                return _ALLOWED
        return _DENIED

    def _decide(self, principals: tuple[str, str], host: str,
                action: Action) -> tuple[AuthorizationResult, object]:
        """(result, the rule that decided: the matching ACL or a default's name)."""
        pattern = action.resource_pattern
        if pattern.pattern_type != PatternType.LITERAL:
            raise ValueError(f"only literal resources can be authorized, got {pattern}")
        operation = action.operation
        allow: StandardAcl | None = None
        has_resource_acls = False
        for acl in self.acls.applicable(pattern.resource_type, pattern.name):
            has_resource_acls = True
            r = find_result(acl, principals, host, operation)
            if r is _DENIED:
                return _DENIED, acl
            if r is _ALLOWED:
                allow = acl
        if allow is not None:
            return _ALLOWED, allow
        if has_resource_acls:
            return _DENIED, "DefaultDeny"
        return self.no_acl_result, ("DefaultAllow" if self.no_acl_result is _ALLOWED
                                    else "DefaultDeny")

    @staticmethod
    def _audit(context: Any, principal: str, action: Action, result: AuthorizationResult,
               rule: object) -> None:
        pattern = action.resource_pattern
        rule_text = f"MatchingAcl(acl={rule})" if isinstance(rule, StandardAcl) else str(rule)
        level = logging.INFO if result is _DENIED else logging.DEBUG
        audit_log.log(
            level, "Principal = %s is %s operation = %s from host = %s on resource = %s:%s:%s "
            "for request = %s with resourceRefCount = %d based on rule %s", principal,
            "Allowed" if result is _ALLOWED else "Denied", action.operation.name,
            context.client_address,
            _RESOURCE_TYPE_NAMES.get(pattern.resource_type, pattern.resource_type.name),
            pattern.pattern_type.name, pattern.name, _request_name(context),
            action.resource_reference_count, rule_text)


def _request_name(context: Any) -> str:
    from snakka.protocol.apis import api_spec

    key = getattr(context, "api_key", None)
    spec = api_spec(key) if isinstance(key, int) else None
    return spec.name if spec is not None else str(key)


def create_authorizer(class_name: str, acls: AclCache, *, super_users: str = "",
                      allow_everyone_if_no_acl_found: bool = False) -> Authorizer:
    """The authorizer ``authorizer.class.name`` names: empty = allow everything (a Kafka broker
    without an authorizer), the StandardAuthorizer over ``acls``; anything else ValueError
    (the config parser refuses it first)."""
    if not class_name:
        return AllowAllAuthorizer()
    if class_name in STANDARD_AUTHORIZER_CLASSES:
        return StandardAuthorizer(acls, super_users=parse_super_users(super_users),
                                  allow_everyone_if_no_acl_found=allow_everyone_if_no_acl_found)
    raise ValueError(f"unknown authorizer.class.name {class_name!r}")
