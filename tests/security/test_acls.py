"""ACLs end to end: the StandardAuthorizer configured, ACLs managed with real admin clients
(confluent-kafka, kafka-python) and ``snakka acls``, durable across a restart, and enforced.

The brokers run with ``super.users=User:ANONYMOUS`` so a PLAINTEXT client (always
``User:ANONYMOUS``) may administer ACLs; enforcement for other principals is checked white-box
(the broker's authorizer asked for a principal set by hand: SASL and mTLS principals come with
their own issue-14 parts) and black-box by taking the super user away across a restart.
"""

from __future__ import annotations

import subprocess
from dataclasses import dataclass

import pytest
from confluent_kafka import KafkaException
from confluent_kafka.admin import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AdminClient,
    ResourcePatternType,
    ResourceType,
)
from kafka import KafkaAdminClient
from kafka.admin import (
    ACL,
    ACLFilter,
    ACLOperation,
    ACLPermissionType,
    ACLResourcePatternType,
    ResourcePattern,
    ResourcePatternFilter,
)
from kafka.admin import ResourceType as KpResourceType

from snakka.client.connection import KafkaConnection, parse_bootstrap
from snakka.protocol.errors import ErrorCode
from snakka.protocol.messages.create_acls_request import AclCreation, CreateAclsRequest
from snakka.protocol.messages.delete_acls_request import DeleteAclsFilter, DeleteAclsRequest
from snakka.protocol.messages.describe_acls_request import DescribeAclsRequest
from snakka.security import authorizer as az
from snakka.security.principal import KafkaPrincipal
from snakka.testing import EmbeddedBroker
from tests.integration.helpers import SNAKKA, run_async

pytestmark = pytest.mark.usefixtures("no_broker_errors")

STANDARD = "org.apache.kafka.metadata.authorizer.StandardAuthorizer"
SUPER_ANONYMOUS = {"authorizer.class.name": STANDARD, "super.users": "User:ANONYMOUS"}
EVERYTHING = AclBindingFilter(ResourceType.ANY, None, ResourcePatternType.ANY, None, None,
                              AclOperation.ANY, AclPermissionType.ANY)


@pytest.fixture
def broker():
    with EmbeddedBroker(config=SUPER_ANONYMOUS) as b:
        yield b


def ck_admin(b: EmbeddedBroker) -> AdminClient:
    return AdminClient({"bootstrap.servers": b.bootstrap_servers})


def binding(name: str, principal: str = "User:alice", op=AclOperation.READ,
            perm=AclPermissionType.ALLOW, pattern=ResourcePatternType.LITERAL,
            rtype=ResourceType.TOPIC, host: str = "*") -> AclBinding:
    return AclBinding(rtype, name, pattern, principal, host, op, perm)


def create(admin: AdminClient, bindings: list[AclBinding]) -> None:
    for fut in admin.create_acls(bindings, request_timeout=15).values():
        fut.result()


def described(admin: AdminClient, flt: AclBindingFilter = EVERYTHING) -> set[AclBinding]:
    return set(admin.describe_acls(flt, request_timeout=15).result())


def test_confluent_admin_create_describe_delete(broker):
    admin = ck_admin(broker)
    acls = [binding("orders"), binding("orders", "User:bob", AclOperation.WRITE),
            binding("app.", pattern=ResourcePatternType.PREFIXED),
            binding("*", "User:*", AclOperation.DESCRIBE),
            binding("g1", rtype=ResourceType.GROUP),
            binding("kafka-cluster", op=AclOperation.ALTER, rtype=ResourceType.BROKER,
                    perm=AclPermissionType.DENY, host="10.0.0.9")]
    create(admin, acls)
    create(admin, acls[:1])  # again: success, nothing new
    assert described(admin) == set(acls)
    # MATCH: every ACL that applies to topic app.orders.
    match = AclBindingFilter(ResourceType.TOPIC, "app.orders", ResourcePatternType.MATCH, None,
                             None, AclOperation.ANY, AclPermissionType.ANY)
    assert described(admin, match) == {acls[2], acls[3]}
    by_principal = AclBindingFilter(ResourceType.ANY, None, ResourcePatternType.ANY, "User:bob",
                                    None, AclOperation.ANY, AclPermissionType.ANY)
    assert described(admin, by_principal) == {acls[1]}
    # Delete: each filter's matching ACLs come back.
    orders = AclBindingFilter(ResourceType.TOPIC, "orders", ResourcePatternType.LITERAL, None,
                              None, AclOperation.ANY, AclPermissionType.ANY)
    results = admin.delete_acls([orders, match], request_timeout=15)
    assert set(results[orders].result()) == {acls[0], acls[1]}
    assert set(results[match].result()) == {acls[2], acls[3]}
    assert described(admin) == {acls[4], acls[5]}


def test_invalid_creations_get_invalid_request(broker):
    admin = ck_admin(broker)
    bad = binding("other", op=AclOperation.ALTER, rtype=ResourceType.BROKER)
    good = binding("t")
    futs = admin.create_acls([bad, good], request_timeout=15)
    futs[good].result()
    with pytest.raises(KafkaException) as e:
        futs[bad].result()
    assert e.value.args[0].code() == ErrorCode.INVALID_REQUEST
    assert "The only valid name for the CLUSTER resource is kafka-cluster" in str(e.value)
    assert described(admin) == {good}


def test_kafka_python_admin_acls(broker):
    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap_servers)
    try:
        acl = ACL(principal="User:alice", host="*", operation=ACLOperation.WRITE,
                  permission_type=ACLPermissionType.ALLOW,
                  resource_pattern=ResourcePattern(KpResourceType.TOPIC, "payments",
                                                   ACLResourcePatternType.PREFIXED))
        created = admin.create_acls([acl])
        assert created["failed"] == [] and len(created["succeeded"]) == 1
        flt = ACLFilter(principal=None, host=None, operation=ACLOperation.ANY,
                        permission_type=ACLPermissionType.ANY,
                        resource_pattern=ResourcePatternFilter(
                            KpResourceType.TOPIC, "payments.eu", ACLResourcePatternType.MATCH))
        found, error = admin.describe_acls(flt)
        assert error.errno == 0
        assert [(a.principal, a.operation, a.resource_pattern.resource_name,
                 a.resource_pattern.pattern_type) for a in found] == [
            ("User:alice", ACLOperation.WRITE, "payments", ACLResourcePatternType.PREFIXED)]
        deleted = admin.delete_acls([flt])
        assert len(deleted) == 1 and deleted[0][0] == flt
        assert [m.resource_pattern.resource_name for m in deleted[0][1]] == ["payments"]
        assert admin.describe_acls(flt)[0] == []
    finally:
        admin.close()


def test_acls_survive_a_restart_and_are_enforced_without_the_super_user():
    with EmbeddedBroker(config=SUPER_ANONYMOUS) as b:
        admin = ck_admin(b)
        # ANONYMOUS may describe the cluster's ACLs; alice may read topics app.*.
        keep = [binding("kafka-cluster", "User:ANONYMOUS", AclOperation.DESCRIBE,
                        rtype=ResourceType.BROKER),
                binding("app.", pattern=ResourcePatternType.PREFIXED)]
        gone = binding("tmp")
        create(admin, [*keep, gone])
        tmp = AclBindingFilter(ResourceType.TOPIC, "tmp", ResourcePatternType.LITERAL, None,
                               None, AclOperation.ANY, AclPermissionType.ANY)
        assert admin.delete_acls([tmp], request_timeout=15)[tmp].result() == [gone]
        b.stop()
        b.config.pop("super.users")  # nobody is super now
        b.start()
        admin = ck_admin(b)
        assert described(admin) == set(keep)  # DESCRIBE on the cluster: allowed by ACL
        with pytest.raises(KafkaException) as e:  # ALTER on the cluster: no ACL grants it
            create(admin, [binding("x")])
        assert e.value.args[0].code() == ErrorCode.CLUSTER_AUTHORIZATION_FAILED
        auth = b.broker.authorizer
        alice = _Ctx(KafkaPrincipal("User", "alice"))
        def topic(op: az.AclOperation, name: str) -> az.Action:
            return az.Action(op, az.ResourcePattern(az.ResourceType.TOPIC, name))

        ops = az.AclOperation
        assert auth.authorize(alice, [topic(ops.READ, "app.x"), topic(ops.DESCRIBE, "app.x"),
                                      topic(ops.WRITE, "app.x"), topic(ops.READ, "tmp")]) == [
            az.AuthorizationResult.ALLOWED, az.AuthorizationResult.ALLOWED,
            az.AuthorizationResult.DENIED, az.AuthorizationResult.DENIED]


@dataclass
class _Ctx:
    principal: KafkaPrincipal
    client_address: str = "127.0.0.1"
    api_key: int = 1


def test_a_non_super_principal_is_denied_the_acl_apis_with_kafka_codes():
    """Without super users and ACLs, ANONYMOUS may neither describe nor change ACLs."""
    async def go(bootstrap: str):
        host, port = parse_bootstrap(bootstrap)
        async with KafkaConnection(host, port) as conn:
            d = await conn.send(DescribeAclsRequest(
                resource_type_filter=1, resource_name_filter=None, pattern_type_filter=1,
                principal_filter=None, host_filter=None, operation=1, permission_type=1))
            c = await conn.send(CreateAclsRequest(creations=[AclCreation(
                resource_type=2, resource_name="t", resource_pattern_type=3,
                principal="User:x", host="*", operation=3, permission_type=3)] * 2))
            x = await conn.send(DeleteAclsRequest(filters=[DeleteAclsFilter(
                resource_type_filter=1, resource_name_filter=None, pattern_type_filter=1,
                principal_filter=None, host_filter=None, operation=1, permission_type=1)]))
            return d, c, x

    with EmbeddedBroker(config={"authorizer.class.name": STANDARD}) as b:
        d, c, x = run_async(go(b.bootstrap_servers))
        assert len(b.broker.metadata.acls) == 0
    cafe = ErrorCode.CLUSTER_AUTHORIZATION_FAILED
    assert d.error_code == cafe and d.resources == []
    assert [r.error_code for r in c.results] == [cafe, cafe]
    assert [(r.error_code, r.matching_acls) for r in x.filter_results] == [(cafe, [])]


def test_codes_kafka_refuses_get_kafka_answers(broker):
    """As the reference Kafka 4.0 answers (tests/reference/test_acls_reference.py): a code of 0
    (UNKNOWN) closes the connection (Kafka's request parsing throws); ANY or MATCH in a binding
    fails the whole CreateAcls with UNKNOWN_SERVER_ERROR; an unknown code is INVALID_REQUEST."""
    def creation(rtype=2, pattern=3, op=3):
        return AclCreation(resource_type=rtype, resource_name="t", resource_pattern_type=pattern,
                           principal="User:x", host="*", operation=op, permission_type=3)

    async def go():
        host, port = parse_bootstrap(broker.bootstrap_servers)
        for req in (
            CreateAclsRequest(creations=[creation(pattern=0)]),
            DescribeAclsRequest(resource_type_filter=0, resource_name_filter=None,
                                pattern_type_filter=1, principal_filter=None, host_filter=None,
                                operation=1, permission_type=1),
            DeleteAclsRequest(filters=[DeleteAclsFilter(
                resource_type_filter=1, resource_name_filter=None, pattern_type_filter=1,
                principal_filter=None, host_filter=None, operation=0, permission_type=1)]),
        ):
            async with KafkaConnection(host, port) as conn:
                with pytest.raises((ConnectionError, EOFError, OSError)):
                    await conn.send(req)
        async with KafkaConnection(host, port) as conn:
            refused = await conn.send(CreateAclsRequest(creations=[
                creation(), creation(pattern=2)]))
            unknown = await conn.send(CreateAclsRequest(creations=[creation(rtype=42),
                                                                   creation(op=99)]))
            return refused, unknown

    refused, unknown = run_async(go())
    assert [(r.error_code, r.error_message) for r in refused.results] == [
        (ErrorCode.UNKNOWN_SERVER_ERROR, None)] * 2
    assert [(r.error_code, r.error_message) for r in unknown.results] == [
        (ErrorCode.INVALID_REQUEST, "Invalid resourceType UNKNOWN"),
        (ErrorCode.INVALID_REQUEST, "Invalid operation UNKNOWN")]
    assert len(broker.broker.metadata.acls) == 0


def test_snakka_acls_cli_round_trip(broker):
    def cli(*args: str) -> str:
        r = subprocess.run([SNAKKA, "acls", *args, "-b", broker.bootstrap_servers],
                           capture_output=True, text=True, timeout=60)
        assert r.returncode == 0, r.stdout + r.stderr
        return r.stdout

    out = cli("add", "--allow-principal", "User:alice", "--allow-principal", "User:bob",
              "--operation", "Read", "--operation", "Describe", "--topic", "orders",
              "--group", "billing")
    assert out.count("Added ACL") == 8
    cli("add", "--deny-principal", "User:mallory", "--deny-host", "10.0.0.66",
        "--operation", "All", "--topic", "app.", "--resource-pattern-type", "prefixed")
    listed = cli("list")
    assert ("Current ACLs for resource `ResourcePattern(resourceType=TOPIC, name=app., "
            "patternType=PREFIXED)`: ") in listed
    assert "(principal=User:mallory, host=10.0.0.66, operation=ALL, permissionType=DENY)" \
        in listed
    assert listed.count("principal=User:") == 9
    only_orders = cli("list", "--topic", "orders")
    assert only_orders.count("principal=User:") == 4 and "billing" not in only_orders
    removed = cli("remove", "--allow-principal", "User:bob", "--operation", "Read",
                  "--topic", "orders", "--force")
    assert removed.strip() == ("Removed ACL (principal=User:bob, host=*, operation=READ, "
                               "permissionType=ALLOW) from resource `ResourcePattern("
                               "resourceType=TOPIC, name=orders, patternType=LITERAL)`")
    removed = cli("remove", "--group", "billing")
    assert removed.count("Removed ACL") == 4
    assert cli("list").count("principal=User:") == 4
    assert len(broker.broker.metadata.acls) == 4
