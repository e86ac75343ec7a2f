"""A table-driven test authorizer and the fixtures of the authorization-matrix tests.

:class:`TableAuthorizer` decides from a switchable table of ``(principal, operation, resource
type, name)`` entries, with StandardAuthorizer's rules that matter to the handlers' checks:
DENY wins, ``ALL`` matches every operation, ``*`` every name, and an ALLOW of READ / WRITE /
DELETE / ALTER implies DESCRIBE (ALTER_CONFIGS implies DESCRIBE_CONFIGS). By default it allows
what no entry denies (a broker with ``ALLOW User:* ALL`` and some DENY ACLs); ``default_allow
=False`` is deny-by-default with explicit allows. Every connection of these tests is
``User:ANONYMOUS`` (no authentication), so the tests switch entries for that principal. The
table can change while a broker runs (the broker's event loop reads it under a lock).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Sequence
from typing import Any

from snakka.security.authorizer import (
    AclOperation,
    Action,
    AuthorizationResult,
    ResourceType,
)

ANON = "User:ANONYMOUS"
ALLOWED = AuthorizationResult.ALLOWED
DENIED = AuthorizationResult.DENIED

log = logging.getLogger("tests.authz")

# Kafka's implied operations (AclEntry / StandardAuthorizer): an ALLOW of any of these also
# allows DESCRIBE (resp. DESCRIBE_CONFIGS).
_IMPLY_DESCRIBE = {AclOperation.READ, AclOperation.WRITE, AclOperation.DELETE,
                   AclOperation.ALTER}

Entry = tuple[str, AclOperation, ResourceType, str]


class TableAuthorizer:
    def __init__(self, *, default_allow: bool = True) -> None:
        self.default_allow = default_allow
        self._lock = threading.Lock()
        self._deny: set[Entry] = set()
        self._allow: set[Entry] = set()
        self.calls: list[tuple[str, Action, AuthorizationResult]] = []  # every decision

    # -- the table ------------------------------------------------------------------------
    def deny(self, op: AclOperation, rtype: ResourceType, name: str = "*",
             principal: str = ANON) -> TableAuthorizer:
        with self._lock:
            self._deny.add((principal, op, rtype, name))
        return self

    def allow(self, op: AclOperation, rtype: ResourceType, name: str = "*",
              principal: str = ANON) -> TableAuthorizer:
        with self._lock:
            self._allow.add((principal, op, rtype, name))
        return self

    def clear(self) -> None:
        with self._lock:
            self._deny.clear()
            self._allow.clear()
            self.calls.clear()

    def denials(self) -> list[tuple[str, Action]]:
        with self._lock:
            return [(p, a) for p, a, r in self.calls if r is DENIED]

    # -- decisions ------------------------------------------------------------------------
    @staticmethod
    def _matches(entries: set[Entry], principal: str, ops: set[AclOperation],
                 rtype: ResourceType, name: str | None) -> bool:
        for p, op, rt, n in entries:
            if p not in (principal, "User:*") or rt != rtype:
                continue
            if op is not AclOperation.ALL and op not in ops:
                continue
            if name is None or n == "*" or n == name:
                return True
        return False

    def _decide(self, principal: str, op: AclOperation, rtype: ResourceType,
                name: str) -> AuthorizationResult:
        if self._matches(self._deny, principal, {op}, rtype, name):
            return DENIED
        if self.default_allow:
            return ALLOWED
        granting = {op}
        if op is AclOperation.DESCRIBE:
            granting |= _IMPLY_DESCRIBE
        elif op is AclOperation.DESCRIBE_CONFIGS:
            granting.add(AclOperation.ALTER_CONFIGS)
        return ALLOWED if self._matches(self._allow, principal, granting, rtype, name) \
            else DENIED

    def authorize(self, context: Any, actions: Sequence[Action]) -> list[AuthorizationResult]:
        principal = str(context.principal)
        out = []
        with self._lock:
            for a in actions:
                r = self._decide(principal, a.operation, a.resource_pattern.resource_type,
                                 a.resource_pattern.name)
                self.calls.append((principal, a, r))
                if r is DENIED and a.log_if_denied:
                    log.info("principal %s denied %s on %s", principal, a.operation.name,
                             a.resource_pattern)
                out.append(r)
        return out

    def authorize_by_resource_type(self, context: Any, op: AclOperation,
                                   rtype: ResourceType) -> AuthorizationResult:
        """Kafka's authorizeByResourceType, for this table: denied by a wildcard DENY, else
        allowed if the default allows or any ALLOW names the operation on that type."""
        principal = str(context.principal)
        with self._lock:
            if any(p in (principal, "User:*") and rt == rtype and n == "*"
                   and o in (op, AclOperation.ALL) for p, o, rt, n in self._deny):
                return DENIED
            if self.default_allow or self._matches(self._allow, principal, {op}, rtype, None):
                return ALLOWED
            return DENIED
