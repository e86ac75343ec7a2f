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
    "CLUSTER", "CLUSTER_NAME", "Action", "AclOperation", "AclPermissionType", "AllowAllAuthorizer", "AuthorizationResult",
    "Authorizer", "PatternType", "ResourcePattern", "ResourceType", "denied_error_code",
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
    """Kafka's ``Authorizer.authorize``: one result per action, in order. ``context`` is the
    request's :class:`~snakka.handlers.context.RequestContext` (principal, listener, client
    address, API key); typed loosely here so security/ stays below handlers/."""

    def authorize(self, context: Any, actions: Sequence[Action]) -> list[AuthorizationResult]:
        ...


class AllowAllAuthorizer:
    """Every action is allowed (a Kafka broker without ``authorizer.class.name``)."""

    def authorize(self, context: Any, actions: Sequence[Action]) -> list[AuthorizationResult]:
        return [AuthorizationResult.ALLOWED] * len(actions)


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
