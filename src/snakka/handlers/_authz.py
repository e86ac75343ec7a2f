"""Authorization helpers shared by handlers (the checks themselves are each handler's, as in
Kafka's KafkaApis; the decisions are the authorizer's, through ``RequestContext``).

What it owns: answering a whole request with an authorization error the way Kafka's
``getErrorResponse`` does, without going through dispatch's failure path (a denial is not a
handler failure: no ERROR log line; the authorizer logs denials).
"""

from __future__ import annotations

from typing import Any

from snakka.handlers.context import RequestContext
from snakka.protocol.error_response import error_response
from snakka.protocol.errors import ErrorCode

__all__ = ["denied_response"]


def denied_response(ctx: RequestContext, request: Any, code: ErrorCode) -> Any:
    """The request's error response with ``code`` everywhere it has an error code."""
    handler = ctx.apis.get(ctx.api_key)
    return error_response(ctx.api_key, ctx.api_version, request, code, code.message,
                          getattr(handler, "module", None))
