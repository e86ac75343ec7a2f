"""Kafka's cap on one user operation's metadata records (``MAX_RECORDS_PER_USER_OP``, 10,000),
the same requests to the reference Kafka 4.0 and to snakka.

Kafka's controller counts what it would write (a topic: its TopicRecord, one PartitionRecord per
partition, one ConfigRecord per config given; CreatePartitions: one PartitionRecord per new
partition; CreateAcls: one record per new ACL). CreateTopics and CreateAcls that would write more
are refused whole: every entry POLICY_VIOLATION "Unable to perform excessively large batch
operation.", validate-only requests too, nothing created (so one topic may have at most 9,999
partitions at creation); a CreateTopics asking for more than 10,000 partitions in all is refused
whole before that ("Excessively large number of partitions per request."). CreatePartitions
fails per topic: the topic whose partitions overflow the request's list, and every later one
that adds any, UNKNOWN_SERVER_ERROR without a message. Every request here that succeeds is
validate-only (nothing is made: creating 9,999 partitions takes Kafka ~45 s).
"""

from __future__ import annotations

import pytest

from snakka.protocol.messages.create_acls_request import AclCreation, CreateAclsRequest
from snakka.protocol.messages.create_partitions_request import (
    CreatePartitionsRequest,
    CreatePartitionsTopic,
)
from snakka.protocol.messages.create_topics_request import (
    CreatableTopic,
    CreatableTopicConfig,
    CreateTopicsRequest,
)
from snakka.protocol.messages.metadata_request import MetadataRequest, MetadataRequestTopic
from snakka.util.java import java_hash_set_order

from .differential import Peer, assert_same_shape, run_both
from .test_acls_reference import secured  # noqa: F401  (the module fixture: brokers with ACLs)
from .test_differential import name

POLICY_VIOLATION = 44
MESSAGE = "Unable to perform excessively large batch operation."


def topic(name: str, partitions: int, configs: dict[str, str] | None = None) -> CreatableTopic:
    return CreatableTopic(name=name, num_partitions=partitions, replication_factor=1,
                          assignments=[], configs=[CreatableTopicConfig(name=k, value=v)
                                                   for k, v in (configs or {}).items()])


def create(*topics: CreatableTopic, validate_only: bool = False) -> CreateTopicsRequest:
    return CreateTopicsRequest(topics=list(topics), timeout_ms=60_000,
                               validate_only=validate_only)


def _refused_whole(resp, entries, message: str = MESSAGE) -> None:
    assert [(e.error_code, e.error_message) for e in entries] == \
        [(POLICY_VIOLATION, message)] * len(entries), resp


def test_create_topics_and_partitions_over_the_cap(brokers, versions):
    big, a, b, bad = name("uop-big"), name("uop-a"), name("uop-b"), name("uop-bad")
    grown, grown2, grown3 = name("uop-grow"), name("uop-grow2"), name("uop-grow3")

    async def scenario(p: Peer):
        # one topic: 1 + 10,000 records
        await p.ask("one_topic_10000", create(topic(big, 10_000)))
        await p.ask("one_topic_10000_validate", create(topic(big, 10_000), validate_only=True))
        await p.ask("one_topic_9999_validate", create(topic(big, 9_999), validate_only=True))
        # configs count: 1 + 9,998 + 2 > 10,000; 1 + 9,997 + 2 = 10,000
        cfg = {"retention.ms": "100000", "cleanup.policy": "delete"}
        await p.ask("configs_over", create(topic(big, 9_998, cfg), validate_only=True))
        await p.ask("configs_at", create(topic(big, 9_997, cfg), validate_only=True))
        # several topics: first the partitions asked for in all, invalid topics included
        # (5,000 + 1 + 5,000), then the records of the valid ones (5,001 + 5,000)
        await p.ask("two_topics", create(topic(a, 5_000), topic(bad, 1, {"retention.ms": "x"}),
                                         topic(b, 5_000)))
        await p.ask("two_topics_records", create(topic(a, 5_000), topic(b, 4_999)))
        await p.ask("nothing_created", MetadataRequest(
            topics=[MetadataRequestTopic(name=n) for n in (big, a, b, bad)],
            allow_auto_topic_creation=False))
        # CreatePartitions: 10,001 new PartitionRecords; 10,000; then three topics growing by
        # 6,000, 5,000 and 1 (the second overflows the request's list: it and the third fail)
        for t in (grown, grown2, grown3):
            await p.create_topic(t, 1)

        def grow(*counts: tuple[str, int]) -> CreatePartitionsRequest:
            return CreatePartitionsRequest(topics=[CreatePartitionsTopic(
                name=t, count=c, assignments=None) for t, c in counts], timeout_ms=60_000,
                validate_only=True)
        await p.ask("grow_10001", grow((grown, 10_002)))
        await p.ask("grow_10000", grow((grown, 10_001)))
        await p.ask("grow_three", grow((grown, 6_001), (grown2, 5_001), (grown3, 2)))

    kafka, snakka = run_both(brokers, versions, scenario)
    assert_same_shape(kafka, snakka)
    for peer in (kafka, snakka):
        r = peer.responses
        for label in ("one_topic_10000", "one_topic_10000_validate", "configs_over",
                      "two_topics_records"):
            _refused_whole(r[label], r[label].topics)
        _refused_whole(r["two_topics"], r["two_topics"].topics,
                       "Excessively large number of partitions per request.")
        assert [t.name for t in r["two_topics"].topics] == [a, bad, b]
        for label in ("one_topic_9999_validate", "configs_at"):
            assert r[label].topics[0].error_code == 0, (peer.name, r[label])
        assert {t.error_code for t in r["nothing_created"].topics} == {3}, peer.name
        # Kafka's per-topic handler catches the overflow as an unexpected exception
        assert [(x.error_code, x.error_message) for x in r["grow_10001"].results] == \
            [(-1, None)], (peer.name, r["grow_10001"])
        assert r["grow_10000"].results[0].error_code == 0, (peer.name, r["grow_10000"])
        # which topics fail depends on Kafka's HashSet order of the names (the shapes above
        # compare them per name): the one that overflows and every one after it; the 6,000
        # and the 5,000 cannot both fit
        codes = {x.name: x.error_code for x in r["grow_three"].results}
        order = list(java_hash_set_order([grown, grown2, grown3]))
        first_failed = [codes[n] for n in order].index(-1)
        assert [codes[n] for n in order] == [0] * first_failed + [-1] * (3 - first_failed), \
            (peer.name, order, r["grow_three"])
        assert codes[grown] == -1 or codes[grown2] == -1, (peer.name, r["grow_three"])


@pytest.mark.timeout(300)
def test_create_acls_over_the_cap(secured, versions):  # noqa: F811  (the imported fixture)
    """10,001 new ACLs in one request: refused whole; 10,001 creations of which two repeat an
    ACL (no record for a repeat): 9,999 records, accepted."""
    def acl(i: int) -> AclCreation:
        return AclCreation(resource_type=2, resource_name=f"{name('uop-acl')}-{i}",
                           resource_pattern_type=3, principal="User:alice", host="*",
                           operation=3, permission_type=3)

    async def scenario(p: Peer):
        await p.ask("acls_10001", CreateAclsRequest(creations=[acl(i) for i in range(10_001)]))
        await p.ask("acls_repeats", CreateAclsRequest(
            creations=[acl(i) for i in range(9_999)] + [acl(0), acl(1)]))

    kafka, snakka = run_both(secured, versions, scenario)
    assert_same_shape(kafka, snakka)
    for peer in (kafka, snakka):
        r = peer.responses
        _refused_whole(r["acls_10001"], r["acls_10001"].results)
        assert {x.error_code for x in r["acls_repeats"].results} == {0}, peer.name
