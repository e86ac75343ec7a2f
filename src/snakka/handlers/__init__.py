"""Request handlers: one module per Kafka API, named after it (``produce.py`` is API key 0).

Each handler module declares at its top the API it serves
(``API = ApiDeclaration(ApiKey.PRODUCE)``, see handlers/context.py) and defines
``handle(ctx, request)``, which returns the response object, ``None`` for no response (acks=0
produce), or a coroutine when it must wait (long-poll fetch, fsync). Handlers translate between
the generated protocol objects and the cores/storage; business logic lives in the cores. A
declaration may narrow the advertised version range (``min_version`` / ``max_version``);
otherwise every stable version the schemas define is served and advertised.

Discovery: :func:`load_handlers` imports every module of this package (pkgutil) and registers
those that declare ``API``; there is no central list to forget to update. Modules whose name
starts with ``_`` are helpers and are skipped; other modules without ``API`` (context.py,
services.py) must not define ``handle`` either, so a handler that lost its declaration is an
error at start-up, not an API silently missing from ApiVersions. Only the registered APIs are
advertised in ApiVersions (handlers/api_versions.py reads this registry); any other API key
closes the connection with a log line (server/dispatch.py).
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Callable
from dataclasses import dataclass
from types import ModuleType
from typing import Any

from snakka.protocol.apis import api_spec
from snakka.security.authorizer import Action

__all__ = ["Handler", "HandlerRegistry", "discover_handler_modules", "load_handlers"]


@dataclass(frozen=True, slots=True)
class Handler:
    """One served API: its declared version range and the module's ``handle``."""

    api_key: int
    name: str
    min_version: int
    max_version: int
    handle: Callable[[Any, Any], Any]
    module: Any
    actions: tuple[Action, ...] = ()  # authorized by dispatch before ``handle`` runs

    def unsupported_version_response(self, apis: HandlerRegistry) -> Any:
        """KIP-511 (ApiVersions only): the answer to a version above ours."""
        return self.module.unsupported_version_response(apis)


# API key -> Handler. A plain dict: tests swap a handler in place (dataclasses.replace).
HandlerRegistry = dict[int, Handler]


def discover_handler_modules() -> list[ModuleType]:
    """Every handler module of this package (those declaring ``API``), in name order."""
    out = []
    for info in sorted(pkgutil.iter_modules(__path__), key=lambda m: m.name):
        if info.name.startswith("_") or info.ispkg:
            continue
        mod = importlib.import_module(f"{__name__}.{info.name}")
        if hasattr(mod, "API"):
            out.append(mod)
        elif hasattr(mod, "handle"):
            raise RuntimeError(f"handler module {mod.__name__} defines handle() but declares no "
                               "API (API = ApiDeclaration(ApiKey....))")
    return out


def load_handlers() -> HandlerRegistry:
    out: HandlerRegistry = {}
    for mod in discover_handler_modules():
        decl = mod.API
        key = int(decl.api_key)
        spec = api_spec(key)
        assert spec is not None, mod.__name__
        if key in out:
            raise RuntimeError(f"API key {key} is declared by both {out[key].module.__name__} "
                               f"and {mod.__name__}")
        min_v = spec.min_version if decl.min_version is None else decl.min_version
        max_v = spec.max_stable_version if decl.max_version is None else decl.max_version
        if not spec.min_version <= min_v <= max_v <= spec.max_version:
            raise RuntimeError(f"{mod.__name__}: versions {min_v}-{max_v} are outside "
                               f"{spec.name}'s {spec.min_version}-{spec.max_version}")
        out[key] = Handler(key, spec.name, min_v, max_v, mod.handle, mod, decl.actions)
    return out
