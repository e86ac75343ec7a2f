"""The authorizer vocabulary (security/authorizer.py) carries Kafka's names and wire codes, and
the default authorizer allows everything (a Kafka broker without authorizer.class.name)."""

from __future__ import annotations

import pytest

from snakka.protocol.errors import ErrorCode
from snakka.security.authorizer import (
    CLUSTER,
    AclOperation,
    Action,
    AllowAllAuthorizer,
    AuthorizationResult,
    PatternType,
    ResourcePattern,
    ResourceType,
    denied_error_code,
)


def test_codes_are_kafkas():
    # org.apache.kafka.common.acl.AclOperation / resource.ResourceType / PatternType (4.0)
    assert [(o.name, o.value) for o in AclOperation] == [
        ("UNKNOWN", 0), ("ANY", 1), ("ALL", 2), ("READ", 3), ("WRITE", 4), ("CREATE", 5),
        ("DELETE", 6), ("ALTER", 7), ("DESCRIBE", 8), ("CLUSTER_ACTION", 9),
        ("DESCRIBE_CONFIGS", 10), ("ALTER_CONFIGS", 11), ("IDEMPOTENT_WRITE", 12),
        ("CREATE_TOKENS", 13), ("DESCRIBE_TOKENS", 14)]
    assert [(t.name, t.value) for t in ResourceType] == [
        ("UNKNOWN", 0), ("ANY", 1), ("TOPIC", 2), ("GROUP", 3), ("CLUSTER", 4),
        ("TRANSACTIONAL_ID", 5), ("DELEGATION_TOKEN", 6), ("USER", 7)]
    assert [(p.name, p.value) for p in PatternType] == [
        ("UNKNOWN", 0), ("ANY", 1), ("MATCH", 2), ("LITERAL", 3), ("PREFIXED", 4)]
    assert CLUSTER == ResourcePattern(ResourceType.CLUSTER, "kafka-cluster", PatternType.LITERAL)


def test_allow_all_answers_every_action_in_order():
    actions = [Action(AclOperation.WRITE, ResourcePattern(ResourceType.TOPIC, "t")),
               Action(AclOperation.CLUSTER_ACTION, CLUSTER)]
    assert AllowAllAuthorizer().authorize(None, actions) == [AuthorizationResult.ALLOWED] * 2
    assert AllowAllAuthorizer().authorize(None, []) == []


def test_denials_map_to_kafkas_error_codes():
    assert denied_error_code(ResourceType.TOPIC) == ErrorCode.TOPIC_AUTHORIZATION_FAILED
    assert denied_error_code(ResourceType.GROUP) == ErrorCode.GROUP_AUTHORIZATION_FAILED
    assert denied_error_code(ResourceType.CLUSTER) == ErrorCode.CLUSTER_AUTHORIZATION_FAILED
    assert denied_error_code(ResourceType.TRANSACTIONAL_ID) == \
        ErrorCode.TRANSACTIONAL_ID_AUTHORIZATION_FAILED
    with pytest.raises(ValueError):
        denied_error_code(ResourceType.ANY)
