"""DescribeUserScramCredentials (50): which SCRAM mechanisms (and iteration counts) users have
(``kafka-configs.sh --describe --entity-type users``, ``Admin.describeUserScramCredentials``).

Kafka's ScramImage.describe: no users named = every user with a credential; a named user
without one is RESOURCE_NOT_FOUND, a user named twice DUPLICATE_RESOURCE. Never a salt or key.
Needs DESCRIBE on the cluster (dispatch checks it).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from snakka.handlers.context import ApiDeclaration, ApiKey, RequestContext
from snakka.protocol.errors import ErrorCode
from snakka.protocol.messages.describe_user_scram_credentials_response import (
    CredentialInfo,
    DescribeUserScramCredentialsResponse,
    DescribeUserScramCredentialsResult,
)
from snakka.security.authorizer import CLUSTER, AclOperation, Action

if TYPE_CHECKING:
    from snakka.protocol.messages.describe_user_scram_credentials_request import (
        DescribeUserScramCredentialsRequest,
    )

API = ApiDeclaration(ApiKey.DESCRIBE_USER_SCRAM_CREDENTIALS,
                     actions=(Action(AclOperation.DESCRIBE, CLUSTER),))


def handle(ctx: RequestContext, req: DescribeUserScramCredentialsRequest
           ) -> DescribeUserScramCredentialsResponse:
    scram = ctx.services.metadata.scram
    names = [u.name for u in req.users or []]
    if not names:
        names = sorted(scram.users)
    counts: dict[str, int] = {}
    for n in names:
        counts[n] = counts.get(n, 0) + 1
    results = []
    for name, count in counts.items():
        creds = scram.users.get(name)
        if count > 1:
            results.append(DescribeUserScramCredentialsResult(
                user=name, error_code=ErrorCode.DUPLICATE_RESOURCE,
                error_message="Cannot describe SCRAM credentials for the same user twice in a "
                              f"single request: {name}", credential_infos=[]))
        elif not creds:
            results.append(DescribeUserScramCredentialsResult(
                user=name, error_code=ErrorCode.RESOURCE_NOT_FOUND,
                error_message=f"Attempt to describe a user credential that does not exist: "
                              f"{name}", credential_infos=[]))
        else:
            results.append(DescribeUserScramCredentialsResult(
                user=name, error_code=ErrorCode.NONE, error_message=None,
                credential_infos=[CredentialInfo(mechanism=int(m), iterations=c.iterations)
                                  for m, c in sorted(creds.items())]))
    return DescribeUserScramCredentialsResponse(throttle_time_ms=0, error_code=ErrorCode.NONE,
                                                error_message=None, results=results)
