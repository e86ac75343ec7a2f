"""The console's routes: authentication, the pages, the JSON API, the actions, static assets.

Every request: (1) the Host header is checked when the console binds loopback (a page on
another site cannot reach it by DNS rebinding); (2) the user is authenticated
(console/auth.py; 401 with a Basic challenge); (3) the route renders console/data.py's view
as HTML (console/pages.py) or JSON (``/api/...``). Actions are POSTs with the form token,
refused (403) in read-only mode (``console.read.only``); each answers with a redirect to its
page carrying a one-time notice id (post/redirect/get: a reload does not produce twice).
"""

from __future__ import annotations

import asyncio
import datetime as _dt
import itertools
import json
import logging
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from importlib import resources
from typing import Any
from urllib.parse import unquote

from snakka.console import admin_pages, pages
from snakka.console.admin import ConsoleAdmin
from snakka.console.auth import ConsoleAuthenticator, CsrfTokens
from snakka.console.data import ActionResult, ConsoleData, Viewer
from snakka.console.http import HttpRequest, HttpResponse, HttpServer
from snakka.console.throughput import ThroughputHistory, Totals, sample_forever

log = logging.getLogger("snakka.console")

__all__ = ["ConsoleServer"]

# Notices of finished actions kept for their redirect (oldest dropped first).
CONSOLE_NOTICES_MAX = 256

_LOOPBACK_NAMES = ("localhost", "127.0.0.1", "[::1]", "::1")
_STATIC_TYPES = {".css": "text/css; charset=utf-8", ".js": "text/javascript; charset=utf-8"}


def _parse_time_ms(text: str) -> int | None:
    """Epoch milliseconds, or an ISO-8601 time (UTC when it names no zone)."""
    text = text.strip()
    if not text:
        return None
    if text.lstrip("-").isdigit():
        return int(text)
    try:
        t = _dt.datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None
    if t.tzinfo is None:
        t = t.replace(tzinfo=_dt.UTC)
    return int(t.timestamp() * 1000)


def _int(text: str | None) -> int | None:
    try:
        return int((text or "").strip())
    except ValueError:
        return None


def _config_lines(text: str) -> tuple[dict[str, str], str | None]:
    """``name=value`` lines of a form (blank lines skipped)."""
    out: dict[str, str] = {}
    for line in text.splitlines():
        if not line.strip():
            continue
        k, sep, v = line.partition("=")
        if not sep or not k.strip():
            return {}, f"configs: {line.strip()!r} is not name=value"
        out[k.strip()] = v.strip()
    return out, None


async def _refuse(message: str) -> ActionResult:
    return ActionResult(False, message, "INVALID_REQUEST")


class ConsoleServer:
    """The console on ``host:port``; :meth:`start` binds, :meth:`stop` closes."""

    def __init__(self, data: ConsoleData, auth: ConsoleAuthenticator, host: str, port: int, *,
                 read_only: bool, throughput: ThroughputHistory | None = None,
                 totals: Callable[[], Totals] | None = None,
                 admin: ConsoleAdmin | None = None) -> None:
        self.data = data
        self.admin = admin if admin is not None else ConsoleAdmin(data, [])
        self.auth = auth
        self.host = host
        self.read_only = read_only
        self.throughput = throughput
        self._totals = totals
        self.csrf = CsrfTokens()
        self.http = HttpServer(self.handle, host, port)
        self._notices: OrderedDict[str, tuple[bool, str]] = OrderedDict()
        self._notice_ids = itertools.count(1)
        self._sampler: asyncio.Task[None] | None = None
        self._static: dict[str, bytes] = {}
        self._check_host = host in ("localhost", "127.0.0.1", "::1")

    @property
    def port(self) -> int:
        return self.http.port

    @property
    def url(self) -> str:
        host = self.host if self.host not in ("", "0.0.0.0", "::") else "localhost"
        if ":" in host:
            host = f"[{host}]"
        return f"http://{host}:{self.port}/"

    async def start(self) -> None:
        for name in ("console.css", "console.js"):
            self._static[name] = resources.files("snakka.console").joinpath(
                "static", name).read_bytes()
        await self.http.start()
        if self.throughput is not None and self._totals is not None:
            self._sampler = asyncio.ensure_future(sample_forever(self.throughput, self._totals))

    async def stop(self) -> None:
        if self._sampler is not None:
            self._sampler.cancel()
            try:
                await self._sampler
            except asyncio.CancelledError:
                pass
            self._sampler = None
        await self.http.stop()

    # -- the request path ----------------------------------------------------------------
    async def handle(self, req: HttpRequest) -> HttpResponse:
        if self._check_host and not self._host_ok(req.headers.get("host", "")):
            return HttpResponse.text(421, "unknown Host for this console\n")
        if req.path.startswith("/static/"):
            return self._static_file(req.path[len("/static/"):])
        principal = await self.auth.authenticate(req.headers.get("authorization"))
        if principal is None:
            resp = HttpResponse.text(401, "authentication required: the user name and "
                                     "password of a SASL user of this broker\n")
            resp.headers["WWW-Authenticate"] = 'Basic realm="snakka console", charset="UTF-8"'
            return resp
        viewer = Viewer(principal, req.peer_host)
        if req.method == "POST":
            return await self._post(req, viewer)
        if req.method not in ("GET", "HEAD"):
            return HttpResponse.text(405, "GET or POST only\n")
        if req.path.startswith("/api/"):
            return await self._api(req, viewer)
        return await self._page(req, viewer)

    def _host_ok(self, host: str) -> bool:
        name = host.rsplit(":", 1)[0] if not host.endswith("]") else host
        return name.lower() in _LOOPBACK_NAMES

    def _static_file(self, name: str) -> HttpResponse:
        body = self._static.get(name)
        if body is None:
            return HttpResponse.text(404, "not found\n")
        ext = name[name.rfind("."):]
        return HttpResponse(200, body, _STATIC_TYPES[ext], {"Cache-Control": "max-age=300"})

    # -- JSON ----------------------------------------------------------------------------
    async def _api(self, req: HttpRequest, viewer: Viewer) -> HttpResponse:
        parts = [p for p in req.raw_path.split("/") if p][1:]
        parts = [unquote(p) for p in parts]
        result: Any = None
        match parts:
            case ["overview"]:
                result = await self.data.overview(viewer)
            case ["topics"]:
                result = await self.data.topics(viewer)
            case ["topics", name]:
                result = await self.data.topic(viewer, name)
            case ["topics", name, "messages"]:
                result = await self._messages(req, viewer, name)
                if isinstance(result, HttpResponse):
                    return result
            case ["groups"]:
                result = await self.data.groups(viewer)
            case ["groups", gid]:
                result = await self.data.group(viewer, gid)
            case ["share-groups", gid]:
                result = await self.data.share_group(viewer, gid)
            case ["acls"]:
                result = await self.admin.acls(viewer, req.query)
            case ["users"]:
                result = await self.admin.users(viewer)
            case ["quotas"]:
                result = await self.admin.quotas(viewer)
            case ["broker"]:
                result = await self.admin.broker(viewer)
            case ["throughput"]:
                if self.throughput is None:
                    result = {"series": [], "points": []}
                else:
                    result = self.throughput.series(int(time.time() * 1000), time.monotonic())
            case _:
                return self._json(404, {"error": "not found"})
        if result is None:
            return self._json(404, {"error": "not found (or not authorized)"})
        return self._json(200, result)

    @staticmethod
    def _json(status: int, obj: Any) -> HttpResponse:
        return HttpResponse(status, json.dumps(obj, separators=(",", ":")).encode(),
                            "application/json", {"Cache-Control": "no-store"})

    async def _messages(self, req: HttpRequest, viewer: Viewer, name: str
                        ) -> dict[str, Any] | HttpResponse | None:
        q = req.query
        ti = self.data.services.metadata.topics.get(name)
        if ti is None or not self.data.visible_topics(viewer, [name]):
            return None
        partition = _int(q.get("partition")) or 0
        if not 0 <= partition < ti.partitions:
            return self._json(400, {"error": "no such partition"})
        mode = q.get("from", "newest")
        offset = _int(q.get("offset")) if mode == "offset" else None
        ts = _parse_time_ms(q.get("timestamp", "")) if mode == "timestamp" else None
        if mode == "offset" and offset is None:
            return self._json(400, {"error": "offset: a number is required"})
        if mode == "timestamp" and ts is None:
            return self._json(400, {"error": "timestamp: ISO-8601 or epoch ms is required"})
        limit = _int(q.get("limit")) or 50
        return await self.data.messages(viewer, name, partition, offset=offset,
                                        timestamp_ms=ts, limit=limit, newest=mode == "newest")

    # -- pages ---------------------------------------------------------------------------
    async def _page(self, req: HttpRequest, viewer: Viewer) -> HttpResponse:
        parts = [p for p in req.raw_path.split("/") if p]
        parts = [unquote(p) for p in parts]
        notice = self._notices.pop(req.query.get("notice", ""), None)
        token = self.csrf.token(viewer.principal)
        ro = self.read_only
        title: str
        body: str
        section: str
        match parts:
            case []:
                d = await self.data.overview(viewer)
                title, section, body = "Overview", "overview", pages.overview(d)
            case ["topics"]:
                d = await self.data.topics(viewer)
                title, section = "Topics", "topics"
                body = pages.topics(d) + admin_pages.topics_admin(csrf=token, read_only=ro)
            case ["topics", name]:
                t = await self.data.topic(viewer, name)
                if t is None:
                    return self._not_found("no such topic (or you may not describe it)")
                title, section = f"Topic {name}", "topics"
                body = pages.topic(t, csrf=token, read_only=ro, admin=admin_pages.topic_admin(
                    t, csrf=token, read_only=ro))
            case ["topics", name, "messages"]:
                result = await self._messages(req, viewer, name)
                if result is None:
                    return self._not_found("no such topic (or you may not describe it)")
                if isinstance(result, HttpResponse):
                    return self._error(400, json.loads(result.body)["error"])
                nparts = self.data.services.metadata.topics[name].partitions
                title, section = f"Messages of {name}", "topics"
                body = pages.messages(result, nparts, req.query)
            case ["groups"]:
                d = await self.data.groups(viewer)
                title, section, body = "Consumer groups", "groups", pages.groups(d, False)
            case ["groups", gid]:
                g = await self.data.group(viewer, gid)
                if g is None:
                    return self._not_found("no such consumer group (or you may not describe "
                                           "it)")
                title, section = f"Consumer group {gid}", "groups"
                body = pages.group(g, csrf=token, read_only=ro, topics=self._topics(viewer))
            case ["share-groups"]:
                d = await self.data.groups(viewer)
                title, section, body = "Share groups", "shares", pages.groups(d, True)
            case ["share-groups", gid]:
                g = await self.data.share_group(viewer, gid)
                if g is None:
                    return self._not_found("no such share group (or you may not describe it)")
                title, section = f"Share group {gid}", "shares"
                body = pages.share_group(g, csrf=token, read_only=ro,
                                         topics=self._topics(viewer))
            case ["acls"]:
                d = await self.admin.acls(viewer, req.query)
                title, section = "ACLs", "acls"
                body = admin_pages.acls(d, csrf=token, read_only=ro)
            case ["users"]:
                d = await self.admin.users(viewer)
                title, section = "Users", "users"
                body = admin_pages.users(d, csrf=token, read_only=ro)
            case ["quotas"]:
                d = await self.admin.quotas(viewer)
                title, section = "Client quotas", "quotas"
                body = admin_pages.quotas(d, csrf=token, read_only=ro)
            case ["broker"]:
                d = await self.admin.broker(viewer)
                title, section = "Broker configs", "broker"
                body = admin_pages.broker(d, csrf=token, read_only=ro,
                                          name_filter=req.query.get("name", ""),
                                          dynamic_only=bool(req.query.get("dynamic")))
            case _:
                return self._not_found("no such page")
        return HttpResponse(200, pages.layout(
            title, section, body, principal=str(viewer.principal), read_only=ro,
            notice=notice).encode(), headers={"Cache-Control": "no-store"})

    def _topics(self, viewer: Viewer) -> list[str]:
        return [n for n in self.data.visible_topics(viewer, self.data.services.metadata.topics)
                if not self.data.services.metadata.topics[n].is_internal]

    def _not_found(self, text: str) -> HttpResponse:
        return self._error(404, text)

    @staticmethod
    def _error(status: int, text: str) -> HttpResponse:
        return HttpResponse(status, pages.error_page(status, text).encode())

    # -- actions -------------------------------------------------------------------------
    async def _post(self, req: HttpRequest, viewer: Viewer) -> HttpResponse:
        if self.read_only:
            return self._error(403, "the console is read-only (console.read.only=true)")
        if req.headers.get("sec-fetch-site", "same-origin") not in ("same-origin", "none"):
            return self._error(403, "cross-site request refused")
        origin = req.headers.get("origin")
        if origin is not None and origin != "null" and \
                origin.split("://", 1)[-1] != req.headers.get("host", ""):
            return self._error(403, "cross-origin request refused")
        form = req.form()
        if not self.csrf.valid(viewer.principal, form.get("csrf")):
            return self._error(403, "missing or stale form token: reload the page")
        parts = [p for p in req.raw_path.split("/") if p]
        parts = [unquote(p) for p in parts]
        action: Callable[[], Awaitable[ActionResult]]
        match parts:
            case ["topics", name, "produce"]:
                action = lambda: self._produce(viewer, name, form)  # noqa: E731
                back = f"/topics/{pages.u(name)}"
            case ["topics", name, "delete-records"]:
                partition, offset = _int(form.get("partition")), _int(form.get("offset"))
                if partition is None or offset is None:
                    return self._error(400, "partition and offset are required numbers")
                action = lambda: self.data.delete_records(  # noqa: E731
                    viewer, name, partition, offset)
                back = f"/topics/{pages.u(name)}"
            case ["groups", gid, "reset"]:
                strategy, value, err = self._strategy(form)
                if err:
                    return self._error(400, err)
                action = lambda: self.data.reset_group(  # noqa: E731
                    viewer, gid, form.get("topic") or None, strategy, value)
                back = f"/groups/{pages.u(gid)}"
            case ["share-groups", gid, "reset"]:
                strategy, value, err = self._strategy(form)
                if err:
                    return self._error(400, err)
                if not form.get("topic"):
                    return self._error(400, "a topic is required")
                action = lambda: self.data.reset_share_group(  # noqa: E731
                    viewer, gid, form["topic"], strategy, value)
                back = f"/share-groups/{pages.u(gid)}"
            case _:
                routed = self._admin_action(parts, viewer, form)
                if isinstance(routed, HttpResponse):
                    return routed
                action, back = routed
        result = await action()
        if back.endswith("/"):  # a created topic's page, when it was created
            back = back + pages.u(form.get("name", "").strip()) if result.ok else "/topics"
        elif result.ok and parts[-1] == "delete" and parts[0] == "topics":
            back = "/topics"
        log.info("console: %s by %s from %s: %s", req.path, viewer.principal, viewer.host,
                 result.message)
        nid = str(next(self._notice_ids))
        self._notices[nid] = (result.ok, result.message)
        while len(self._notices) > CONSOLE_NOTICES_MAX:
            self._notices.popitem(last=False)
        return HttpResponse.redirect(f"{back}?notice={nid}")

    def _admin_action(self, parts: list[str], viewer: Viewer, form: dict[str, str]
                      ) -> tuple[Callable[[], Awaitable[ActionResult]], str] | HttpResponse:
        """The administration POSTs (console/admin.py): the action and the page to go back
        to (a trailing '/' there: the created topic's page)."""
        adm = self.admin
        match parts:
            case ["acls", "create"]:
                return (lambda: adm.create_acl(viewer, form)), "/acls"
            case ["acls", "delete"]:
                return (lambda: adm.delete_acl(viewer, form)), "/acls"
            case ["users", "upsert"]:
                iterations = form.get("iterations", "").strip()
                iters = _int(iterations)
                if iterations and iters is None:
                    return self._error(400, "iterations: a number is required")
                return (lambda: adm.upsert_user(
                    viewer, form.get("user", "").strip(), form.get("mechanism", ""),
                    form.get("password", ""), iters)), "/users"
            case ["users", "delete"]:
                return (lambda: adm.delete_user(viewer, form.get("user", ""),
                                                form.get("mechanism", ""))), "/users"
            case ["topics", "create"]:
                raw = form.get("partitions", "").strip()
                partitions = _int(raw)
                if raw and partitions is None:
                    return self._error(400, "partitions: a number is required")
                configs, err = _config_lines(form.get("configs", ""))
                if err:
                    return self._error(400, err)
                return (lambda: adm.create_topic(viewer, form.get("name", "").strip(),
                                                 partitions, configs)), "/topics/"
            case ["topics", name, "config"]:
                op = form.get("op", "set")
                if op not in ("set", "delete"):
                    return self._error(400, "op: set or delete")
                value = form.get("value", "") if op == "set" else None
                return (lambda: adm.alter_topic_config(viewer, name, form.get("key", "").strip(),
                                                       value)), f"/topics/{pages.u(name)}"
            case ["topics", name, "partitions"]:
                count = _int(form.get("count"))
                if count is None:
                    return self._error(400, "count: a number is required")
                return (lambda: adm.add_partitions(viewer, name, count)), \
                    f"/topics/{pages.u(name)}"
            case ["topics", name, "delete"]:
                back = f"/topics/{pages.u(name)}"
                if form.get("confirm", "").strip() != name:
                    return (lambda: _refuse("type the topic's name to confirm its "
                                            "deletion")), back
                return (lambda: adm.delete_topic(viewer, name)), back
            case ["quotas", "alter"]:
                remove = bool(form.get("remove"))
                amount: float | None = None
                if not remove:
                    try:
                        amount = float(form.get("value", "").strip())
                    except ValueError:
                        return self._error(400, "value: a number is required")
                return (lambda: adm.alter_quota(
                    viewer, form.get("entity_type", ""),
                    form.get("entity_name", "").strip() or None, form.get("key", "").strip(),
                    amount)), "/quotas"
            case ["broker", "config"]:
                op = form.get("op", "set")
                if op not in ("set", "delete"):
                    return self._error(400, "op: set or delete")
                value = form.get("value", "") if op == "set" else None
                return (lambda: adm.alter_broker_config(
                    viewer, form.get("scope", ""), form.get("key", "").strip(), value)), \
                    "/broker"
        return self._not_found("no such action")

    @staticmethod
    def _strategy(form: dict[str, str]) -> tuple[str, int | None, str | None]:
        strategy = form.get("strategy", "")
        raw = form.get("value", "")
        if strategy in ("to-earliest", "to-latest"):
            return strategy, None, None
        if strategy == "to-offset":
            v = _int(raw)
            return strategy, v, None if v is not None and v >= 0 else \
                "to-offset needs a non-negative offset"
        if strategy == "to-datetime":
            v = _parse_time_ms(raw)
            return strategy, v, None if v is not None and v >= 0 else \
                "to-datetime needs an ISO-8601 time or epoch milliseconds"
        return strategy, None, "unknown strategy"

    async def _produce(self, viewer: Viewer, topic: str, form: dict[str, str]
                       ) -> ActionResult:
        headers: list[tuple[str, bytes | None]] = []
        for line in form.get("headers", "").splitlines():
            if not line.strip():
                continue
            k, sep, v = line.partition("=")
            headers.append((k.strip(), v.encode() if sep else None))
        partition = _int(form.get("partition"))
        key = form.get("key", "")
        # Browsers send textareas with CRLF line ends: store what the user typed (LF).
        value = form.get("value", "").replace("\r\n", "\n")
        return await self.data.produce(viewer, topic, partition, key.encode() if key else None,
                                       value.encode(), headers)
