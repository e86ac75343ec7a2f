"""DescribeAcls / CreateAcls / DeleteAcls without an ACL authorizer (issue 13: MirrorMaker 2).

MirrorMaker 2 syncs topic ACLs by default: it calls DescribeAcls on the source cluster and takes
SECURITY_DISABLED as "no authorizer here" (one INFO line, sync off). snakka served none of the
three ACL APIs, so the Java admin client failed with UnsupportedVersionException and MM2 logged
an ERROR with a stack trace on every refresh (tests/reference/test_mirror_maker.py runs MM2).
A Kafka 4.0 broker without ``authorizer.class.name`` answers every one of them with
SECURITY_DISABLED (54), with the messages checked here (captured from the reference broker),
versions 1-3; snakka has no authorizer until issue 14, so it answers the same.
"""

from __future__ import annotations

import pytest
from kafka import KafkaAdminClient
from kafka.admin import (
    ACL,
    ACLFilter,
    ACLOperation,
    ACLPermissionType,
    ACLResourcePatternType,
    ResourcePattern,
    ResourcePatternFilter,
    ResourceType,
)
from kafka.errors import SecurityDisabledError

from snakka.client.connection import KafkaConnection, parse_bootstrap
from snakka.protocol.errors import ErrorCode
from snakka.protocol.messages.create_acls_request import AclCreation, CreateAclsRequest
from snakka.protocol.messages.delete_acls_request import DeleteAclsFilter, DeleteAclsRequest
from snakka.protocol.messages.describe_acls_request import DescribeAclsRequest

from .helpers import run_async

ANY_TOPIC = ResourcePatternFilter(ResourceType.TOPIC, None, ACLResourcePatternType.ANY)


@pytest.fixture
def broker(snakka_broker_factory):
    return snakka_broker_factory()


def test_kafka_python_admin_sees_security_disabled(broker):
    """Before: kafka-python found no DescribeAcls/CreateAcls/DeleteAcls in ApiVersions and
    failed with IncompatibleBrokerVersion instead of Kafka's SecurityDisabledError."""
    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap_servers)
    try:
        flt = ACLFilter(principal=None, host="*", operation=ACLOperation.ANY,
                        permission_type=ACLPermissionType.ANY, resource_pattern=ANY_TOPIC)
        with pytest.raises(SecurityDisabledError):
            admin.describe_acls(flt)
        acl = ACL(principal="User:alice", host="*", operation=ACLOperation.READ,
                  permission_type=ACLPermissionType.ALLOW,
                  resource_pattern=ResourcePattern(ResourceType.TOPIC, "t",
                                                   ACLResourcePatternType.LITERAL))
        created = admin.create_acls([acl])
        assert created["succeeded"] == [] and created["failed"] == [SecurityDisabledError]
        deleted = admin.delete_acls([flt])
        assert [(f, matched, err) for f, matched, err in deleted] == [
            (flt, [], SecurityDisabledError)]
    finally:
        admin.close()


@pytest.mark.parametrize("version", [1, 2, 3])
def test_acl_apis_answer_as_kafka_without_authorizer(broker, version):
    """Kafka 4.0's exact answers, one result per creation / filter, at every version it serves."""
    async def go():
        host, port = parse_bootstrap(broker.bootstrap_servers)
        async with KafkaConnection(host, port) as conn:
            assert conn.versions[29] == conn.versions[30] == conn.versions[31] == (1, 3)
            d = await conn.send(DescribeAclsRequest(
                resource_type_filter=2, resource_name_filter=None, pattern_type_filter=1,
                principal_filter=None, host_filter=None, operation=1, permission_type=1),
                version=version)
            c = await conn.send(CreateAclsRequest(creations=[AclCreation(
                resource_type=2, resource_name=f"t{i}", resource_pattern_type=3,
                principal="User:x", host="*", operation=3, permission_type=3)
                for i in range(2)]), version=version)
            x = await conn.send(DeleteAclsRequest(filters=[DeleteAclsFilter(
                resource_type_filter=2, resource_name_filter=None, pattern_type_filter=1,
                principal_filter=None, host_filter=None, operation=1, permission_type=1)] * 3),
                version=version)
            return d, c, x

    d, c, x = run_async(go())
    assert (d.error_code, d.error_message, d.resources) == (
        ErrorCode.SECURITY_DISABLED, "No Authorizer is configured on the broker", [])
    assert [(r.error_code, r.error_message) for r in c.results] == [
        (ErrorCode.SECURITY_DISABLED, "No Authorizer is configured.")] * 2
    assert [(r.error_code, r.error_message, r.matching_acls) for r in x.filter_results] == [
        (ErrorCode.SECURITY_DISABLED, "No Authorizer is configured.", [])] * 3
