"""Group administration through real admin clients and snakka's CLI.

A classic group of two confluent-kafka members (processes, see :mod:`.test_groups_harness`)
consumes a 3-partition topic and commits. Then:

* kafka-python's KafkaAdminClient: ListGroups, DescribeGroups (members, decoded assignments),
  OffsetFetch, DeleteGroups (NON_EMPTY_GROUP while active, GROUP_ID_NOT_FOUND for unknown),
  OffsetDelete (GROUP_SUBSCRIBED_TO_TOPIC while a member subscribes to the topic, removed
  once the group is empty), offsets altered on the empty group (with their metadata string).
* confluent-kafka's AdminClient: list_consumer_groups, describe_consumer_groups,
  list_consumer_group_offsets, alter_consumer_group_offsets (refused while the group has
  members, accepted once empty), delete_consumer_groups.
* kafka-python: OffsetFetch for several groups at once; remove_group_members (LeaveGroup v3+
  by group.instance.id) frees a dead static member's partitions at once.
* ``snakka groups list/describe/reset-offsets/delete``: describe shows the members, committed
  offsets and lag; reset-offsets refuses an active group, dry-runs by default, and with
  ``--to-earliest --execute`` makes the next consumer of the group start at offset 0.
"""

from __future__ import annotations

import pytest

from snakka.testing import EmbeddedBroker

from .helpers import SNAKKA, ck_create_topic, run
from .test_groups_harness import GROUP_BROKER_CONFIG, Feeder, Members

TOPIC = "orders"
PER_PARTITION = 10
pytestmark = pytest.mark.timeout(120)
ENV = {"COLUMNS": "200", "NO_COLOR": "1", "TERM": "dumb"}


@pytest.fixture
def broker():
    b = EmbeddedBroker(config=GROUP_BROKER_CONFIG)
    b.start()
    ck_create_topic(b.bootstrap_servers, TOPIC, 3)
    yield b
    b.close()


@pytest.fixture
def active_group(broker):
    """(group, Members): two confluent members that consumed and committed everything."""
    bs = broker.bootstrap_servers
    feeder = Feeder(bs, TOPIC, 3, "adm")
    feeder.burst(3 * PER_PARTITION)
    ms = Members("confluent-kafka", bs, "g-admin", TOPIC, session_timeout_ms=6000,
                 assignor="range")
    try:
        a, b = ms.start("member-a"), ms.start("member-b")
        ms.wait_shared([a, b], 3)
        ms.wait(lambda: {(d.partition, d.offset) for d in ms.deliveries() if d.committed}
                >= set(feeder.produced), 30, "every record consumed and committed")
        yield "g-admin", ms
    finally:
        ms.stop_all()


def cli(*args: str, check: bool = True):
    return run([SNAKKA, *args], env=ENV, check=check, timeout=60)


def table_rows(text: str) -> list[list[str]]:
    """The body rows of a table as the CLI prints it to a pipe: tab-separated lines."""
    cells = [ln.split("\t") for ln in text.splitlines()]
    return [c for c in cells if c and c[0] == TOPIC]


def test_kafka_python_admin(broker, active_group):
    from kafka import KafkaAdminClient, TopicPartition
    from kafka.structs import OffsetAndMetadata

    bs = broker.bootstrap_servers
    group, ms = active_group
    admin = KafkaAdminClient(bootstrap_servers=bs)
    try:
        listed = {g["group_id"]: g for g in admin.list_groups()}
        assert listed[group]["protocol_type"] == "consumer", listed
        assert listed[group].get("group_state", "Stable") == "Stable", listed

        desc = admin.describe_groups([group])[group]
        assert desc["error"] is None and desc["group_state"] == "Stable", desc
        assert desc["protocol_type"] == "consumer" and desc["protocol_data"] == "range", desc
        by_client = {m["client_id"]: m for m in desc["members"]}
        assert set(by_client) == {"member-a", "member-b"}, desc["members"]
        for m in ms.all:
            member = by_client[m.name]
            assert member["member_id"] == m.member_id
            parts = {p for t in member["member_assignment"]["assigned_partitions"]
                     for p in t["partitions"]}
            assert parts == m.snapshot()["owned"], (member, m.describe())

        offsets = admin.list_group_offsets(group)[group]
        assert {tp.partition: om.offset for tp, om in offsets.items()} == {
            p: PER_PARTITION for p in range(3)}

        res = admin.delete_groups([group, "g-never-existed"])
        assert res == {group: "NonEmptyGroupError",
                       "g-never-existed": "GroupIdNotFoundError"}, res
        res = admin.delete_group_offsets(group, [TopicPartition(TOPIC, 0)])
        assert [e.__name__ for e in res.values()] == ["GroupSubscribedToTopicError"], res

        for m in ms.all:
            m.close()
        assert admin.describe_groups([group])[group]["group_state"] == "Empty"
        res = admin.delete_group_offsets(group, [TopicPartition(TOPIC, 0)])
        assert [e.__name__ for e in res.values()] == ["NoError"], res
        res = admin.alter_group_offsets(group, {
            TopicPartition(TOPIC, 1): OffsetAndMetadata(3, "reprocess from 3", -1)})
        assert [e.__name__ for e in res.values()] == ["NoError"], res
        offsets = admin.list_group_offsets(group)[group]
        got = {tp.partition: (om.offset, om.metadata) for tp, om in offsets.items()
               if om.offset >= 0}
        assert got == {1: (3, "reprocess from 3"), 2: (PER_PARTITION, "")}, got

        assert admin.delete_groups([group]) == {group: "OK"}
        assert group not in {g["group_id"] for g in admin.list_groups()}
        offsets = admin.list_group_offsets(group)[group]
        assert all(om.offset < 0 for om in offsets.values()), offsets
    finally:
        admin.close()


def test_confluent_admin(broker, active_group):
    from confluent_kafka import (
        ConsumerGroupState,
        ConsumerGroupTopicPartitions,
        KafkaException,
        TopicPartition,
    )
    from confluent_kafka.admin import AdminClient

    bs = broker.bootstrap_servers
    group, ms = active_group
    admin = AdminClient({"bootstrap.servers": bs})

    listing = admin.list_consumer_groups(request_timeout=15).result()
    assert not listing.errors, listing.errors
    mine = [g for g in listing.valid if g.group_id == group]
    assert len(mine) == 1 and mine[0].state == ConsumerGroupState.STABLE
    assert not mine[0].is_simple_consumer_group

    desc = admin.describe_consumer_groups([group], request_timeout=15)[group].result()
    assert desc.state == ConsumerGroupState.STABLE and desc.partition_assignor == "range"
    assert {m.client_id: {tp.partition for tp in m.assignment.topic_partitions}
            for m in desc.members} == {m.name: m.snapshot()["owned"] for m in ms.all}
    assert {m.member_id for m in desc.members} == {m.member_id for m in ms.all}
    # Kafka's client host: the address the member connected from, "/" + host, no port.
    assert {m.host for m in desc.members} <= {"/127.0.0.1", "/::1"}, desc.members

    def offsets() -> dict[int, int]:
        res = admin.list_consumer_group_offsets(
            [ConsumerGroupTopicPartitions(group)], request_timeout=15)[group].result()
        return {tp.partition: tp.offset for tp in res.topic_partitions if tp.offset >= 0}

    assert offsets() == {p: PER_PARTITION for p in range(3)}

    # Offsets cannot be altered under an active group's feet (Kafka: UNKNOWN_MEMBER_ID).
    with pytest.raises(KafkaException) as err:
        res = admin.alter_consumer_group_offsets([ConsumerGroupTopicPartitions(
            group, [TopicPartition(TOPIC, 0, 1)])], request_timeout=15)[group].result()
        errors = [tp.error for tp in res.topic_partitions if tp.error is not None]
        if errors:
            raise KafkaException(errors[0])
    assert "UNKNOWN_MEMBER_ID" in str(err.value) or "Unknown member" in str(err.value), err.value
    assert offsets() == {p: PER_PARTITION for p in range(3)}

    for m in ms.all:
        m.close()
    res = admin.alter_consumer_group_offsets([ConsumerGroupTopicPartitions(
        group, [TopicPartition(TOPIC, 0, 1), TopicPartition(TOPIC, 2, 4)])],
        request_timeout=15)[group].result()
    assert all(tp.error is None for tp in res.topic_partitions), res.topic_partitions
    assert offsets() == {0: 1, 1: PER_PARTITION, 2: 4}
    desc = admin.describe_consumer_groups([group], request_timeout=15)[group].result()
    assert desc.state == ConsumerGroupState.EMPTY and desc.members == []

    admin.delete_consumer_groups([group], request_timeout=15)[group].result()
    with pytest.raises(KafkaException) as err:
        admin.delete_consumer_groups(["g-never-existed"],
                                     request_timeout=15)["g-never-existed"].result()
    assert "GROUP_ID_NOT_FOUND" in str(err.value) or "not found" in str(err.value).lower()
    listing = admin.list_consumer_groups(request_timeout=15).result()
    assert group not in {g.group_id for g in listing.valid}


def test_cli_describe_reset_delete(broker, active_group):
    bs = broker.bootstrap_servers
    group, ms = active_group
    members = {m.member_id: m.name for m in ms.all}

    assert f"{group}\tclassic\tStable" in cli("groups", "list", "-b", bs).stdout.decode()
    out = cli("groups", "describe", group, "-b", bs).stdout.decode()
    assert "state Stable" in out and "members 2" in out, out
    rows = table_rows(out)
    assert [r[1] for r in rows] == ["0", "1", "2"], out
    for _topic, p, cur, end, lag, consumer, _host, client in rows:
        assert (cur, end, lag) == (str(PER_PARTITION), str(PER_PARTITION), "0"), out
        assert members.get(consumer) == client, (consumer, client, members)
        owner = next(m for m in ms.all if m.name == client)
        assert int(p) in owner.snapshot()["owned"]

    p = cli("groups", "reset-offsets", group, "--topic", TOPIC, "--to-earliest", "--execute",
            "-b", bs, check=False)
    assert p.returncode != 0 and b"active member" in p.stderr and b"Traceback" not in p.stderr

    for m in ms.all:
        m.close()
    Feeder(bs, TOPIC, 3, "lag").burst(3)  # one more record per partition: lag 1
    out = cli("groups", "describe", group, "-b", bs).stdout.decode()
    assert "state Empty" in out and "members 0" in out, out
    assert [r[2:6] for r in table_rows(out)] == [
        [str(PER_PARTITION), str(PER_PARTITION + 1), "1", "-"]] * 3, out

    dry = cli("groups", "reset-offsets", group, "--topic", TOPIC, "--to-earliest", "-b", bs)
    assert b"Dry run" in dry.stderr
    assert dry.stdout.decode().split("\n")[:3] == [f"{TOPIC}\t{p}\t{PER_PARTITION}\t0"
                                                   for p in range(3)], dry.stdout
    out = cli("groups", "describe", group, "-b", bs).stdout.decode()
    assert [r[2] for r in table_rows(out)] == [str(PER_PARTITION)] * 3, "a dry run committed"

    done = cli("groups", "reset-offsets", group, "--topic", TOPIC, "--to-earliest", "--execute",
               "-b", bs)
    assert b"Offsets committed." in done.stderr
    out = cli("groups", "describe", group, "-b", bs).stdout.decode()
    assert [r[2:5] for r in table_rows(out)] == [["0", str(PER_PARTITION + 1),
                                                  str(PER_PARTITION + 1)]] * 3, out

    # The group's next consumer starts at the earliest offset of every partition.
    again = Members("kafka-python", bs, group, TOPIC, session_timeout_ms=6000)
    try:
        m = again.start("after-reset")
        again.wait(lambda: len({(d.partition, d.offset) for d in m.deliveries})
                   >= 3 * (PER_PARTITION + 1), 45, "the whole topic to be consumed again")
        firsts = {}
        for d in sorted(m.deliveries, key=lambda d: d.t):
            firsts.setdefault(d.partition, d.offset)
        assert firsts == {0: 0, 1: 0, 2: 0}, firsts
        m.close()
    finally:
        again.stop_all()

    out = cli("groups", "delete", group, "-b", bs).stdout.decode()
    assert out.strip() == f"Deleted group {group}."
    assert group not in cli("groups", "list", "-b", bs).stdout.decode()


def test_remove_static_member_and_multi_group_offsets(broker):
    """kafka-python admin: OffsetFetch for several groups in one request (v8+), and LeaveGroup
    v3+ by group.instance.id (``remove_group_members``): a dead static member's partitions move
    at once instead of after its (long) session timeout; unknown members are reported."""
    from kafka import KafkaAdminClient
    from kafka.admin import MemberToRemove

    bs = broker.bootstrap_servers
    Feeder(bs, TOPIC, 3, "st").burst(3 * PER_PARTITION)
    ms = Members("confluent-kafka", bs, "g-static-admin", TOPIC, session_timeout_ms=60000,
                 max_poll_interval_ms=60000)
    admin = KafkaAdminClient(bootstrap_servers=bs)
    try:
        a, b = ms.start("a", instance_id="inst-a"), ms.start("b", instance_id="inst-b")
        ms.wait_shared([a, b], 3)
        ms.wait(lambda: sum(d.committed for d in ms.deliveries()) >= 3 * PER_PARTITION, 30,
                "every record consumed and committed")
        offsets = admin.list_group_offsets(["g-static-admin", "g-never-existed"])
        assert {g: {tp.partition: om.offset for tp, om in v.items()}
                for g, v in offsets.items()} == {
            "g-static-admin": {p: PER_PARTITION for p in range(3)}, "g-never-existed": {}}

        b.kill()  # static: the broker would keep its partitions for 60 s
        res = admin.remove_group_members("g-static-admin", [MemberToRemove(
            group_instance_id="inst-b")])
        assert {k: e.__name__ for k, e in res.items()} == {"inst-b": "NoError"}, res
        ms.wait_shared([a], 3, timeout=20, what="b's partitions to move to a")
        res = admin.remove_group_members("g-static-admin", [
            MemberToRemove(group_instance_id="inst-nobody"), MemberToRemove(member_id="ghost")])
        assert {k: e.__name__ for k, e in res.items()} == {
            "inst-nobody": "UnknownMemberIdError", "ghost": "UnknownMemberIdError"}, res
    finally:
        admin.close()
        ms.stop_all()
