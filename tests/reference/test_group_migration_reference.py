"""KIP-848 online upgrade/downgrade, differentially: the same mixed-client sequence against the
reference Kafka 4.0 and snakka, comparing what the clients and the admin API observe.

The sequence is tests/integration/test_group_migration.py's (confluent-kafka's
``test_consumer_upgrade_downgrade``): + classic member, + consumer-protocol member, - the
classic one, + a classic one, - the consumer-protocol one. After every step we record the
group type (ConsumerGroupDescribe, else DescribeGroups), the sorted partition counts of the
members (coverage is asserted by the scenario itself) and, at the end, the DescribeGroups view
of the downgraded group (state, protocol type, assignor, member count). Both brokers run with
their default group configs (5 s consumer-protocol heartbeats), so this takes a while.
"""

from __future__ import annotations

import uuid

import pytest
from integration.helpers import ck_admin, ck_create_topic
from integration.test_group_migration import PARTITIONS, Member, check_members

pytestmark = pytest.mark.timeout(600)


def observe(bootstrap: str) -> list[tuple]:
    topic = f"migrate-diff-{uuid.uuid4().hex[:6]}"
    group = topic
    ck_create_topic(bootstrap, topic, PARTITIONS)
    admin = ck_admin(bootstrap)
    seen: list[tuple] = []
    members: list[Member] = []

    def classic() -> Member:
        return Member("classic", bootstrap, group, topic, "range")

    def consumer() -> Member:
        return Member("consumer", bootstrap, group, topic)

    try:
        for op, make, expected in [("add", classic, "CLASSIC"), ("add", consumer, "CONSUMER"),
                                   ("remove", None, "CONSUMER"), ("add", classic, "CONSUMER"),
                                   ("remove", None, "CLASSIC")]:
            if op == "add":
                assert make is not None
                members.append(make())
            else:
                members.pop(0).close()
            check_members(bootstrap, admin, members, group, topic, expected)
            seen.append((op, expected, sorted(len(m.owned()) for m in members)))
        g = admin.describe_consumer_groups([group])[group].result(timeout=30)
        seen.append(("final", g.type.name, g.state.name, g.partition_assignor,
                     len(g.members), sorted(len(m.assignment.topic_partitions)
                                            for m in g.members)))
    finally:
        for m in members:
            m.close()
    return seen


def test_upgrade_downgrade_matches_the_reference(brokers):
    kafka, snakka = brokers
    expected = observe(kafka)
    assert observe(snakka) == expected
