"""What the three ACL handlers (create_acls.py, describe_acls.py, delete_acls.py) share: whether
an ACL authorizer is configured, reading the wire's ACL fields, and Kafka's answer to a request
it cannot parse.

Kafka's AclApis answers SECURITY_DISABLED when the broker has no authorizer. A binding or filter
with a code of 0 (UNKNOWN) fails Kafka's request parsing, with or without an authorizer, and
Kafka closes the connection: these handlers do the same, with a log line
(:func:`close_unparseable`). The rest of the validation is security.acl_authorizer's.
"""

from __future__ import annotations

from typing import Any

from snakka.handlers.context import RequestContext
from snakka.security.acl_authorizer import AclBindingFilter, filter_from_codes, unparseable


def acl_authorizer_configured(ctx: RequestContext) -> bool:
    """Whether ``authorizer.class.name`` names an authorizer (config.py refuses any but the
    StandardAuthorizer)."""
    return bool(ctx.services.config.get("authorizer.class.name"))


def binding_problem(creation: Any) -> str | None:
    """Why Kafka cannot parse a CreateAcls creation (None: it can)."""
    return unparseable(creation.resource_type, creation.resource_pattern_type,
                       creation.operation, creation.permission_type)


def filter_problem(f: Any) -> str | None:
    """Why Kafka cannot parse a DescribeAcls request / DeleteAcls filter (None: it can)."""
    return unparseable(f.resource_type_filter, f.pattern_type_filter, f.operation,
                       f.permission_type)


def binding_filter(f: Any) -> AclBindingFilter:
    """A DescribeAcls request / DeleteAcls filter as an AclBindingFilter."""
    return filter_from_codes(f.resource_type_filter, f.resource_name_filter,
                             f.pattern_type_filter, f.principal_filter, f.host_filter,
                             f.operation, f.permission_type)


def close_unparseable(ctx: RequestContext, api: str, problem: str) -> None:
    """Kafka cannot parse the request: close the connection, with a log line."""
    ctx.connection.close_with_error(f"{api} request Kafka cannot parse: {problem}")
