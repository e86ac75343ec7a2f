"""SaslHandshake (17): the client picks a SASL mechanism on a SASL listener.

The answer lists the listener's enabled mechanisms (``sasl.enabled.mechanisms`` or its
``listener.name.<l>.`` override); a mechanism not enabled is UNSUPPORTED_SASL_MECHANISM and
the connection closes after the (delayed) answer, as Kafka does. On an authenticated SASL
connection a handshake starts a re-authentication (KIP-368; same mechanism). On a listener
without SASL the request is ILLEGAL_SASL_STATE (Kafka answers the same).

Versions 0-1 are advertised (librdkafka only uses SASL when the broker lists SaslHandshake v0),
but the exchange itself needs v1: after a v0 handshake (Kafka < 1.0 clients) the SASL tokens
would follow raw, without Kafka framing, which snakka does not read. A v0 handshake is therefore
answered UNSUPPORTED_SASL_MECHANISM (with the enabled mechanisms) and the connection closes,
with a log line saying why; every current client sends v1 and SaslAuthenticate.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

from snakka.handlers._sasl import delayed, log_failed_authentication
from snakka.handlers.context import ApiDeclaration, ApiKey, RequestContext
from snakka.protocol.errors import ErrorCode
from snakka.protocol.messages.sasl_handshake_response import SaslHandshakeResponse
from snakka.security.sasl import IllegalSaslState

if TYPE_CHECKING:
    from snakka.protocol.messages.sasl_handshake_request import SaslHandshakeRequest

API = ApiDeclaration(ApiKey.SASL_HANDSHAKE)

log = logging.getLogger("snakka.security")


def handle(ctx: RequestContext, req: Any) -> Any:
    try:
        return _handle(ctx, req)
    except IllegalSaslState as e:
        # After authentication (and not a re-authentication): Kafka's KafkaApis answers
        # ILLEGAL_SASL_STATE and keeps the connection.
        log.info("%s from %s: %s", API.api_key.name, ctx.connection.peer, e)
        return SaslHandshakeResponse(error_code=ErrorCode.ILLEGAL_SASL_STATE, mechanisms=[])


def _handle(ctx: RequestContext, req: SaslHandshakeRequest) -> Any:
    sasl = ctx.services.sasl
    enabled = sasl.enabled_mechanisms(ctx.listener_name) if sasl is not None else []
    if not enabled:  # not a SASL listener
        return SaslHandshakeResponse(error_code=ErrorCode.ILLEGAL_SASL_STATE, mechanisms=[])
    assert sasl is not None
    auth = ctx.connection.authentication
    listener = ctx.listener_name
    if ctx.api_version == 0:
        auth.handshake(req.mechanism, (), 0)  # fails the connection: no raw tokens here
        log_failed_authentication(ctx, req.mechanism, None, "SaslHandshake v0 (raw SASL tokens, "
                                  "Kafka < 1.0 clients) is not supported; v1 is")
        return delayed(ctx, SaslHandshakeResponse(
            error_code=ErrorCode.UNSUPPORTED_SASL_MECHANISM, mechanisms=enabled))
    code = auth.handshake(req.mechanism, enabled, ctx.api_version,
                          lambda m: sasl.create(listener, m))
    resp = SaslHandshakeResponse(error_code=code, mechanisms=enabled)
    if code != ErrorCode.NONE:
        log_failed_authentication(ctx, req.mechanism, None,
                                  f"mechanism {req.mechanism!r} is not enabled "
                                  f"(enabled: {', '.join(enabled)})")
        return delayed(ctx, resp)
    return resp
