"""AlterUserScramCredentials (51): add, change and delete users' SCRAM credentials
(``kafka-configs.sh --alter --add-config 'SCRAM-SHA-512=[password=...]' --entity-type users``,
``Admin.alterUserScramCredentials``, ``snakka users``).

The client sends the salt and the *salted* password (it ran Hi itself); the broker keeps salt,
iterations, StoredKey and ServerKey in the metadata log (metadata/scram.py: Kafka's checks and
error codes), durable before the answer. One result per user. Needs ALTER on the cluster
(dispatch checks it).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from snakka.handlers.context import ApiDeclaration, ApiKey, RequestContext
from snakka.metadata.scram import ScramAlteration
from snakka.protocol.messages.alter_user_scram_credentials_response import (
    AlterUserScramCredentialsResponse,
    AlterUserScramCredentialsResult,
)
from snakka.security.authorizer import CLUSTER, AclOperation, Action

if TYPE_CHECKING:
    from snakka.protocol.messages.alter_user_scram_credentials_request import (
        AlterUserScramCredentialsRequest,
    )

API = ApiDeclaration(ApiKey.ALTER_USER_SCRAM_CREDENTIALS,
                     actions=(Action(AclOperation.ALTER, CLUSTER),))


async def handle(ctx: RequestContext, req: AlterUserScramCredentialsRequest
                 ) -> AlterUserScramCredentialsResponse:
    deletions = [ScramAlteration(d.name, d.mechanism) for d in req.deletions or []]
    upsertions = [ScramAlteration(u.name, u.mechanism, u.iterations, bytes(u.salt or b""),
                                  bytes(u.salted_password or b""))
                  for u in req.upsertions or []]
    results = await ctx.services.controller.alter_user_scram_credentials(deletions, upsertions)
    return AlterUserScramCredentialsResponse(throttle_time_ms=0, results=[
        AlterUserScramCredentialsResult(user=r.user, error_code=r.error_code,
                                        error_message=r.error_message) for r in results])
