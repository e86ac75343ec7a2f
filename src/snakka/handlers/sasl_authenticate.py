"""SaslAuthenticate (36): one step of the SASL exchange the handshake started.

The connection's authentication state (server/authentication.py) feeds the bytes to the
mechanism (snakka.security.sasl); a complete exchange makes the connection act as
``User:<name>``, with a session lifetime from v1 on when ``connections.max.reauth.ms`` is set
(KIP-368). A failure answers SASL_AUTHENTICATION_FAILED with Kafka's message after
``connection.failed.authentication.delay.ms``, logs one line (peer, mechanism, user; never the
password) and the connection closes once the answer is written.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from snakka.handlers._sasl import delayed, log_failed_authentication
from snakka.handlers.context import ApiDeclaration, ApiKey, RequestContext
from snakka.protocol.errors import ErrorCode
from snakka.protocol.messages.sasl_authenticate_response import SaslAuthenticateResponse
from snakka.security.sasl import IllegalSaslState

if TYPE_CHECKING:
    from snakka.protocol.messages.sasl_authenticate_request import SaslAuthenticateRequest

API = ApiDeclaration(ApiKey.SASL_AUTHENTICATE)

log = logging.getLogger("snakka.security")


def handle(ctx: RequestContext, req: Any) -> Any:
    try:
        return _handle(ctx, req)
    except IllegalSaslState as e:
        # After authentication (and not a re-authentication): Kafka's KafkaApis answers
        # ILLEGAL_SASL_STATE and keeps the connection.
        log.info("%s from %s: %s", API.api_key.name, ctx.connection.peer, e)
        return SaslAuthenticateResponse(error_code=ErrorCode.ILLEGAL_SASL_STATE,
                                        error_message=str(e))


def _handle(ctx: RequestContext, req: SaslAuthenticateRequest) -> Any:
    sasl = ctx.services.sasl
    if sasl is None:
        return SaslAuthenticateResponse(error_code=ErrorCode.ILLEGAL_SASL_STATE,
                                        error_message="SASL is not enabled on this listener")
    auth = ctx.connection.authentication
    mechanism = auth.mechanism
    reauth = auth.reauthenticating
    result = auth.authenticate(bytes(req.auth_bytes or b""), ctx.services.time_ms(),
                               ctx.api_version, sasl.reauth_ms)
    resp = SaslAuthenticateResponse(error_code=result.error_code,
                                    error_message=result.error_message,
                                    auth_bytes=result.auth_bytes,
                                    session_lifetime_ms=result.session_lifetime_ms)
    if result.failed:
        log_failed_authentication(ctx, mechanism, result.user, result.reason)
        return delayed(ctx, resp)
    if reauth and not auth.reauthenticating:
        log.debug("%s re-authenticated on %s", ctx.principal, ctx.connection.peer)
    return resp
