"""The HTML of the console's administration (console/admin.py's data): the ACLs, users, client
quotas and broker configs pages, and the topic forms (create on the topics page; config,
partitions and delete on a topic's page).

Same escaping rule as console/pages.py: every value not from this file's literals goes through
:func:`e` (and :func:`u` inside a URL). ACL principals and resource names, user names, quota
entity names, dynamic config values are all user-controlled. Forms are left out in read-only
mode; the ones a user may not use (no ALTER or ALTER_CONFIGS on the cluster) are shown with a
note saying the broker will refuse them, so what the user is missing is visible rather than
silently hidden.
"""

from __future__ import annotations

from typing import Any

from snakka.console.pages import _bytes, _form, _table, e, u
from snakka.protocol.acls import AclOperation, AclPermissionType, PatternType, ResourceType

__all__ = ["acls", "broker", "quotas", "topic_admin", "topics_admin", "users"]

_ACL_FIELDS = ("resource_type", "resource_name", "pattern_type", "principal", "host",
               "operation", "permission_type")


def _options(names: list[str], selected: str | None) -> str:
    return "".join(f'<option value="{e(n)}"{" selected" if n == selected else ""}>{e(n)}'
                   "</option>" for n in names)


def _names(cls: Any, *, concrete: bool) -> list[str]:
    skip = {"UNKNOWN", "ANY", "MATCH"} if concrete else {"UNKNOWN"}
    return [m.name for m in cls if m.name not in skip]


def _no_alter(what: str) -> str:
    return (f'<p class="warn">You may not ALTER the cluster: the broker will refuse to {what} '
            "(CLUSTER_AUTHORIZATION_FAILED).</p>")


# -- ACLs --------------------------------------------------------------------------------
def acls(d: dict[str, Any], *, csrf: str, read_only: bool) -> str:
    f = d["filter"]
    filt = (
        '<form method="get" action="/acls" class="browse" id="acl-filter">'
        f'<label>Resource type <select name="resource_type">'
        f'{_options(_names(ResourceType, concrete=False), f["resource_type"])}</select></label>'
        f'<label>Resource name <input name="resource_name" value="{e(f["resource_name"] or "")}"'
        ' placeholder="any"></label>'
        f'<label>Pattern type <select name="pattern_type">'
        f'{_options(_names(PatternType, concrete=False), f["pattern_type"])}</select></label>'
        f'<label>Principal <input name="principal" value="{e(f["principal"] or "")}" '
        'placeholder="any, e.g. User:alice"></label>'
        '<button type="submit">Filter</button></form>')
    rows = []
    for a in d["acls"]:
        delete = ""
        if not read_only:
            hidden = "".join(f'<input type="hidden" name="{k}" value="{e(a[k])}">'
                             for k in _ACL_FIELDS)
            delete = _form("/acls/delete", csrf, hidden, "Delete",
                           confirm="Delete this ACL?").replace('class="action"',
                                                               'class="action inline"')
        rows.append(
            f'<tr class="acl" data-principal="{e(a["principal"])}" '
            f'data-resource="{e(a["resource_type"])}:{e(a["resource_name"])}">'
            f'<td>{e(a["principal"])}</td><td>{e(a["permission_type"])}</td>'
            f'<td>{e(a["operation"])}</td><td>{e(a["host"])}</td>'
            f'<td>{e(a["resource_type"])}</td><td><code>{e(a["resource_name"])}</code></td>'
            f'<td>{e(a["pattern_type"])}</td><td>{delete}</td></tr>')
    err = f'<p class="notice error" id="acl-error">{e(d["error"])}</p>' if d["error"] else ""
    table = _table(["Principal", "Permission", "Operation", "Host", "Resource type",
                    "Resource name", "Pattern", ""], rows, cls="acls",
                   empty="no ACLs match" if not d["error"] else "no ACLs shown")
    create = ""
    if not read_only:
        note = "" if d["can_alter"] else _no_alter("create or delete ACLs")
        form = _form(
            "/acls/create", csrf,
            '<label>Principal <input name="principal" id="acl-principal" '
            'placeholder="User:alice" required></label>'
            '<label>Permission <select name="permission_type">'
            f'{_options(_names(AclPermissionType, concrete=True), "ALLOW")}</select></label>'
            '<label>Operation <select name="operation" id="acl-operation">'
            f'{_options(_names(AclOperation, concrete=True), "READ")}</select></label>'
            '<label>Host <input name="host" value="*" size="10"></label>'
            '<label>Resource type <select name="resource_type" id="acl-resource-type">'
            f'{_options(_names(ResourceType, concrete=True), "TOPIC")}</select></label>'
            '<label>Resource name <input name="resource_name" id="acl-resource-name" '
            'placeholder="orders, or * for all"></label>'
            '<label>Pattern type <select name="pattern_type" id="acl-pattern-type">'
            f'{_options(_names(PatternType, concrete=True), "LITERAL")}</select></label>',
            "Create ACL", form_id="acl-create-form")
        create = f'<section class="actions"><h2>Create an ACL</h2>{note}{form}</section>'
    return (f'<p class="sub">ACL bindings (DescribeAcls), as <code>kafka-acls.sh --list</code>.'
            f" Pattern type MATCH lists every ACL that applies to the named resource.</p>"
            f"{filt}{err}<section>{table}</section>{create}")


# -- users -------------------------------------------------------------------------------
def users(d: dict[str, Any], *, csrf: str, read_only: bool) -> str:
    rows = []
    for user in d["scram"]:
        for c in user["credentials"]:
            delete = ""
            if not read_only:
                delete = _form(
                    "/users/delete", csrf,
                    f'<input type="hidden" name="user" value="{e(user["user"])}">'
                    f'<input type="hidden" name="mechanism" value="{e(c["mechanism"])}">',
                    "Delete", confirm=f'Delete the {c["mechanism"]} credential of '
                                      f'{user["user"]}?').replace('class="action"',
                                                                  'class="action inline"')
            rows.append(f'<tr class="scram-user" data-user="{e(user["user"])}">'
                        f'<td>{e(user["user"])}</td><td>{e(c["mechanism"])}</td>'
                        f'<td class="n">{c["iterations"]:,}</td><td>{delete}</td></tr>')
    err = f'<p class="notice error" id="users-error">{e(d["error"])}</p>' if d["error"] else ""
    scram = _table(["User", "Mechanism", "Iterations", ""], rows, cls="users",
                   empty="no SCRAM users" if not d["error"] else "SCRAM users not shown")
    plain = ""
    if d["plain"]:
        plain = ('<section><h2>PLAIN users</h2><p class="sub">From the listeners\' JAAS '
                 "config (<code>sasl.jaas.config</code>); changed there, not here.</p>"
                 + _table(["User"], (f'<tr class="plain-user"><td>{e(n)}</td></tr>'
                                     for n in d["plain"]), cls="plain-users") + "</section>")
    upsert = ""
    if not read_only:
        note = "" if d["can_alter"] else _no_alter("change SCRAM credentials")
        form = _form(
            "/users/upsert", csrf,
            '<label>User <input name="user" id="user-name" required autocomplete="off">'
            "</label>"
            '<label>Mechanism <select name="mechanism" id="user-mechanism">'
            f'{_options(d["mechanisms"], d["mechanisms"][0])}</select></label>'
            '<label>Password <input type="password" name="password" id="user-password" '
            'required autocomplete="new-password"></label>'
            f'<label>Iterations <input name="iterations" value="{d["min_iterations"]}" '
            f'inputmode="numeric" size="6"></label>',
            "Set credential", form_id="user-form")
        upsert = (f'<section class="actions"><h2>Add or change a SCRAM user</h2>{note}'
                  f'<p class="sub">The console salts and hashes the password '
                  f'({d["min_iterations"]:,}–{d["max_iterations"]:,} iterations) and sends '
                  "only that (AlterUserScramCredentials), as Kafka's admin client does.</p>"
                  f"{form}</section>")
    return (f"<section><h2>SCRAM users</h2>{err}{scram}</section>{plain}{upsert}")


# -- topics ------------------------------------------------------------------------------
def topics_admin(*, csrf: str, read_only: bool) -> str:
    """The create-topic form of the topics page."""
    if read_only:
        return ""
    form = _form(
        "/topics/create", csrf,
        '<label>Name <input name="name" id="topic-name" required '
        'pattern="[a-zA-Z0-9._\\-]+" autocomplete="off"></label>'
        '<label>Partitions <input name="partitions" id="topic-partitions" '
        'placeholder="num.partitions" inputmode="numeric" size="8"></label>'
        '<label class="wide"><span>Configs (one <code>name=value</code> a line)</span>'
        '<textarea name="configs" id="topic-configs" rows="2" '
        'placeholder="retention.ms=86400000"></textarea></label>',
        "Create topic", form_id="topic-create-form")
    return f'<section class="actions"><h2>Create a topic</h2>{form}</section>'


def topic_admin(d: dict[str, Any], *, csrf: str, read_only: bool) -> str:
    """The config, partition and delete forms of a topic's page."""
    if read_only:
        return ""
    base = f'/topics/{u(d["name"])}'
    names = [c["name"] for c in d["configs"] if not c["read_only"]]
    opts = "".join(f'<option value="{e(n)}">' for n in names)
    config = _form(
        f"{base}/config", csrf,
        f'<label>Config <input name="key" id="config-key" list="config-names" required '
        f'autocomplete="off"><datalist id="config-names">{opts}</datalist></label>'
        '<label>Value <input name="value" id="config-value"></label>'
        '<label>Operation <select name="op" id="config-op"><option value="set">SET</option>'
        '<option value="delete">DELETE (back to the default)</option></select></label>',
        "Apply", form_id="config-form")
    count = len(d["partitions"])
    grow = _form(
        f"{base}/partitions", csrf,
        f'<label>New partition count <input name="count" id="partition-count" '
        f'value="{count + 1}" inputmode="numeric" size="6"></label>',
        "Add partitions", confirm="Add partitions? Keyed records will map to other "
        "partitions; this cannot be undone.", form_id="partitions-form")
    delete = ""
    if not d["internal"]:
        delete = _form(
            f"{base}/delete", csrf,
            f'<label>Type the topic name to confirm <input name="confirm" '
            f'id="delete-topic-confirm" autocomplete="off" placeholder="{e(d["name"])}">'
            "</label>",
            "Delete topic", confirm=f'Delete topic {d["name"]} and all its records?',
            form_id="delete-topic-form")
        delete = ('<section class="actions"><h2>Delete the topic</h2>'
                  '<p class="sub">DeleteTopics: the records and configs go, consumer groups '
                  f"keep their offsets.</p>{delete}</section>")
    return (f'<section class="actions"><h2>Change a config</h2><p class="sub">'
            "IncrementalAlterConfigs, as <code>kafka-configs.sh --alter</code>.</p>"
            f"{config}</section>"
            f'<section class="actions"><h2>Add partitions</h2>{grow}</section>{delete}')


# -- client quotas -----------------------------------------------------------------------
def quota_value(key: str, value: float) -> str:
    """A quota as a person reads it: whole numbers with separators, byte rates also in
    KiB/MiB per second."""
    text = f"{int(value):,}" if float(value).is_integer() else f"{value:,}"
    if key.endswith("_byte_rate") and value >= 1024:
        text += f" ({_bytes(value)}/s)"
    return e(text)


def _alter_configs_note(can_alter: bool) -> str:
    """The warning over a form whose changes need ALTER_CONFIGS on the cluster (quotas, broker
    configs) when the viewer lacks it: the broker would refuse them."""
    if can_alter:
        return ""
    return ('<p class="warn">You may not ALTER_CONFIGS on the cluster: the broker will refuse '
            "changes (CLUSTER_AUTHORIZATION_FAILED).</p>")


def quotas(d: dict[str, Any], *, csrf: str, read_only: bool) -> str:
    def entity(ent: dict[str, str | None]) -> str:
        return ", ".join(f'{e(k)}={e(v) if v is not None else "&lt;default&gt;"}'
                         for k, v in sorted(ent.items()))

    rows = []
    for q in d["quotas"]:
        remove = ""
        if not read_only and len(q["entity"]) == 1:
            (etype, ename), = q["entity"].items()
            remove = _form(
                "/quotas/alter", csrf,
                f'<input type="hidden" name="entity_type" value="{e(etype)}">'
                f'<input type="hidden" name="entity_name" value="{e(ename or "")}">'
                f'<input type="hidden" name="key" value="{e(q["key"])}">'
                '<input type="hidden" name="remove" value="1">', "Remove",
                confirm="Remove this quota?").replace('class="action"',
                                                      'class="action inline"')
        rows.append(f'<tr class="quota"><td>{entity(q["entity"])}</td><td>{e(q["key"])}</td>'
                    f'<td class="n">{quota_value(q["key"], q["value"])}</td><td>{remove}</td>'
                    "</tr>")
    err = f'<p class="notice error" id="quotas-error">{e(d["error"])}</p>' if d["error"] else ""
    table = _table(["Entity", "Quota", "Value", ""], rows, cls="quotas",
                   empty="no client quotas" if not d["error"] else "quotas not shown")
    form = ""
    if not read_only:
        note = _alter_configs_note(d["can_alter"])
        form = _form(
            "/quotas/alter", csrf,
            f'<label>Entity type <select name="entity_type">'
            f'{_options(d["entity_types"], "user")}</select></label>'
            '<label>Entity name <input name="entity_name" id="quota-entity" '
            'placeholder="empty: the default"></label>'
            '<label>Quota <select name="key" id="quota-key">'
            + _options(["producer_byte_rate", "consumer_byte_rate", "request_percentage",
                        "controller_mutation_rate", "connection_creation_rate"],
                       "producer_byte_rate")
            + '</select></label><label>Value <input name="value" id="quota-value" '
              'inputmode="decimal" size="10"></label>',
            "Set quota", form_id="quota-form")
        form = f'<section class="actions"><h2>Set a quota</h2>{note}{form}</section>'
    return (f'<p class="sub">Client quotas (DescribeClientQuotas), as '
            f"<code>kafka-configs.sh --describe --entity-type users|clients|ips</code>.</p>"
            f"{err}<section>{table}</section>{form}")


# -- broker configs ----------------------------------------------------------------------
def _config_value(c: dict[str, Any]) -> str:
    if c["sensitive"]:
        return "(sensitive)"
    return '<span class="null">null</span>' if c["value"] is None else e(c["value"])


def _synonyms(c: dict[str, Any]) -> str:
    """The other places that hold a value of the config (those the winner shadows), for a
    config that is not at its default: e.g. a per-broker value over a cluster default."""
    rest = [s for s in c["synonyms"][1:] if s["source"] != "DEFAULT_CONFIG"]
    if c["default"] or not rest:
        return ""
    return '<div class="sub">over ' + "; ".join(
        f'{e(s["source"])} {e(s["name"])}='
        f'{"(sensitive)" if c["sensitive"] else e(s["value"])}' for s in rest) + "</div>"


def broker(d: dict[str, Any], *, csrf: str, read_only: bool, name_filter: str = "",
           dynamic_only: bool = False) -> str:
    """The broker configs page: the cluster-wide dynamic defaults, the change form, and every
    config of this broker (filtered by a name substring and/or to the dynamic ones)."""
    node = d["node_id"]
    filt = (
        '<form method="get" action="/broker" class="browse" id="broker-filter">'
        f'<label>Name contains <input name="name" value="{e(name_filter)}" '
        'placeholder="e.g. retention"></label>'
        '<label><input type="checkbox" name="dynamic" value="1"'
        f'{" checked" if dynamic_only else ""}> dynamic only</label>'
        '<button type="submit">Filter</button></form>')
    err = f'<p class="notice error" id="broker-error">{e(d["error"])}</p>' if d["error"] else ""
    defaults = _table(["Config", "Value", "Source"], (
        f'<tr class="default-config" data-config="{e(c["name"])}"><td>{e(c["name"])}</td>'
        f'<td class="v">{_config_value(c)}</td><td>{e(c["source"])}</td></tr>'
        for c in d["defaults"]), cls="broker-defaults",
        empty="no cluster-wide dynamic defaults set" if not d["error"] else
        "defaults not shown")
    needle = name_filter.strip().lower()
    rows = (f'<tr class="{"default" if c["default"] else "set"}" data-config="{e(c["name"])}">'
            f'<td>{e(c["name"])}</td><td class="v">{_config_value(c)}{_synonyms(c)}</td>'
            f'<td>{e(c["source"])}</td><td>{"yes" if c["dynamic"] else "no"}</td></tr>'
            for c in d["configs"]
            if needle in c["name"].lower() and (c["dynamic"] or not dynamic_only))
    configs = _table(["Config", "Value", "Source", "Dynamic"], rows, cls="configs broker-configs",
                     empty="no config matches" if not d["error"] else "configs not shown")
    form = ""
    if not read_only:
        note = _alter_configs_note(d["can_alter"])
        names = [c["name"] for c in d["configs"] if c["dynamic"]]
        opts = "".join(f'<option value="{e(n)}">' for n in names)
        form = _form(
            "/broker/config", csrf,
            '<label>For <select name="scope" id="broker-scope">'
            f'<option value="default">every broker (cluster-wide default)</option>'
            f'<option value="broker">this broker (node {e(node)})</option></select></label>'
            '<label>Config <input name="key" id="broker-config-key" list="broker-config-names"'
            f' required autocomplete="off"><datalist id="broker-config-names">{opts}'
            "</datalist></label>"
            '<label>Value <input name="value" id="broker-config-value"></label>'
            '<label>Operation <select name="op" id="broker-config-op">'
            '<option value="set">SET</option>'
            '<option value="delete">DELETE (back to the next source)</option></select></label>',
            "Apply", form_id="broker-config-form")
        form = (f'<section class="actions"><h2>Change a dynamic config</h2>{note}'
                '<p class="sub">IncrementalAlterConfigs on the BROKER resource, as '
                "<code>kafka-configs.sh --alter --entity-type brokers --entity-default</code> "
                f"or <code>--entity-name {e(node)}</code>. A per-broker value wins over the "
                "cluster-wide default, which wins over server.properties. Only the dynamic "
                "configs can change at run time; the broker refuses the others.</p>"
                f"{form}</section>")
    return (f'<p class="sub">Node {e(node)}: DescribeConfigs of the BROKER resource, as '
            f"<code>kafka-configs.sh --describe --entity-type brokers --entity-name {e(node)} "
            "--all</code>.</p>"
            f"{err}<section><h2>Cluster-wide defaults</h2>{defaults}</section>{form}"
            f"<section><h2>Configs of broker {e(node)}</h2>{filt}{configs}</section>")
