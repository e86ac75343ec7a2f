"""SCRAM credentials in the metadata log (KRaft's ``UserScramCredentialRecord`` /
``RemoveUserScramCredentialRecord`` and the controller's ``ScramControlManager`` rules).

What it owns: the replayed state (user -> mechanism -> salt, StoredKey, ServerKey, iterations;
never a password) and the validation of an AlterUserScramCredentials request with Kafka's
error codes and words. Records (JSON, bytes as hex)::

    {"type": "user_scram_credential", "name", "mechanism": 1|2, "salt", "stored_key",
     "server_key", "iterations"}
    {"type": "remove_user_scram_credential", "name", "mechanism": 1|2}

Sans-I/O: ClusterMetadata applies these records (metadata/core.py); the controller commits
them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from snakka.protocol.errors import ErrorCode
from snakka.util.scram import (
    MAX_ITERATIONS,
    MIN_ITERATIONS,
    ScramCredential,
    ScramMechanism,
    credential_from_salted,
)

__all__ = ["ScramAlteration", "ScramCredentials", "ScramResult"]

RECORD = "user_scram_credential"
REMOVE_RECORD = "remove_user_scram_credential"


@dataclass(frozen=True, slots=True)
class ScramAlteration:
    """One deletion (``salted_password`` None) or upsertion of a request."""

    name: str
    mechanism: int
    iterations: int = 0
    salt: bytes = b""
    salted_password: bytes | None = None


@dataclass(frozen=True, slots=True)
class ScramResult:
    user: str
    error_code: ErrorCode
    error_message: str | None


class ScramCredentials:
    """The replayed SCRAM credentials."""

    def __init__(self) -> None:
        self.users: dict[str, dict[ScramMechanism, ScramCredential]] = {}

    def get(self, user: str, mechanism: ScramMechanism) -> ScramCredential | None:
        return self.users.get(user, {}).get(mechanism)

    # -- replay --------------------------------------------------------------------------
    def apply(self, rec: Mapping[str, Any]) -> None:
        mech = ScramMechanism(int(rec["mechanism"]))
        if rec["type"] == RECORD:
            self.users.setdefault(rec["name"], {})[mech] = ScramCredential(
                bytes.fromhex(rec["salt"]), bytes.fromhex(rec["stored_key"]),
                bytes.fromhex(rec["server_key"]), int(rec["iterations"]))
        else:
            creds = self.users.get(rec["name"], {})
            creds.pop(mech, None)
            if not creds:
                self.users.pop(rec["name"], None)

    # -- AlterUserScramCredentials -------------------------------------------------------
    def alter(self, deletions: Sequence[ScramAlteration], upsertions: Sequence[ScramAlteration]
              ) -> tuple[list[ScramResult], list[dict[str, Any]]]:
        """Validate a request (Kafka's ScramControlManager.alterCredentials): one result per
        user, and the records of the users whose every alteration is valid (not applied)."""
        errors: dict[str, tuple[ErrorCode, str]] = {}
        users: dict[str, None] = {}
        seen: set[tuple[str, int]] = set()
        records: dict[str, list[dict[str, Any]]] = {}
        for alt in [*deletions, *upsertions]:
            users[alt.name] = None
            if (alt.name, alt.mechanism) in seen:
                errors.setdefault(alt.name, (ErrorCode.DUPLICATE_RESOURCE, "A user credential "
                                             "cannot be altered twice in the same request"))
            seen.add((alt.name, alt.mechanism))
        for alt in [*deletions, *upsertions]:
            if alt.name in errors:
                continue
            err = self._validate(alt)
            if err is not None:
                errors[alt.name] = err
                continue
            mech = ScramMechanism(alt.mechanism)
            if alt.salted_password is None:
                rec: dict[str, Any] = {"type": REMOVE_RECORD, "name": alt.name,
                                       "mechanism": int(mech)}
            else:
                cred = credential_from_salted(mech, alt.salt, alt.salted_password,
                                              alt.iterations)
                rec = {"type": RECORD, "name": alt.name, "mechanism": int(mech),
                       "salt": cred.salt.hex(), "stored_key": cred.stored_key.hex(),
                       "server_key": cred.server_key.hex(), "iterations": cred.iterations}
            records.setdefault(alt.name, []).append(rec)
        results = [ScramResult(u, *errors[u]) if u in errors
                   else ScramResult(u, ErrorCode.NONE, None) for u in users]
        out = [r for u in users if u not in errors for r in records.get(u, [])]
        return results, out

    def _validate(self, alt: ScramAlteration) -> tuple[ErrorCode, str] | None:
        if not alt.name:
            return ErrorCode.UNACCEPTABLE_CREDENTIAL, "Username must not be empty"
        if alt.mechanism not in (ScramMechanism.SCRAM_SHA_256, ScramMechanism.SCRAM_SHA_512):
            return ErrorCode.UNSUPPORTED_SASL_MECHANISM, "Unknown SCRAM mechanism"
        if alt.salted_password is None:
            if self.get(alt.name, ScramMechanism(alt.mechanism)) is None:
                return (ErrorCode.RESOURCE_NOT_FOUND,
                        "Attempt to delete a user credential that does not exist")
            return None
        if alt.iterations < MIN_ITERATIONS:
            return ErrorCode.UNACCEPTABLE_CREDENTIAL, "Too few iterations"
        if alt.iterations > MAX_ITERATIONS:
            return ErrorCode.UNACCEPTABLE_CREDENTIAL, "Too many iterations"
        if not alt.salt or not alt.salted_password:
            return ErrorCode.UNACCEPTABLE_CREDENTIAL, "Salt and salted password must not be empty"
        return None
