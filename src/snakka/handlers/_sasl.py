"""What the SASL handlers share: the failed-authentication answer (delayed by
``connection.failed.authentication.delay.ms``, KIP-306) and its one log line."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable
from typing import TypeVar

from snakka.handlers.context import RequestContext

log = logging.getLogger("snakka.security")

T = TypeVar("T")


def log_failed_authentication(ctx: RequestContext, mechanism: str | None, user: str | None,
                              reason: str | None) -> None:
    """One INFO line per failed authentication: peer, listener, mechanism, user, why. Never a
    password (the mechanisms' reasons never carry one)."""
    log.info("Failed authentication with %s on listener %s (mechanism %s, user %s): %s",
             ctx.connection.peer, ctx.listener_name, mechanism or "-",
             repr(user) if user is not None else "-", reason or "failed")


def delayed(ctx: RequestContext, response: T) -> T | Awaitable[T]:
    """The failure response, after ``connection.failed.authentication.delay.ms`` (the
    connection closes once it is written)."""
    sasl = ctx.services.sasl
    delay_ms = sasl.failed_authentication_delay_ms if sasl is not None else 0
    if delay_ms <= 0:
        return response

    async def later() -> T:
        await asyncio.sleep(delay_ms / 1000)
        return response

    return later()
