"""What the three ACL handlers (create_acls.py, describe_acls.py, delete_acls.py) share: whether
an ACL authorizer is configured, and the conversions between the wire's ACL fields and
security.acl_authorizer's StandardAcl / AclBindingFilter.

Kafka's AclApis answers SECURITY_DISABLED when the broker has no authorizer; with one, a request
whose bindings or filters Kafka cannot even construct (UNKNOWN codes; ANY or MATCH in a
binding) fails to parse and Kafka closes the connection: these handlers do the same, with a
log line (``unparseable``).
"""

from __future__ import annotations

from typing import Any

from snakka.handlers.context import RequestContext
from snakka.security.acl_authorizer import (
    AclBindingFilter,
    StandardAcl,
    unparseable_binding,
    unparseable_filter,
)
from snakka.security.authorizer import AclOperation, AclPermissionType, PatternType, ResourceType


def acl_authorizer_configured(ctx: RequestContext) -> bool:
    """Whether ``authorizer.class.name`` names an authorizer (config.py refuses any but the
    StandardAuthorizer)."""
    return bool(ctx.services.config.get("authorizer.class.name"))


def binding_problem(creation: Any) -> str | None:
    """Why a CreateAcls creation cannot be parsed (None: it can)."""
    return unparseable_binding(creation.resource_type, creation.resource_pattern_type,
                               creation.operation, creation.permission_type)


def filter_problem(f: Any) -> str | None:
    """Why a DescribeAcls request / DeleteAcls filter cannot be parsed (None: it can)."""
    return unparseable_filter(f.resource_type_filter, f.pattern_type_filter, f.operation,
                              f.permission_type)


def standard_acl(creation: Any) -> StandardAcl:
    """A parseable CreateAcls creation as an ACL."""
    return StandardAcl(ResourceType(creation.resource_type), creation.resource_name,
                       PatternType(creation.resource_pattern_type), creation.principal,
                       creation.host, AclOperation(creation.operation),
                       AclPermissionType(creation.permission_type))


def binding_filter(f: Any) -> AclBindingFilter:
    """A parseable DescribeAcls request / DeleteAcls filter as an AclBindingFilter."""
    return AclBindingFilter(ResourceType(f.resource_type_filter), f.resource_name_filter,
                            PatternType(f.pattern_type_filter), f.principal_filter,
                            f.host_filter, AclOperation(f.operation),
                            AclPermissionType(f.permission_type))


def close_unparseable(ctx: RequestContext, api: str, problem: str) -> None:
    """Kafka cannot parse the request: close the connection, with a log line."""
    ctx.connection.close_with_error(f"{api} request Kafka cannot parse: {problem}")
