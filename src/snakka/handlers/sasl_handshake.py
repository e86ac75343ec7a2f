"""SaslHandshake (17): the client picks a SASL mechanism on a SASL listener.

The answer lists the listener's enabled mechanisms (``sasl.enabled.mechanisms`` or its
``listener.name.<l>.`` override); a mechanism not enabled is UNSUPPORTED_SASL_MECHANISM and
the connection closes after the (delayed) answer, as Kafka does. On an authenticated SASL
connection a handshake starts a re-authentication (KIP-368; same mechanism). On a listener
without SASL the request is ILLEGAL_SASL_STATE (Kafka answers the same).

Only v1 is served: v0 (Kafka < 1.0 clients) sent the SASL tokens raw, without Kafka framing,
after the handshake; every client in use sends v1 with SaslAuthenticate. A v0 request closes
the connection (unsupported version) with a log line.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from snakka.handlers._sasl import delayed, log_failed_authentication
from snakka.handlers.context import ApiDeclaration, ApiKey, RequestContext
from snakka.protocol.errors import ErrorCode
from snakka.protocol.messages.sasl_handshake_response import SaslHandshakeResponse

if TYPE_CHECKING:
    from snakka.protocol.messages.sasl_handshake_request import SaslHandshakeRequest

API = ApiDeclaration(ApiKey.SASL_HANDSHAKE, min_version=1)


def handle(ctx: RequestContext, req: SaslHandshakeRequest) -> Any:
    sasl = ctx.services.sasl
    enabled = sasl.enabled_mechanisms(ctx.listener_name) if sasl is not None else []
    if not enabled:  # not a SASL listener
        return SaslHandshakeResponse(error_code=ErrorCode.ILLEGAL_SASL_STATE, mechanisms=[])
    assert sasl is not None
    auth = ctx.connection.authentication
    listener = ctx.listener_name
    code = auth.handshake(req.mechanism, enabled, ctx.api_version,
                          lambda m: sasl.create(listener, m))
    resp = SaslHandshakeResponse(error_code=code, mechanisms=enabled)
    if code != ErrorCode.NONE:
        log_failed_authentication(ctx, req.mechanism, None,
                                  f"mechanism {req.mechanism!r} is not enabled "
                                  f"(enabled: {', '.join(enabled)})")
        return delayed(ctx, resp)
    return resp
