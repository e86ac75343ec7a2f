"""The ACL vocabulary as wire codes (Kafka's ``AclOperation``, ``AclPermissionType``,
``ResourceType``, ``PatternType``).

What it owns: the bytes CreateAcls / DescribeAcls / DeleteAcls carry and the
``authorized_operations`` bit positions of Metadata / DescribeGroups / DescribeCluster. They live
in the base layer because both sides of the wire need them: the broker's authorizer
(snakka.security.authorizer re-exports them with the rest of its vocabulary) and the admin
client (snakka.client.admin), which may import only base modules. The codes must never be
renumbered. ``parse`` helpers accept Kafka's names case-insensitively, as
``AclOperation.fromString`` does. ``AclBinding`` and ``AclBindingFilter`` (Kafka's classes of
those names, with its matching rules) live here for the same reason: the admin client builds
them, and the broker's ``StandardAcl`` is an ``AclBinding`` with its metadata-record form.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import IntEnum
from typing import Self

__all__ = ["WILDCARD", "AclBinding", "AclBindingFilter", "AclOperation", "AclPermissionType",
           "PatternType", "ResourceType"]

# The resource name and host that match any (Kafka's ResourcePattern.WILDCARD_RESOURCE).
WILDCARD = "*"


class _Named(IntEnum):
    @classmethod
    def parse(cls, text: str) -> Self:
        """The member named ``text`` (case-insensitive; ``-`` and ``_`` alike); ValueError if
        there is none."""
        key = text.strip().upper().replace("-", "_")
        try:
            return cls[key]
        except KeyError:
            raise ValueError(f"unknown {cls.__name__} {text!r}; one of "
                             f"{', '.join(m.name for m in cls)}") from None

    @classmethod
    def from_code(cls, code: int) -> Self:
        """Kafka's ``fromCode``: an unknown code is UNKNOWN (0), never an exception."""
        try:
            return cls(code)
        except ValueError:
            return cls(0)


class AclOperation(_Named):
    """Kafka's AclOperation (4.0: codes 0-14)."""

    UNKNOWN = 0
    ANY = 1
    ALL = 2
    READ = 3
    WRITE = 4
    CREATE = 5
    DELETE = 6
    ALTER = 7
    DESCRIBE = 8
    CLUSTER_ACTION = 9
    DESCRIBE_CONFIGS = 10
    ALTER_CONFIGS = 11
    IDEMPOTENT_WRITE = 12
    CREATE_TOKENS = 13
    DESCRIBE_TOKENS = 14


class AclPermissionType(_Named):
    """Kafka's AclPermissionType."""

    UNKNOWN = 0
    ANY = 1
    DENY = 2
    ALLOW = 3


class ResourceType(_Named):
    """Kafka's ResourceType."""

    UNKNOWN = 0
    ANY = 1
    TOPIC = 2
    GROUP = 3
    CLUSTER = 4
    TRANSACTIONAL_ID = 5
    DELEGATION_TOKEN = 6
    USER = 7


class PatternType(_Named):
    """Kafka's PatternType. A resource or an ACL is LITERAL or PREFIXED; filters may also say
    ANY (any pattern type, the name compared exactly) or MATCH (every ACL that would apply to
    the named resource: the literal name, the wildcard ``*`` and the prefixes covering it)."""

    UNKNOWN = 0
    ANY = 1
    MATCH = 2
    LITERAL = 3
    PREFIXED = 4


@dataclass(frozen=True, slots=True)
class AclBinding:
    """One ACL (Kafka's AclBinding): a resource pattern plus an access-control entry."""

    resource_type: ResourceType
    resource_name: str
    pattern_type: PatternType
    principal: str
    host: str
    operation: AclOperation
    permission_type: AclPermissionType

    def resource(self) -> str:
        """kafka-acls.sh's words for the resource pattern."""
        return (f"ResourcePattern(resourceType={self.resource_type.name}, "
                f"name={self.resource_name}, patternType={self.pattern_type.name})")

    def entry(self) -> str:
        """kafka-acls.sh's words for the access-control entry."""
        return (f"(principal={self.principal}, host={self.host}, "
                f"operation={self.operation.name}, permissionType={self.permission_type.name})")


@dataclass(frozen=True, slots=True)
class AclBindingFilter:
    """A DescribeAcls / DeleteAcls filter (Kafka's AclBindingFilter). ``None`` name, principal
    or host, and the ANY codes: any."""

    resource_type: ResourceType = ResourceType.ANY
    resource_name: str | None = None
    pattern_type: PatternType = PatternType.ANY
    principal: str | None = None
    host: str | None = None
    operation: AclOperation = AclOperation.ANY
    permission_type: AclPermissionType = AclPermissionType.ANY

    def matches(self, acl: AclBinding) -> bool:
        return self.matches_pattern(acl) and self.matches_entry(acl)

    def matches_pattern(self, acl: AclBinding) -> bool:
        """Kafka's ResourcePatternFilter.matches."""
        rtype, ptype = self.resource_type, self.pattern_type
        if rtype is not ResourceType.ANY and rtype != acl.resource_type:
            return False
        if ptype is not PatternType.ANY and ptype is not PatternType.MATCH \
                and ptype != acl.pattern_type:
            return False
        name = self.resource_name
        if name is None:
            return True
        if ptype is PatternType.ANY or ptype == acl.pattern_type:
            return name == acl.resource_name
        # MATCH: every ACL that applies to the resource ``name``.
        if acl.pattern_type is PatternType.LITERAL:
            return name == acl.resource_name or acl.resource_name == WILDCARD
        return name.startswith(acl.resource_name)

    def matches_entry(self, acl: AclBinding) -> bool:
        """Kafka's AccessControlEntryFilter.matches."""
        if self.principal is not None and self.principal != acl.principal:
            return False
        if self.host is not None and self.host != acl.host:
            return False
        if self.operation is not AclOperation.ANY and self.operation != acl.operation:
            return False
        return self.permission_type is AclPermissionType.ANY or \
            self.permission_type == acl.permission_type
