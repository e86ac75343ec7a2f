"""The StandardAuthorizer's rules (security/acl_authorizer.py), the ACL filters, the ACL store and
the ACL records' replay, without a broker.

The property test checks the indexed authorizer against a brute-force reference written from
Kafka's rules as prose (every ACL examined, no index): any difference is a bug in the index.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from snakka.metadata.core import ClusterMetadata
from snakka.protocol.errors import ErrorCode, KafkaError
from snakka.security.acl_authorizer import (
    AclBindingFilter,
    AclCache,
    StandardAcl,
    StandardAuthorizer,
    binding_refused,
    check_delete_filter,
    check_new_acl,
    create_authorizer,
    filter_from_codes,
    parse_super_users,
    unparseable,
    validate_new_acl,
)
from snakka.security.authorizer import (
    AclOperation,
    AclPermissionType,
    Action,
    AllowAllAuthorizer,
    AuthorizationResult,
    PatternType,
    ResourcePattern,
    ResourceType,
)
from snakka.security.principal import KafkaPrincipal

ALLOWED, DENIED = AuthorizationResult.ALLOWED, AuthorizationResult.DENIED
LIT, PRE = PatternType.LITERAL, PatternType.PREFIXED
ALLOW, DENY = AclPermissionType.ALLOW, AclPermissionType.DENY
TOPIC, GROUP = ResourceType.TOPIC, ResourceType.GROUP
Op = AclOperation


@dataclass
class Ctx:
    """What the authorizer reads of a RequestContext."""

    principal: KafkaPrincipal
    client_address: str = "10.0.0.1"
    api_key: int = 1  # Fetch


ALICE = Ctx(KafkaPrincipal("User", "alice"))
BOB = Ctx(KafkaPrincipal("User", "bob"))


def acl(name: str, op: AclOperation = Op.READ, perm: AclPermissionType = ALLOW, *,
        pattern: PatternType = LIT, principal: str = "User:alice", host: str = "*",
        rtype: ResourceType = TOPIC) -> StandardAcl:
    return StandardAcl(rtype, name, pattern, principal, host, op, perm)


def authorizer(*acls: StandardAcl, **kw) -> StandardAuthorizer:
    cache = AclCache()
    for i, a in enumerate(acls):
        cache.add(f"id{i}", a)
    return StandardAuthorizer(cache, **kw)


def decide(auth: StandardAuthorizer, ctx: Ctx, op: AclOperation, name: str,
           rtype: ResourceType = TOPIC) -> AuthorizationResult:
    return auth.authorize(ctx, [Action(op, ResourcePattern(rtype, name))])[0]


# -- the rules, one by one ------------------------------------------------------------------
def test_no_acl_at_all_is_denied_by_default_and_allowed_with_allow_everyone():
    assert decide(authorizer(), ALICE, Op.READ, "t") is DENIED
    assert decide(authorizer(allow_everyone_if_no_acl_found=True), ALICE, Op.READ, "t") \
        is ALLOWED


def test_a_resource_with_acls_none_matching_is_denied_even_with_allow_everyone():
    auth = authorizer(acl("t", principal="User:bob"), allow_everyone_if_no_acl_found=True)
    assert decide(auth, ALICE, Op.READ, "t") is DENIED
    assert decide(auth, BOB, Op.READ, "t") is ALLOWED
    assert decide(auth, ALICE, Op.READ, "other") is ALLOWED  # no ACL on it: everyone


def test_literal_acl_matches_only_its_name_and_type():
    auth = authorizer(acl("t"))
    assert decide(auth, ALICE, Op.READ, "t") is ALLOWED
    assert decide(auth, ALICE, Op.READ, "t2") is DENIED
    assert decide(auth, ALICE, Op.READ, "t", GROUP) is DENIED


def test_wildcard_resource_and_prefixes():
    auth = authorizer(acl("*", Op.WRITE), acl("app.", Op.READ, pattern=PRE))
    assert decide(auth, ALICE, Op.WRITE, "anything") is ALLOWED
    assert decide(auth, ALICE, Op.READ, "app.orders") is ALLOWED
    assert decide(auth, ALICE, Op.READ, "app.") is ALLOWED
    assert decide(auth, ALICE, Op.READ, "app") is DENIED
    assert decide(auth, ALICE, Op.READ, "other.app.x") is DENIED


def test_prefixed_star_is_a_prefix_not_a_wildcard():
    auth = authorizer(acl("*", pattern=PRE))
    assert decide(auth, ALICE, Op.READ, "t") is DENIED
    assert decide(auth, ALICE, Op.READ, "*t") is ALLOWED


def test_wildcard_principal_matches_every_principal():
    auth = authorizer(acl("t", principal="User:*"))
    assert decide(auth, BOB, Op.READ, "t") is ALLOWED
    assert decide(auth, Ctx(KafkaPrincipal("Group", "ops")), Op.READ, "t") is ALLOWED


def test_host_is_wildcard_or_exact():
    auth = authorizer(acl("t", host="10.0.0.1"))
    assert decide(auth, ALICE, Op.READ, "t") is ALLOWED
    assert decide(auth, Ctx(ALICE.principal, "10.0.0.2"), Op.READ, "t") is DENIED


@pytest.mark.parametrize("granted, asked, result", [
    (Op.READ, Op.DESCRIBE, ALLOWED), (Op.WRITE, Op.DESCRIBE, ALLOWED),
    (Op.DELETE, Op.DESCRIBE, ALLOWED), (Op.ALTER, Op.DESCRIBE, ALLOWED),
    (Op.CREATE, Op.DESCRIBE, DENIED), (Op.ALTER_CONFIGS, Op.DESCRIBE, DENIED),
    (Op.ALTER_CONFIGS, Op.DESCRIBE_CONFIGS, ALLOWED), (Op.ALTER, Op.DESCRIBE_CONFIGS, DENIED),
    (Op.DESCRIBE, Op.READ, DENIED), (Op.READ, Op.WRITE, DENIED),
    (Op.ALL, Op.READ, ALLOWED), (Op.ALL, Op.IDEMPOTENT_WRITE, ALLOWED),
    (Op.ALL, Op.DESCRIBE_CONFIGS, ALLOWED),
])
def test_implied_operations_of_allow_acls(granted, asked, result):
    assert decide(authorizer(acl("t", granted)), ALICE, asked, "t") is result


def test_deny_acls_imply_nothing_but_deny_all_denies_everything():
    # DENY READ does not deny DESCRIBE (which READ would imply when allowed) ...
    auth = authorizer(acl("t", Op.READ, DENY), acl("t", Op.DESCRIBE))
    assert decide(auth, ALICE, Op.DESCRIBE, "t") is ALLOWED
    assert decide(auth, ALICE, Op.READ, "t") is DENIED
    # ... DENY ALL denies any operation.
    auth = authorizer(acl("t", Op.ALL, DENY), acl("t", Op.ALL))
    for op in (Op.READ, Op.DESCRIBE, Op.ALTER_CONFIGS):
        assert decide(auth, ALICE, op, "t") is DENIED


def test_deny_wins_over_allow_from_any_pattern():
    auth = authorizer(acl("t"), acl("*", Op.READ, DENY, principal="User:*"))
    assert decide(auth, ALICE, Op.READ, "t") is DENIED
    auth = authorizer(acl("*"), acl("t", Op.READ, DENY, pattern=PRE))
    assert decide(auth, ALICE, Op.READ, "topic") is DENIED
    assert decide(auth, ALICE, Op.READ, "x") is ALLOWED


def test_super_users_are_allowed_everything():
    auth = authorizer(acl("t", Op.ALL, DENY, principal="User:*"),
                      super_users=parse_super_users("User:admin; User:alice ;"))
    assert decide(auth, ALICE, Op.ALTER, "t") is ALLOWED
    assert decide(auth, BOB, Op.READ, "t") is DENIED
    assert parse_super_users("User:a;;User:b") == {"User:a", "User:b"}


def test_acls_added_and_removed_take_effect_at_once():
    cache = AclCache()
    auth = StandardAuthorizer(cache)
    cache.add("a", acl("app.", pattern=PRE))
    assert decide(auth, ALICE, Op.READ, "app.x") is ALLOWED
    cache.remove("a")
    assert decide(auth, ALICE, Op.READ, "app.x") is DENIED
    assert len(cache) == 0 and cache._index == {}


def test_only_literal_resources_are_authorized():
    with pytest.raises(ValueError):
        authorizer().authorize(ALICE, [Action(Op.READ, ResourcePattern(TOPIC, "t", PRE))])


def test_create_authorizer_follows_the_config():
    assert isinstance(create_authorizer("", AclCache()), AllowAllAuthorizer)
    auth = create_authorizer("org.apache.kafka.metadata.authorizer.StandardAuthorizer",
                             AclCache(), super_users="User:admin",
                             allow_everyone_if_no_acl_found=True)
    assert isinstance(auth, StandardAuthorizer) and auth.super_users == {"User:admin"}
    assert decide(auth, ALICE, Op.READ, "t") is ALLOWED
    with pytest.raises(ValueError):
        create_authorizer("kafka.security.authorizer.AclAuthorizer", AclCache())


# -- the audit log --------------------------------------------------------------------------
def test_denials_are_logged_at_info_when_asked_and_allowed_at_debug(caplog):
    auth = authorizer(acl("t"))
    with caplog.at_level(logging.DEBUG, logger="snakka.authorizer"):
        auth.authorize(BOB, [Action(Op.READ, ResourcePattern(TOPIC, "t")),
                             Action(Op.READ, ResourcePattern(TOPIC, "u"), log_if_denied=False)])
        auth.authorize(ALICE, [Action(Op.READ, ResourcePattern(TOPIC, "t"))])
        auth.authorize(ALICE, [Action(Op.READ, ResourcePattern(TOPIC, "t"),
                                      log_if_allowed=False)])
    lines = [(r.levelno, r.getMessage()) for r in caplog.records if r.name == "snakka.authorizer"]
    assert lines == [
        (logging.INFO, "Principal = User:bob is Denied operation = READ from host = 10.0.0.1 on "
         "resource = Topic:LITERAL:t for request = Fetch with resourceRefCount = 1 based on "
         "rule DefaultDeny"),
        (logging.DEBUG, "Principal = User:alice is Allowed operation = READ from host = "
         "10.0.0.1 on resource = Topic:LITERAL:t for request = Fetch with resourceRefCount = 1 "
         "based on rule MatchingAcl(acl=StandardAcl(resourceType=TOPIC, resourceName=t, "
         "patternType=LITERAL, principal=User:alice, host=*, op=READ, "
         "permissionType=ALLOW))")]
    assert all(r.levelno < logging.ERROR for r in caplog.records)


# -- filters (DescribeAcls / DeleteAcls) ----------------------------------------------------
def test_filter_pattern_types():
    lit, star, pre = acl("foo"), acl("*"), acl("fo", pattern=PRE)
    match = AclBindingFilter(TOPIC, "foo", PatternType.MATCH)
    assert [match.matches(a) for a in (lit, star, pre, acl("bar"), acl("foo2"))] == [
        True, True, True, False, False]
    anyp = AclBindingFilter(TOPIC, "foo", PatternType.ANY)
    assert [anyp.matches(a) for a in (lit, star, pre, acl("foo", pattern=PRE))] == [
        True, False, False, True]
    exact = AclBindingFilter(TOPIC, "fo", PRE)
    assert [exact.matches(a) for a in (lit, pre)] == [False, True]
    everything = AclBindingFilter()
    assert all(everything.matches(a) for a in (lit, star, pre, acl("g", rtype=GROUP)))


def test_filter_entry_fields():
    a = acl("t", Op.WRITE, DENY, principal="User:bob", host="1.2.3.4")
    assert AclBindingFilter(principal="User:bob", host="1.2.3.4", operation=Op.WRITE,
                            permission_type=DENY).matches(a)
    assert not AclBindingFilter(principal="User:alice").matches(a)
    assert not AclBindingFilter(host="*").matches(a)
    assert not AclBindingFilter(operation=Op.ALL).matches(a)
    assert not AclBindingFilter(permission_type=ALLOW).matches(a)


# -- validation -----------------------------------------------------------------------------
@pytest.mark.parametrize("binding, message", [
    (acl("other", rtype=ResourceType.CLUSTER),
     "The only valid name for the CLUSTER resource is kafka-cluster"),
    (acl(""), "Invalid empty resource name"),
    (acl("", pattern=PRE), "Invalid empty resource name"),
    (acl("t", principal="alice"), "Could not parse principal from `alice` (no colon is present "
     "separating the principal type from the principal name)"),
])
def test_invalid_new_acls_get_invalid_request(binding, message):
    with pytest.raises(KafkaError) as e:
        validate_new_acl(binding)
    assert (e.value.code, e.value.message) == (ErrorCode.INVALID_REQUEST, message)


def test_valid_new_acls():
    for a in (acl("kafka-cluster", Op.ALTER, rtype=ResourceType.CLUSTER),
              acl("*", pattern=PRE), acl("t", principal="User:")):
        validate_new_acl(a)


def test_unknown_codes_are_invalid_request():
    def err(*args):
        with pytest.raises(KafkaError) as e:
            check_new_acl(*args)
        return e.value.code, e.value.message

    bad = ErrorCode.INVALID_REQUEST
    assert err(42, "t", 3, "User:a", "*", 3, 3) == (bad, "Invalid resourceType UNKNOWN")
    assert err(2, "t", 9, "User:a", "*", 3, 3) == (bad, "Invalid patternType UNKNOWN")
    assert err(2, "t", 3, "User:a", "*", 99, 3) == (bad, "Invalid operation UNKNOWN")
    assert err(2, "t", 3, "User:a", "*", 3, 7) == (bad, "Invalid permissionType UNKNOWN")
    assert err(4, "x", 3, "User:a", "*", 3, 3)[1].startswith("The only valid name")
    assert check_new_acl(2, "t", 4, "User:a", "h", 2, 2) == acl(
        "t", Op.ALL, DENY, pattern=PRE, principal="User:a", host="h")


def test_what_kafka_cannot_parse_or_build():
    assert unparseable(2, 3, 3, 3) is None and unparseable(42, 9, 99, 7) is None
    for args in ((0, 3, 3, 3), (2, 0, 3, 3), (2, 3, 0, 3), (2, 3, 3, 0)):
        assert unparseable(*args) is not None, args
    assert binding_refused(2, 3, 3, 3) is None and binding_refused(42, 9, 99, 7) is None
    for args in ((1, 3, 3, 3), (2, 1, 3, 3), (2, 2, 3, 3), (2, 3, 1, 3), (2, 3, 3, 1)):
        assert binding_refused(*args) is not None, args


def test_filters_with_codes_kafka_does_not_know():
    flt = filter_from_codes(2, None, 9, None, None, 1, 1)
    assert flt.pattern_type == PatternType.UNKNOWN and not flt.matches(acl("t"))
    with pytest.raises(KafkaError, match="Unknown patternFilter."):
        check_delete_filter(flt)
    with pytest.raises(KafkaError, match="Unknown entryFilter."):
        check_delete_filter(filter_from_codes(1, None, 1, None, None, 1, 9))
    check_delete_filter(filter_from_codes(1, None, 2, None, None, 1, 1))


# -- the metadata records -------------------------------------------------------------------
def test_acl_records_replay_to_the_same_state():
    md = ClusterMetadata()
    recs, results = md.create_acls([acl("t"), acl("t"), acl(""), acl("app.", pattern=PRE)])
    assert results[:2] == [None, None] and results[3] is None
    assert isinstance(results[2], KafkaError)
    assert len(recs) == 2 and {r["type"] for r in recs} == {"acl"}
    again, results = md.create_acls([acl("t")])  # exists: success, no record
    assert again == [] and results == [None]
    more, matched = md.delete_acls([AclBindingFilter(TOPIC, "t", PatternType.MATCH),
                                    AclBindingFilter(TOPIC, "t", LIT)])
    assert matched == [[acl("t")], [acl("t")]]
    assert [r["type"] for r in more] == ["remove_acl"]
    replayed = ClusterMetadata()
    for r in recs + more:
        replayed.apply(r)
    assert list(replayed.acls.by_id.items()) == list(md.acls.by_id.items())
    assert list(md.acls.by_id.values()) == [acl("app.", pattern=PRE)]


def test_replaying_a_removal_of_an_unknown_acl_fails():
    with pytest.raises(ValueError):
        ClusterMetadata().apply({"type": "remove_acl", "id": "nope"})


def test_create_acls_over_the_request_bound_fails_whole(monkeypatch):
    """Kafka's controller: more new ACLs than MAX_RECORDS_PER_USER_OP fail the request (the
    handler answers every creation POLICY_VIOLATION); ACLs that exist, or repeat one in the
    request, write no record and do not count."""
    import snakka.metadata.core as core
    monkeypatch.setattr(core, "MAX_RECORDS_PER_USER_OP", 2)
    md = ClusterMetadata()
    with pytest.raises(core.UserOpTooLarge) as e:
        md.create_acls([acl("a"), acl("b"), acl("c")])
    assert e.value.code == ErrorCode.POLICY_VIOLATION
    assert e.value.message == "Unable to perform excessively large batch operation."
    assert len(md.acls) == 0
    recs, results = md.create_acls([acl("a"), acl("b"), acl("a")])
    assert len(recs) == 2 and results == [None, None, None]
    recs, results = md.create_acls([acl("a"), acl("b"), acl("c")])  # one new record
    assert len(recs) == 1 and len(md.acls) == 3


def test_delete_acls_over_the_request_bound_fails_that_filter(monkeypatch):
    import snakka.metadata.core as core
    monkeypatch.setattr(core, "MAX_RECORDS_PER_USER_OP", 2)
    md = ClusterMetadata()
    md.create_acls([acl("a"), acl("b")])
    md.create_acls([acl("c")])
    recs, results = md.delete_acls([AclBindingFilter(TOPIC, "a", LIT), AclBindingFilter()])
    assert results[0] == [acl("a")]
    assert isinstance(results[1], KafkaError)
    assert results[1].code == ErrorCode.UNKNOWN_SERVER_ERROR
    assert len(recs) == 1 and len(md.acls) == 2


# -- the property: the index decides as the rules say ---------------------------------------
IMPLIES = {Op.DESCRIBE: {Op.DESCRIBE, Op.READ, Op.WRITE, Op.DELETE, Op.ALTER},
           Op.DESCRIBE_CONFIGS: {Op.DESCRIBE_CONFIGS, Op.ALTER_CONFIGS}}


def reference(acls: list[StandardAcl], principal: str, host: str, op: AclOperation,
              rtype: ResourceType, name: str, super_users: set[str],
              allow_everyone: bool) -> AuthorizationResult:
    """Kafka's rules as prose, examining every ACL."""
    if principal in super_users:
        return ALLOWED

    def applies(a: StandardAcl) -> bool:
        if a.resource_type != rtype:
            return False
        if a.pattern_type == LIT:
            return a.resource_name in (name, "*")
        return name.startswith(a.resource_name)

    def matches(a: StandardAcl) -> bool:
        if a.principal not in (principal, "User:*") or a.host not in ("*", host):
            return False
        if a.operation == Op.ALL or a.operation == op:
            return True
        return a.permission_type == ALLOW and a.operation in IMPLIES.get(op, ())

    relevant = [a for a in acls if applies(a)]
    matching = [a for a in relevant if matches(a)]
    if any(a.permission_type == DENY for a in matching):
        return DENIED
    if matching:
        return ALLOWED
    return DENIED if relevant or not allow_everyone else ALLOWED


NAMES = st.sampled_from(["a", "ab", "abc", "abd", "b", "ba", "*", "a*"])
PRINCIPALS = st.sampled_from(["User:alice", "User:bob", "User:*", "Group:alice"])
HOSTS = st.sampled_from(["*", "10.0.0.1", "10.0.0.2"])
OPS = st.sampled_from([o for o in AclOperation if o not in (Op.UNKNOWN, Op.ANY)])
ACLS = st.builds(StandardAcl, st.sampled_from([TOPIC, GROUP]), NAMES, st.sampled_from([LIT, PRE]),
                 PRINCIPALS, HOSTS, OPS, st.sampled_from([ALLOW, DENY]))


@settings(max_examples=400, deadline=None)
@given(acls=st.lists(ACLS, max_size=12, unique=True),
       removed=st.sets(st.integers(0, 11), max_size=4),
       requests=st.lists(st.tuples(st.sampled_from(["User:alice", "User:bob", "Group:alice"]),
                                   st.sampled_from(["10.0.0.1", "10.0.0.2"]), OPS,
                                   st.sampled_from([TOPIC, GROUP]), NAMES), min_size=1,
                         max_size=8),
       super_users=st.sets(st.sampled_from(["User:alice", "User:bob"]), max_size=1),
       allow_everyone=st.booleans())
def test_index_decides_like_the_reference(acls, removed, requests, super_users,
                                          allow_everyone):
    cache = AclCache()
    for i, a in enumerate(acls):
        cache.add(str(i), a)
    for i in removed:
        if i < len(acls):
            cache.remove(str(i))
    live = [a for i, a in enumerate(acls) if i not in removed]
    auth = StandardAuthorizer(cache, super_users=super_users,
                              allow_everyone_if_no_acl_found=allow_everyone)
    for principal, host, op, rtype, name in requests:
        ctx = Ctx(KafkaPrincipal.parse(principal), host)
        got = auth.authorize(ctx, [Action(op, ResourcePattern(rtype, name))])[0]
        assert got is reference(live, principal, host, op, rtype, name, super_users,
                                allow_everyone), (principal, host, op, rtype, name)
        flt = AclBindingFilter(rtype, name, PatternType.MATCH)
        assert [a for _, a in cache.acls(flt)] == [
            a for a in live if a.resource_type == rtype and (
                a.resource_name in (name, "*") if a.pattern_type == LIT
                else name.startswith(a.resource_name))]


# -- authorize_by_resource_type (Kafka's Authorizer.authorizeByResourceType) -----------------
@pytest.mark.parametrize("acls, expected", [
    ((), DENIED),                                                     # nothing allowed
    ((acl("orders", Op.WRITE),), ALLOWED),                            # one literal allow
    ((acl("*", Op.ALL),), ALLOWED),                                   # wildcard allow
    ((acl("ord", Op.WRITE, pattern=PRE),), ALLOWED),                  # prefixed allow
    ((acl("orders", Op.WRITE), acl("orders", Op.WRITE, DENY)), DENIED),  # same literal denied
    ((acl("orders", Op.WRITE), acl("or", Op.WRITE, DENY, pattern=PRE)), DENIED),  # dominated
    ((acl("orders", Op.WRITE), acl("ordersX", Op.WRITE, DENY, pattern=PRE)), ALLOWED),
    ((acl("orders", Op.WRITE), acl("*", Op.WRITE, DENY)), DENIED),    # wildcard deny wins
    ((acl("orders", Op.READ),), DENIED),                              # other operation
    ((acl("orders", Op.WRITE, principal="User:bob"),), DENIED),       # other principal
    ((acl("orders", Op.WRITE, principal="User:*"),), ALLOWED),        # any principal
    ((acl("orders", Op.WRITE, host="10.9.9.9"),), DENIED),            # other host
    ((acl("orders", Op.WRITE, rtype=GROUP),), DENIED),                # other resource type
])
def test_authorize_by_resource_type(acls, expected):
    assert authorizer(*acls).authorize_by_resource_type(ALICE, Op.WRITE, TOPIC) is expected


def test_authorize_by_resource_type_super_user_and_allow_everyone():
    deny_all = acl("*", Op.WRITE, DENY)
    assert authorizer(deny_all, super_users={"User:alice"}).authorize_by_resource_type(
        ALICE, Op.WRITE, TOPIC) is ALLOWED
    # No ACL on the hard-coded name: allow.everyone.if.no.acl.found decides, as in Kafka.
    assert authorizer(allow_everyone_if_no_acl_found=True).authorize_by_resource_type(
        ALICE, Op.WRITE, TOPIC) is ALLOWED
