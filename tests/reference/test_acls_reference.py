"""ACLs against the reference Kafka 4.0 with its StandardAuthorizer (issue 14 item 3).

- Differential: the same CreateAcls / DescribeAcls / DeleteAcls requests (valid and invalid
  bindings, every filter pattern type) to a reference broker started with
  ``authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer`` and
  ``super.users=User:ANONYMOUS`` and to snakka configured the same: the same shapes and error
  codes field by field (shape.py), and the same ACLs (compared as sets: Kafka groups
  DescribeAcls' resources through a HashMap, so its order is not a contract); bindings and
  filters with codes Kafka refuses get the same answer (or a closed connection) on both.
- ``kafka-acls.sh --add / --list / --remove`` (the Java admin client) against snakka.

This module starts its own reference broker (the package's one has no authorizer): one more
JVM start (~10-25 s, ~1 GB) for the module. Skipped with the one reason when the reference
distribution or java is missing.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator

import pytest
from reference_kafka import ReferenceKafka, run_tool

from snakka.client.connection import KafkaConnection, parse_bootstrap
from snakka.protocol.messages.create_acls_request import AclCreation, CreateAclsRequest
from snakka.protocol.messages.delete_acls_request import DeleteAclsFilter, DeleteAclsRequest
from snakka.protocol.messages.describe_acls_request import DescribeAclsRequest
from snakka.testing.embedded import EmbeddedBroker

from .conftest import SNAKKA_CONFIG
from .differential import Peer, assert_same_shape, run_both

AUTHORIZER = {"authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
              "super.users": "User:ANONYMOUS"}
RUN = uuid.uuid4().hex[:8]


@pytest.fixture(scope="module")
def secured(kafka_distribution, versions) -> Iterator[tuple[str, str]]:
    """(reference Kafka with the StandardAuthorizer, snakka with it)."""
    kafka = ReferenceKafka(extra_config=AUTHORIZER)
    try:
        kafka.start()
        with EmbeddedBroker(config={**SNAKKA_CONFIG, **AUTHORIZER}, host="127.0.0.1") as b:
            yield kafka.bootstrap_servers, b.bootstrap_servers
    finally:
        kafka.stop()


def creation(rtype=2, name="t", pattern=3, principal="User:alice", host="*", op=3, perm=3):
    return AclCreation(resource_type=rtype, resource_name=name, resource_pattern_type=pattern,
                       principal=principal, host=host, operation=op, permission_type=perm)


def describe(rtype=1, name=None, pattern=1, principal=None, host=None, op=1, perm=1):
    return DescribeAclsRequest(resource_type_filter=rtype, resource_name_filter=name,
                               pattern_type_filter=pattern, principal_filter=principal,
                               host_filter=host, operation=op, permission_type=perm)


def delete_filter(rtype=1, name=None, pattern=1, principal=None, host=None, op=1, perm=1):
    return DeleteAclsFilter(resource_type_filter=rtype, resource_name_filter=name,
                            pattern_type_filter=pattern, principal_filter=principal,
                            host_filter=host, operation=op, permission_type=perm)


def described(resp) -> set[tuple]:
    return {(r.resource_type, r.resource_name, r.pattern_type, a.principal, a.host, a.operation,
             a.permission_type) for r in resp.resources for a in r.acls}


def matched(result) -> set[tuple]:
    return {(m.resource_type, m.resource_name, m.pattern_type, m.principal, m.host, m.operation,
             m.permission_type, m.error_code) for m in result.matching_acls}


@pytest.mark.parametrize("version", [None, 1])
def test_acl_apis_with_the_standard_authorizer(secured, versions, version):
    t = f"acl{RUN}v{version}"

    async def scenario(p: Peer):
        creations = [
            creation(name=t),
            creation(name=t, principal="User:bob", op=4, perm=2, host="10.0.0.7"),
            creation(name=t),  # twice in one request
            creation(name=f"{t}.", pattern=4),
            creation(name="*", principal="User:*", op=8),
            creation(rtype=3, name=f"g{t}", op=2),
            creation(rtype=4, name="kafka-cluster", op=7, perm=2, principal="User:eve"),
            creation(rtype=4, name="my-cluster", op=7),  # only kafka-cluster
            creation(name=""),  # empty name
            creation(name="", pattern=4),
            creation(name=t, principal="alice"),  # no principal type
            creation(name="*", pattern=4, principal="User:x"),  # a prefix '*': Kafka takes it
        ]
        created = await p.ask("create", CreateAclsRequest(creations=creations), version=version)
        await p.ask("create_again", CreateAclsRequest(creations=[creation(name=t)]),
                    version=version)
        # Kafka answers CreateAcls / DeleteAcls once the controller committed them, but serves
        # DescribeAcls from the broker's authorizer, which applies the committed records a
        # moment later: wait until it shows every ACL created (snakka's shows them at once).
        made = {(c.resource_type, c.resource_name, c.resource_pattern_type, c.principal, c.host,
                 c.operation, c.permission_type)
                for c, r in zip(creations, created.results, strict=True) if r.error_code == 0}
        await p.until(None, lambda: describe(), lambda r: made <= described(r), version=version)
        for label, req in (
            ("describe_all_topics", describe(rtype=2, pattern=1)),
            ("describe_literal", describe(rtype=2, name=t, pattern=3)),
            ("describe_any", describe(rtype=2, name=t, pattern=1)),
            ("describe_match", describe(rtype=2, name=f"{t}.x", pattern=2)),
            ("describe_prefixed", describe(rtype=2, name=f"{t}.", pattern=4)),
            ("describe_principal", describe(principal="User:bob", host="10.0.0.7")),
            ("describe_op", describe(rtype=3, op=2, perm=3)),
            ("describe_none", describe(rtype=5)),
        ):
            await p.ask(label, req, version=version)
        deleted = await p.ask("delete", DeleteAclsRequest(filters=[
            delete_filter(rtype=2, name=t, pattern=3, principal="User:bob"),
            delete_filter(rtype=2, name=f"{t}.y", pattern=2),
            delete_filter(rtype=2, name=f"{t}.y", pattern=2),  # the same ACLs again
            delete_filter(rtype=7),  # nothing
        ]), version=version)
        gone = {m[:7] for r in deleted.filter_results for m in matched(r)}
        await p.until("describe_after", lambda: describe(rtype=2, pattern=1),
                      lambda r: not (gone & described(r)), version=version)
        await p.ask("delete_rest", DeleteAclsRequest(filters=[delete_filter()]),
                    version=version)

    kafka, snakka = run_both(secured, versions, scenario)
    assert_same_shape(kafka, snakka)
    for label in kafka.responses:
        k, s = kafka.responses[label], snakka.responses[label]
        if label.startswith("create"):
            assert [(r.error_code, r.error_message) for r in k.results] == \
                [(r.error_code, r.error_message) for r in s.results], label
        elif label.startswith("describe"):
            assert (k.error_code, k.error_message) == (s.error_code, s.error_message), label
            assert described(k) == described(s), label
        else:
            assert [(r.error_code, r.error_message, matched(r)) for r in k.filter_results] == \
                [(r.error_code, r.error_message, matched(r)) for r in s.filter_results], label


def _filter_kw() -> dict:
    return {"resource_type_filter": 1, "resource_name_filter": None, "pattern_type_filter": 1,
            "principal_filter": None, "host_filter": None, "operation": 1, "permission_type": 1}


def _answer(resp) -> object:
    """What a client reads of an ACL response: its error codes and messages."""
    if hasattr(resp, "results"):
        return [(r.error_code, r.error_message) for r in resp.results]
    if hasattr(resp, "filter_results"):
        return [(r.error_code, r.error_message, len(r.matching_acls))
                for r in resp.filter_results]
    return (resp.error_code, resp.error_message, len(resp.resources))


@pytest.mark.parametrize("req", [
    CreateAclsRequest(creations=[creation(pattern=2)]),  # MATCH in a binding
    CreateAclsRequest(creations=[creation(pattern=1)]),  # ANY in a binding
    CreateAclsRequest(creations=[creation(pattern=0)]),  # UNKNOWN
    CreateAclsRequest(creations=[creation(op=1)]),  # ANY operation
    CreateAclsRequest(creations=[creation(op=0)]),  # UNKNOWN operation
    CreateAclsRequest(creations=[creation(perm=1)]),  # ANY permission
    CreateAclsRequest(creations=[creation(rtype=1)]),  # ANY resource type
    CreateAclsRequest(creations=[creation(rtype=42)]),  # unknown resource type
    DescribeAclsRequest(**{**_filter_kw(), "operation": 0}),  # UNKNOWN
    DescribeAclsRequest(**{**_filter_kw(), "pattern_type_filter": 9}),  # unknown
    DeleteAclsRequest(filters=[delete_filter(pattern=9)]),  # unknown pattern
    DeleteAclsRequest(filters=[delete_filter(perm=0)]),  # UNKNOWN permission
], ids=lambda r: type(r).__name__)
def test_bindings_and_filters_kafka_refuses(secured, req):
    """Codes Kafka cannot take in a binding or filter: the same answer, or a closed
    connection on both."""
    async def answer(bootstrap: str) -> object:
        host, port = parse_bootstrap(bootstrap)
        async with KafkaConnection(host, port) as conn:
            try:
                return _answer(await asyncio.wait_for(conn.send(req), 30))
            except (ConnectionError, EOFError, OSError):
                return "closed"

    kafka, snakka = (asyncio.run(answer(b)) for b in secured)
    assert snakka == kafka


def test_kafka_acls_sh_add_list_remove_against_snakka(secured):
    bootstrap = secured[1]
    t = f"tool{RUN}"

    def acls(*args: str) -> str:
        r = run_tool("kafka-acls.sh", "--bootstrap-server", bootstrap, *args)
        assert r.returncode == 0, r.stdout + r.stderr
        return r.stdout

    out = acls("--add", "--allow-principal", "User:alice", "--operation", "Read",
               "--operation", "Describe", "--topic", t, "--group", f"g{t}")
    assert "Adding ACLs for resource" in out
    acls("--add", "--deny-principal", "User:mallory", "--deny-host", "10.0.0.66",
         "--operation", "Write", "--topic", f"{t}.", "--resource-pattern-type", "prefixed")
    listed = acls("--list", "--topic", t)
    assert f"ResourcePattern(resourceType=TOPIC, name={t}, patternType=LITERAL)" in listed
    assert "(principal=User:alice, host=*, operation=READ, permissionType=ALLOW)" in listed
    assert "(principal=User:alice, host=*, operation=DESCRIBE, permissionType=ALLOW)" in listed
    everything = acls("--list")
    assert "(principal=User:mallory, host=10.0.0.66, operation=WRITE, permissionType=DENY)" \
        in everything
    assert f"name=g{t}, patternType=LITERAL" in everything
    acls("--remove", "--force", "--allow-principal", "User:alice", "--operation", "Read",
         "--topic", t)
    listed = acls("--list", "--topic", t)
    assert "operation=READ" not in listed and "operation=DESCRIBE" in listed
    acls("--remove", "--force", "--topic", t)
    acls("--remove", "--force", "--group", f"g{t}")
    acls("--remove", "--force", "--topic", f"{t}.", "--resource-pattern-type", "prefixed")
    assert t not in acls("--list")
