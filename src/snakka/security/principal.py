"""Principals and security protocols (Kafka's ``KafkaPrincipal`` and ``SecurityProtocol``).

What it owns: the identity a connection acts as. A PLAINTEXT listener has no authentication, so
every connection on it is ``User:ANONYMOUS``, as in Kafka; a SASL listener's connections get
their principal when authentication completes (server/authentication.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

__all__ = ["ANONYMOUS", "KafkaPrincipal", "SecurityProtocol"]


@dataclass(frozen=True, slots=True)
class KafkaPrincipal:
    """``principal_type:name`` (Kafka prints and stores ACL principals this way)."""

    principal_type: str
    name: str

    def __str__(self) -> str:
        return f"{self.principal_type}:{self.name}"

    @classmethod
    def parse(cls, text: str) -> KafkaPrincipal:
        """``User:alice`` -> KafkaPrincipal("User", "alice"); the name may contain ':'."""
        ptype, sep, name = text.partition(":")
        if not sep or not ptype:
            raise ValueError(f"expected PRINCIPAL_TYPE:name, got {text!r}")
        return cls(ptype, name)


# Kafka's KafkaPrincipal.ANONYMOUS: the principal of unauthenticated (PLAINTEXT, or SSL without
# a client certificate) connections.
ANONYMOUS = KafkaPrincipal("User", "ANONYMOUS")


class SecurityProtocol(Enum):
    """Kafka's security protocols (``listener.security.protocol.map`` values; Kafka's ids)."""

    PLAINTEXT = 0
    SSL = 1
    SASL_PLAINTEXT = 2
    SASL_SSL = 3

    @property
    def uses_sasl(self) -> bool:
        return self in (SecurityProtocol.SASL_PLAINTEXT, SecurityProtocol.SASL_SSL)
