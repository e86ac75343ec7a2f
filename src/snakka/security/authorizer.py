"""The authorizer seam (Kafka's ``org.apache.kafka.server.authorizer``).

What it owns: the vocabulary of authorization (operations, resource types, patterns, actions and
results, with Kafka's names and wire codes) and the :class:`Authorizer` protocol that dispatch
(server/dispatch.py) calls once per request for the API-level actions a handler declares, and
that handlers call through ``RequestContext.authorize`` for per-resource checks.
:class:`AllowAllAuthorizer` is the default until ACLs exist (issue 14): it allows every action,
which is what a Kafka broker without ``authorizer.class.name`` does.

The codes are the bytes Kafka puts on the wire (DescribeAcls, CreateAcls, the
``authorized_operations`` bit fields of Metadata / DescribeGroups / DescribeCluster), so they
must never be renumbered; the enums live in the base layer (snakka.protocol.acls, which the
admin client shares) and are re-exported here. ACLs themselves (bindings, matching, the
StandardAuthorizer) are in snakka.security.acl_authorizer.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from enum import Enum
from typing import Any, Protocol

from snakka.protocol.acls import AclOperation, AclPermissionType, PatternType, ResourceType
from snakka.protocol.errors import ErrorCode

__all__ = [
    "CLUSTER", "CLUSTER_NAME", "SUPPORTED_OPERATIONS", "Action", "AclOperation",
    "AclPermissionType", "AllowAllAuthorizer", "AuthorizationResult", "Authorizer", "PatternType",
    "ResourcePattern", "ResourceType", "denied_error_code", "operations_bit_field",
]

# The one cluster resource's name (Kafka's Resource.CLUSTER_NAME).
CLUSTER_NAME = "kafka-cluster"


class AuthorizationResult(Enum):
    ALLOWED = "ALLOWED"
    DENIED = "DENIED"


@dataclass(frozen=True, slots=True)
class ResourcePattern:
    resource_type: ResourceType
    name: str
    pattern_type: PatternType = PatternType.LITERAL


CLUSTER = ResourcePattern(ResourceType.CLUSTER, CLUSTER_NAME)


@dataclass(frozen=True, slots=True)
class Action:
    """One operation on one resource (Kafka's ``Action``). ``log_if_allowed`` /
    ``log_if_denied`` tell an audit log whether the client asked for this resource explicitly
    (denials of resources a request merely filters, as in Metadata for all topics, are not
    logged in Kafka)."""

    operation: AclOperation
    resource_pattern: ResourcePattern
    resource_reference_count: int = 1
    log_if_allowed: bool = True
    log_if_denied: bool = True


class Authorizer(Protocol):
    """Kafka's ``org.apache.kafka.server.authorizer.Authorizer`` (the two decisions handlers
    ask for). ``context`` is the request's :class:`~snakka.handlers.context.RequestContext`
    (principal, listener, client address, API key); typed loosely here so security/ stays
    below handlers/."""

    def authorize(self, context: Any, actions: Sequence[Action]) -> list[AuthorizationResult]:
        """One result per action, in order."""
        ...

    def authorize_by_resource_type(self, context: Any, operation: AclOperation,
                                   resource_type: ResourceType) -> AuthorizationResult:
        """Kafka's ``authorizeByResourceType``: ALLOWED if ``operation`` is allowed on at least
        one resource of ``resource_type`` (some ALLOW binding, literal or prefixed, that no DENY
        binding covers entirely; super users and ``allow.everyone.if.no.acl.found`` as for
        :meth:`authorize`). InitProducerId without a transactional id asks it for WRITE on
        TOPIC in place of IDEMPOTENT_WRITE on the cluster."""
        ...


class AllowAllAuthorizer:
    """Every action is allowed (a Kafka broker without ``authorizer.class.name``)."""

    def authorize(self, context: Any, actions: Sequence[Action]) -> list[AuthorizationResult]:
        return [AuthorizationResult.ALLOWED] * len(actions)

    def authorize_by_resource_type(self, context: Any, operation: AclOperation,
                                   resource_type: ResourceType) -> AuthorizationResult:
        return AuthorizationResult.ALLOWED


_DENIED_CODES = {
    ResourceType.TOPIC: ErrorCode.TOPIC_AUTHORIZATION_FAILED,
    ResourceType.GROUP: ErrorCode.GROUP_AUTHORIZATION_FAILED,
    ResourceType.CLUSTER: ErrorCode.CLUSTER_AUTHORIZATION_FAILED,
    ResourceType.TRANSACTIONAL_ID: ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
    ResourceType.DELEGATION_TOKEN: ErrorCode.DELEGATION_TOKEN_AUTHORIZATION_FAILED,
}


def denied_error_code(resource_type: ResourceType) -> ErrorCode:
    """The error a denied action on this kind of resource is answered with (Kafka's
    TopicAuthorizationException, ClusterAuthorizationException, ...)."""
    code = _DENIED_CODES.get(resource_type)
    if code is None:
        raise ValueError(f"no authorization error code for resource type {resource_type.name}")
    return code


# -- authorized-operations bit fields (KIP-430) -------------------------------------------------
# The operations an ACL may name for each resource type (Kafka's AclEntry.supportedOperations):
# what the ``authorized_operations`` fields of Metadata, DescribeCluster, DescribeGroups,
# ConsumerGroupDescribe, ShareGroupDescribe and DescribeTopicPartitions are computed over.
SUPPORTED_OPERATIONS: dict[ResourceType, tuple[AclOperation, ...]] = {
    ResourceType.TOPIC: (AclOperation.READ, AclOperation.WRITE, AclOperation.CREATE,
                         AclOperation.DESCRIBE, AclOperation.DELETE, AclOperation.ALTER,
                         AclOperation.DESCRIBE_CONFIGS, AclOperation.ALTER_CONFIGS),
    ResourceType.GROUP: (AclOperation.READ, AclOperation.DESCRIBE, AclOperation.DELETE,
                         AclOperation.DESCRIBE_CONFIGS, AclOperation.ALTER_CONFIGS),
    ResourceType.CLUSTER: (AclOperation.CREATE, AclOperation.CLUSTER_ACTION,
                           AclOperation.DESCRIBE_CONFIGS, AclOperation.ALTER_CONFIGS,
                           AclOperation.IDEMPOTENT_WRITE, AclOperation.ALTER,
                           AclOperation.DESCRIBE),
    ResourceType.TRANSACTIONAL_ID: (AclOperation.DESCRIBE, AclOperation.WRITE),
    ResourceType.DELEGATION_TOKEN: (AclOperation.DESCRIBE,),
    ResourceType.USER: (AclOperation.CREATE_TOKENS, AclOperation.DESCRIBE_TOKENS),
}


def operations_bit_field(operations: Sequence[AclOperation]) -> int:
    """Kafka's ``Utils.to32BitField``: bit ``code`` set for each operation, as a signed int32
    (the wire type of the ``authorized_operations`` fields)."""
    field = 0
    for op in operations:
        field |= 1 << int(op)
    return field - (1 << 32) if field >= 1 << 31 else field
