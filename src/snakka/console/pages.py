"""The console's HTML: one function per page, rendering console/data.py's dicts.

Escaping rule: every value that did not come from this file's own literals goes through
:func:`e` (HTML text and attribute values alike; ``quote=True`` escapes both quote kinds) or,
inside a URL, through :func:`u` then :func:`e`. Topic names, group ids, member and client ids,
keys, values and headers are all user-controlled: a record's value is someone's input. The
HTTP layer adds a Content-Security-Policy allowing only this origin's script, so a missed
escape still could not run injected script (tests/console checks both).

No templates engine: the pages are small, and plain functions keep them fast and typed.
"""

from __future__ import annotations

import datetime as _dt
import html
from collections.abc import Iterable
from typing import Any
from urllib.parse import quote, urlencode

__all__ = ["e", "u"]


def e(value: object) -> str:
    """HTML-escape ``value`` for text or a quoted attribute."""
    return html.escape("" if value is None else str(value), quote=True)


def u(value: object) -> str:
    """Percent-encode one path segment (a group id may hold '/')."""
    return quote(str(value), safe="")


def _num(n: object) -> str:
    if n is None:
        return "–"
    if isinstance(n, float):
        return f"{n:,.1f}"
    return f"{n:,}" if isinstance(n, int) else e(n)


def _bytes(n: int | float | None) -> str:
    if n is None:
        return "–"
    v = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(v) < 1024 or unit == "TiB":
            return f"{v:,.0f} {unit}" if unit == "B" else f"{v:,.1f} {unit}"
        v /= 1024
    return f"{v:.1f} TiB"  # pragma: no cover


def _duration_ms(ms: int | None) -> str:
    if ms is None:
        return "–"
    if ms < 0:
        return "unlimited"
    s = ms / 1000
    for unit, size in (("d", 86400), ("h", 3600), ("min", 60)):
        if s >= size:
            return f"{s / size:g} {unit}" if s % size == 0 else f"{s / size:.1f} {unit}"
    return f"{s:.0f} s" if s >= 1 else f"{ms} ms"


def _ts(ms: int | None) -> str:
    if ms is None or ms < 0:
        return "–"
    return _dt.datetime.fromtimestamp(ms / 1000, _dt.UTC).isoformat(timespec="milliseconds") \
        .replace("+00:00", "Z")


def _table(headers: Iterable[str], rows: Iterable[str], *, cls: str = "",
           empty: str = "nothing here") -> str:
    body = "".join(rows)
    head = "".join(f"<th>{h}</th>" for h in headers)
    if not body:
        return f'<p class="empty">{e(empty)}</p>'
    return f'<table class="{cls}"><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>'


NAV = (("/", "Overview", "overview"), ("/topics", "Topics", "topics"),
       ("/groups", "Consumer groups", "groups"), ("/share-groups", "Share groups", "shares"),
       ("/acls", "ACLs", "acls"), ("/users", "Users", "users"), ("/quotas", "Quotas", "quotas"),
       ("/broker", "Broker", "broker"))


def layout(title: str, section: str, body: str, *, principal: str, read_only: bool,
           notice: tuple[bool, str] | None = None) -> str:
    nav = "".join(f'<a href="{href}" class="{"active" if key == section else ""}"'
                  f' id="nav-{key}">{label}</a>' for href, label, key in NAV)
    flash = ""
    if notice is not None:
        ok, text = notice
        flash = (f'<div class="notice {"ok" if ok else "error"}" id="notice" role="status">'
                 f'{e(text)}</div>')
    ro = '<span class="badge" id="read-only">read-only</span>' if read_only else ""
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{e(title)} · snakka console</title>
<link rel="stylesheet" href="/static/console.css">
<link rel="icon" href="data:,">
<script src="/static/console.js" defer></script>
</head><body>
<header><span class="brand">snakka</span><nav>{nav}</nav>
<span class="who">{ro}<span id="principal">{e(principal)}</span></span></header>
<main>{flash}<h1>{e(title)}</h1>
{body}
</main></body></html>"""


def _form(action: str, csrf: str, fields: str, button: str, *, confirm: str = "",
          form_id: str = "") -> str:
    c = f' data-confirm="{e(confirm)}"' if confirm else ""
    i = f' id="{e(form_id)}"' if form_id else ""
    return (f'<form method="post" action="{e(action)}" class="action"{c}{i}>'
            f'<input type="hidden" name="csrf" value="{e(csrf)}">{fields}'
            f'<button type="submit">{e(button)}</button></form>')


# -- overview ----------------------------------------------------------------------------
def overview(d: dict[str, Any]) -> str:
    tp = d.get("throughput") or {}
    cards = [("Topics", _num(d["topics"]), f'{d["internal_topics"]} internal'),
             ("Partitions", _num(d["partitions"]), "all led by this broker"),
             ("Data", _bytes(d["size_bytes"]), f'{_num(d["messages"])} records'),
             ("Consumer groups", _num(d["groups"]["classic"] + d["groups"]["consumer"]),
              f'{d["groups"]["consumer"]} KIP-848, {d["groups"]["classic"]} classic'),
             ("Share groups", _num(d["groups"]["share"]), "KIP-932"),
             ("Connections", _num(d["connections"]), "Kafka clients now"),
             ("In", f'{_bytes(tp.get("bytes_in", 0))}/s',
              f'{tp.get("messages_in", 0):,.0f} records/s'),
             ("Out", f'{_bytes(tp.get("bytes_out", 0))}/s',
              f'{tp.get("requests", 0):,.0f} requests/s')]
    card_html = "".join(f'<div class="card"><div class="label">{e(a)}</div>'
                        f'<div class="value">{b}</div><div class="sub">{e(c)}</div></div>'
                        for a, b, c in cards)
    listeners = _table(["Listener", "Address", "Security protocol"], (
        f'<tr><td>{e(ln["name"])}</td><td>{e(ln["address"])}</td>'
        f'<td>{e(ln["protocol"])}</td></tr>' for ln in d["listeners"]))
    up = _duration_ms(d["uptime_ms"])
    return f"""<div class="cards" id="overview-cards">{card_html}</div>
<section><h2>Throughput</h2>{charts()}</section>
<section><h2>Broker</h2>
<dl class="facts"><dt>Cluster id</dt><dd id="cluster-id">{e(d["cluster_id"])}</dd>
<dt>Node id</dt><dd>{e(d["node_id"])}</dd><dt>Version</dt><dd>snakka {e(d["version"])}</dd>
<dt>Uptime</dt><dd>{e(up)}</dd>
<dt>Tiered storage</dt><dd>{"enabled" if d["tiered_storage"] else "disabled"}</dd></dl>
{listeners}</section>"""


def charts() -> str:
    return ('<div class="charts">'
            '<figure class="chart" data-chart="bytes" id="chart-bytes"><figcaption>'
            '<span class="k in">bytes in/s</span> <span class="k out">bytes out/s</span>'
            '</figcaption><svg viewBox="0 0 600 160" preserveAspectRatio="none"></svg>'
            '<div class="chart-now"></div></figure>'
            '<figure class="chart" data-chart="records" id="chart-records"><figcaption>'
            '<span class="k in">records in/s</span> <span class="k out">requests/s</span>'
            '</figcaption><svg viewBox="0 0 600 160" preserveAspectRatio="none"></svg>'
            '<div class="chart-now"></div></figure></div>')


# -- topics ------------------------------------------------------------------------------
def topics(d: dict[str, Any]) -> str:
    rows = []
    for t in d["topics"]:
        tags = ('<span class="tag">internal</span>' if t["internal"] else "") + \
               ('<span class="tag">tiered</span>' if t["remote_storage"] else "")
        rows.append(
            f'<tr data-topic="{e(t["name"])}"><td><a href="/topics/{e(u(t["name"]))}">'
            f'{e(t["name"])}</a> {tags}</td><td class="n">{_num(t["partitions"])}</td>'
            f'<td class="n">{_num(t["messages"])}</td><td class="n">{_bytes(t["size_bytes"])}'
            f'</td><td class="n">{t["messages_in_per_sec"]:,.1f}</td>'
            f'<td>{e(t["cleanup_policy"])}</td><td>{_duration_ms(t["retention_ms"])}</td>'
            f'<td>{"unlimited" if (t["retention_bytes"] or -1) < 0 else _bytes(t["retention_bytes"])}'
            f'</td></tr>')
    return _table(["Topic", "Partitions", "Records", "Size", "In (rec/s)", "Cleanup",
                   "Retention", "Retention bytes"], rows, cls="topics", empty="no topics")


def topic(d: dict[str, Any], *, csrf: str, read_only: bool, admin: str = "") -> str:
    """A topic's page; ``admin``: the administration forms (console/admin_pages.py), shown
    after the record actions and before the (long) configs table."""
    name = d["name"]
    base = f"/topics/{u(name)}"
    rows = []
    for p in d["partitions"]:
        if not p["online"]:
            rows.append(f'<tr><td class="n">{p["partition"]}</td><td colspan="9">offline</td>'
                        "</tr>")
            continue
        local = (f'{_num(p["local_log_start_offset"])}' if p["remote"] else "same")
        rows.append(
            f'<tr data-partition="{p["partition"]}"><td class="n">{p["partition"]}</td>'
            f'<td class="n">{p["leader"]}</td><td class="n">{p["leader_epoch"]}</td>'
            f'<td class="n lso">{_num(p["log_start_offset"])}</td><td class="n">{local}</td>'
            f'<td class="n hw">{_num(p["high_watermark"])}</td>'
            f'<td class="n">{_num(p["messages"])}</td>'
            f'<td class="n">{_bytes(p["size_bytes"])}</td><td class="n">{p["segments"]}</td>'
            f'<td><a href="{e(base)}/messages?partition={p["partition"]}">browse</a></td></tr>')
    parts = _table(["Partition", "Leader", "Epoch", "Log start", "Local start",
                    "High watermark", "Records", "Size (local)", "Segments", ""], rows,
                   cls="partitions")
    cfg_rows = (f'<tr class="{"default" if c["default"] else "set"}"><td>{e(c["name"])}</td>'
                f'<td class="v">{"(sensitive)" if c["sensitive"] else e(c["value"])}</td>'
                f'<td>{e(c["source"])}</td></tr>' for c in d["configs"])
    cfg = _table(["Config", "Value", "Source"], cfg_rows, cls="configs",
                 empty=f'configs not shown: {d["config_error"] or "none"}')
    actions = ""
    if not read_only:
        opts = "".join(f'<option value="{p["partition"]}">{p["partition"]}</option>'
                       for p in d["partitions"])
        produce = _form(
            f"{base}/produce", csrf,
            '<label>Partition <select name="partition"><option value="">by key / any'
            f"</option>{opts}</select></label>"
            '<label>Key <input name="key" id="produce-key" autocomplete="off"></label>'
            '<label class="wide">Value <textarea name="value" id="produce-value" rows="3">'
            "</textarea></label>"
            '<label class="wide"><span>Headers (one <code>name=value</code> a line)</span>'
            '<textarea name="headers" id="produce-headers" rows="2"></textarea></label>',
            "Produce", form_id="produce-form")
        delete = _form(
            f"{base}/delete-records", csrf,
            f'<label>Partition <select name="partition">{opts}</select></label>'
            '<label>Before offset <input name="offset" id="delete-offset" '
            'placeholder="-1: all" inputmode="numeric"></label>',
            "Delete records", confirm="Delete the records before this offset? This cannot "
            "be undone.", form_id="delete-form")
        write_note = "" if d["can_write"] else \
            '<p class="warn">You may not WRITE to this topic: producing will be refused.</p>'
        actions = (f'<section class="actions"><h2>Produce a test message</h2>{write_note}'
                   f"{produce}</section><section class=\"actions\"><h2>Delete records</h2>"
                   f"{delete}</section>")
    tiered = "tiered storage on" if any(p.get("remote") for p in d["partitions"]) else ""
    return (f'<p class="sub">id <code>{e(d["topic_id"])}</code> {e(tiered)}'
            f' · <a href="{e(base)}/messages">browse messages</a></p>'
            f"<section><h2>Partitions</h2>{parts}</section>{actions}{admin}"
            f"<section><h2>Configs</h2>{cfg}</section>")


def _value_html(v: dict[str, Any] | None) -> str:
    if v is None:
        return '<span class="null">null</span>'
    cut = f'<span class="tag">{_bytes(v["size"])}, cut</span>' if v["truncated"] else ""
    if v["encoding"] == "base64":
        return f'<span class="tag">base64</span><code class="b64">{e(v["text"])}</code>{cut}'
    if "json" in v:
        return f'<pre class="json">{e(v["json"])}</pre>'
    return f'<pre class="text">{e(v["text"])}</pre>{cut}'


def messages(d: dict[str, Any], partitions: int, query: dict[str, str]) -> str:
    name = d["topic"]
    base = f"/topics/{u(name)}/messages"
    opts = "".join(f'<option value="{p}"{" selected" if p == d["partition"] else ""}>{p}'
                   "</option>" for p in range(partitions))
    mode = query.get("from", "newest")
    modes = "".join(f'<option value="{m}"{" selected" if m == mode else ""}>{label}</option>'
                    for m, label in (("newest", "newest"), ("oldest", "oldest"),
                                     ("offset", "offset"), ("timestamp", "timestamp")))
    form = (f'<form method="get" action="{e(base)}" class="browse" id="browse-form">'
            f'<label>Partition <select name="partition">{opts}</select></label>'
            f'<label>From <select name="from">{modes}</select></label>'
            f'<label>Offset <input name="offset" value="{e(query.get("offset", ""))}" '
            'inputmode="numeric"></label>'
            f'<label>Timestamp <input name="timestamp" value="{e(query.get("timestamp", ""))}"'
            ' placeholder="2025-01-31T12:00:00Z or epoch ms"></label>'
            f'<label>Limit <input name="limit" value="{e(d["limit"])}" size="4" '
            'inputmode="numeric"></label><button type="submit">Show</button></form>')
    rows = []
    for m in d["messages"]:
        hdrs = "".join(f'<div class="hdr"><b>{e(h["key"])}</b>: {_value_html(h["value"])}'
                       "</div>" for h in m["headers"])
        rows.append(f'<tr class="msg" data-offset="{m["offset"]}"><td class="n">{m["offset"]}'
                    f'</td><td class="ts">{_ts(m["timestamp"])}</td>'
                    f'<td class="key">{_value_html(m["key"])}</td>'
                    f'<td class="value">{_value_html(m["value"])}</td>'
                    f'<td class="headers">{hdrs}</td></tr>')
    err = f'<p class="notice error" id="browse-error">{e(d["error"])}</p>' if d["error"] else ""
    hw = d.get("high_watermark")
    info = (f'<p class="sub">partition {d["partition"]}: log start '
            f'{_num(d.get("log_start_offset"))}, high watermark {_num(hw)}; showing '
            f'{len(d["messages"])} from offset {_num(d.get("start_offset"))}</p>')
    nxt = ""
    if d["messages"] and hw is not None and d["next_offset"] < hw:
        q = urlencode({"partition": d["partition"], "from": "offset",
                       "offset": d["next_offset"], "limit": d["limit"]})
        nxt = f'<p><a id="next-page" href="{e(base)}?{e(q)}">next {d["limit"]} →</a></p>'
    table = _table(["Offset", "Timestamp (UTC)", "Key", "Value", "Headers"], rows,
                   cls="messages", empty="no records")
    return (f'<p class="sub"><a href="/topics/{e(u(name))}">← topic {e(name)}</a></p>'
            f"{form}{err}{info}{table}{nxt}")


# -- groups ------------------------------------------------------------------------------
def groups(d: dict[str, Any], share: bool) -> str:
    rows = []
    for g in d["groups"]:
        if (g["type"] == "share") != share:
            continue
        href = f'/{"share-groups" if share else "groups"}/{u(g["group_id"])}'
        rows.append(f'<tr data-group="{e(g["group_id"])}"><td><a href="{e(href)}">'
                    f'{e(g["group_id"])}</a></td><td>{e(g["type"])}</td>'
                    f'<td>{e(g["state"])}</td></tr>')
    return _table(["Group", "Type", "State"], rows, cls="groups",
                  empty="no share groups" if share else "no consumer groups")


def _reset_form(action: str, csrf: str, topics: list[str], *, topic_required: bool) -> str:
    topt = "" if topic_required else '<option value="">all committed</option>'
    topt += "".join(f'<option value="{e(t)}">{e(t)}</option>' for t in topics)
    return _form(action, csrf,
                 f'<label>Topic <select name="topic">{topt}</select></label>'
                 '<label>Strategy <select name="strategy">'
                 '<option value="to-earliest">to earliest</option>'
                 '<option value="to-latest">to latest</option>'
                 '<option value="to-offset">to offset</option>'
                 '<option value="to-datetime">to datetime</option></select></label>'
                 '<label>Offset / datetime <input name="value" id="reset-value" '
                 'placeholder="offset, ISO time or epoch ms"></label>',
                 "Reset offsets", confirm="Reset this group's offsets?", form_id="reset-form")


def group(d: dict[str, Any], *, csrf: str, read_only: bool, topics: list[str]) -> str:
    members = _table(["Member", "Client id", "Host", "Assignment"], (
        f'<tr><td><code>{e(m["member_id"])}</code></td><td>{e(m["client_id"])}</td>'
        f'<td>{e(m["client_host"])}</td><td>{_assignment(m["assignment"])}</td></tr>'
        for m in d["members"]), cls="members", empty="no members (the group is empty)")
    offsets = _table(["Topic", "Partition", "Committed", "High watermark", "Lag", "Member"], (
        f'<tr data-tp="{e(r["topic"])}/{r["partition"]}"><td>{e(r["topic"])}</td>'
        f'<td class="n">{r["partition"]}</td>'
        f'<td class="n committed">{_num(r["committed_offset"])}</td>'
        f'<td class="n">{_num(r["high_watermark"])}</td><td class="n lag">{_num(r["lag"])}</td>'
        f'<td><code>{e(r["member_id"] or "")}</code></td></tr>' for r in d["offsets"]),
        cls="offsets", empty="no committed offsets")
    facts = (f'<dl class="facts"><dt>Type</dt><dd id="group-type">{e(d["type"])}</dd>'
             f'<dt>State</dt><dd id="group-state">{e(d["state"])}</dd>'
             f'<dt>Total lag</dt><dd id="total-lag">{_num(d["total_lag"])}</dd></dl>')
    reset = ""
    if not read_only:
        if d["can_reset"]:
            reset = _reset_form(f'/groups/{u(d["group_id"])}/reset', csrf, topics,
                                topic_required=False)
        else:
            reset = ('<p class="sub">Offsets can be reset once the group is empty (stop its '
                     "consumers), as with kafka-consumer-groups.sh.</p>")
        reset = f'<section class="actions"><h2>Reset offsets</h2>{reset}</section>'
    return (f"{facts}<section><h2>Members</h2>{members}</section>"
            f"<section><h2>Offsets and lag</h2>{offsets}</section>{reset}")


def _assignment(a: dict[str, list[int]]) -> str:
    if not a:
        return "–"
    return ", ".join(f'{e(t)} [{", ".join(map(str, ps))}]' for t, ps in sorted(a.items()))


def share_group(d: dict[str, Any], *, csrf: str, read_only: bool, topics: list[str]) -> str:
    members = _table(["Member", "Client id", "Host", "Epoch", "Assignment"], (
        f'<tr><td><code>{e(m["member_id"])}</code></td><td>{e(m["client_id"])}</td>'
        f'<td>{e(m["client_host"])}</td><td class="n">{m["member_epoch"]}</td>'
        f'<td>{_assignment(m["assignment"])}</td></tr>' for m in d["members"]),
        cls="members", empty="no members (the group is empty)")
    states = ("available", "acquired", "acknowledged", "archived")
    rows = []
    for p in d["partitions"]:
        counts = "".join(f'<td class="n {s}">{_num(p["in_flight"].get(s, 0))}</td>'
                         for s in states)
        rows.append(f'<tr data-tp="{e(p["topic"])}/{p["partition"]}"><td>{e(p["topic"])}</td>'
                    f'<td class="n">{p["partition"]}</td><td class="n spso">'
                    f'{_num(p["start_offset"])}</td><td class="n speo">{_num(p["end_offset"])}'
                    f'</td><td class="n">{_num(p["high_watermark"])}</td>'
                    f'<td class="n lag">{_num(p["lag"])}</td>{counts}</tr>')
    parts = _table(["Topic", "Partition", "SPSO", "SPEO", "High watermark", "Lag",
                    "Available", "Acquired", "Acknowledged", "Archived"], rows,
                   cls="share-partitions", empty="no share-partitions loaded")
    details = []
    for p in d["partitions"]:
        if not p["runs"]:
            continue
        hist = "; ".join(f'{e(s)}: ' + ", ".join(f"{n}× delivered {k}" for k, n in c.items())
                         for s, c in p["by_delivery_count"].items())
        runs = _table(["Offsets", "State", "Delivery count", "Owner"], (
            f'<tr><td class="n">{r["first_offset"]}–{r["last_offset"]}</td>'
            f'<td>{e(r["state"])}</td><td class="n">{r["delivery_count"]}</td>'
            f'<td><code>{e(r["member_id"] or "")}</code></td></tr>' for r in p["runs"]),
            cls="runs")
        more = '<p class="sub">(first runs only)</p>' if p["runs_truncated"] else ""
        details.append(f'<details><summary>{e(p["topic"])}-{p["partition"]}: in-flight records'
                       f'</summary><p class="sub">by delivery count: {hist}</p>{runs}{more}'
                       "</details>")
    facts = (f'<dl class="facts"><dt>Type</dt><dd>share</dd><dt>State</dt>'
             f'<dd id="group-state">{e(d["state"])}</dd><dt>Epoch</dt>'
             f'<dd>{e(d["group_epoch"])}</dd></dl>')
    reset = ""
    if not read_only:
        if d["can_reset"]:
            reset = _reset_form(f'/share-groups/{u(d["group_id"])}/reset', csrf, topics,
                                topic_required=True)
        else:
            reset = ('<p class="sub">The start offsets can be reset once the group is empty '
                     "(kafka-share-groups.sh --reset-offsets).</p>")
        reset = f'<section class="actions"><h2>Reset start offsets</h2>{reset}</section>'
    return (f"{facts}<section><h2>Members</h2>{members}</section>"
            f"<section><h2>Share-partitions</h2>{parts}{''.join(details)}</section>{reset}")


def error_page(status: int, text: str) -> str:
    return (f'<!doctype html><html lang="en"><head><meta charset="utf-8"><title>{status}'
            '</title><link rel="stylesheet" href="/static/console.css"></head><body><main>'
            f'<h1>{status}</h1><p id="error-text">{e(text)}</p><p><a href="/">overview</a></p>'
            "</main></body></html>")
