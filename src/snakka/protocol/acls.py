"""The ACL vocabulary as wire codes (Kafka's ``AclOperation``, ``AclPermissionType``,
``ResourceType``, ``PatternType``).

What it owns: the bytes CreateAcls / DescribeAcls / DeleteAcls carry and the
``authorized_operations`` bit positions of Metadata / DescribeGroups / DescribeCluster. They live
in the base layer because both sides of the wire need them: the broker's authorizer
(snakka.security.authorizer re-exports them with the rest of its vocabulary) and the admin
client (snakka.client.admin), which may import only base modules. The codes must never be
renumbered. ``parse`` helpers accept Kafka's names case-insensitively, as
``AclOperation.fromString`` does.
"""

from __future__ import annotations

from enum import IntEnum
from typing import Self

__all__ = ["AclOperation", "AclPermissionType", "PatternType", "ResourceType"]


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
