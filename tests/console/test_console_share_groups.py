"""Share groups in the console: members, per share-partition SPSO/SPEO, the in-flight records by
state and delivery count (snakka's share consumer acquires and acknowledges), and resetting the
start offsets of an empty group through AlterShareGroupOffsets."""

from __future__ import annotations

from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ResourceType,
)
from integration.helpers import wait_until

from console.support import create_topic, produce
from snakka.client import ShareConsumer


def _earliest(bs: str, group: str) -> None:
    admin = AdminClient({"bootstrap.servers": bs})
    res = ConfigResource(ResourceType.GROUP, group, incremental_configs=[ConfigEntry(
        "share.auto.offset.reset", "earliest",
        incremental_operation=AlterConfigOpType.SET)])
    for f in admin.incremental_alter_configs([res]).values():
        f.result(timeout=30)


def test_share_group_pages_and_reset(console_broker, http):
    bs = console_broker.bootstrap_servers
    create_topic(bs, "jobs", 1)
    produce(bs, "jobs", 10)
    _earliest(bs, "workers")
    c = ShareConsumer({"bootstrap.servers": bs, "group.id": "workers",
                       "share.acknowledgement.mode": "explicit", "max.poll.records": "10"})
    got: list = []
    try:
        c.subscribe(["jobs"])

        def poll() -> bool:
            got.extend(c.poll(0.5))
            return len(got) >= 10

        wait_until(poll, 60, "10 share records")
        for r in got[:4]:
            c.acknowledge(r)  # ACCEPT: acknowledged; the other 6 stay acquired
        c.commit_sync()
        g = http.json("/api/share-groups/workers")
        assert g["state"] == "Stable" and len(g["members"]) == 1
        assert g["members"][0]["assignment"] == {"jobs": [0]}
        [p] = g["partitions"]
        assert p["start_offset"] == 4 and p["end_offset"] == 10 and p["high_watermark"] == 10
        assert p["in_flight"]["acquired"] == 6
        assert p["by_delivery_count"] == {"acquired": {"1": 6}}
        assert not g["can_reset"]
        page = http.page("/share-groups/workers")
        assert '<td class="n spso">4</td>' in page and '<td class="n acquired">6</td>' in page
        assert 'id="reset-form"' not in page
        listed = http.json("/api/groups")["groups"]
        assert {"group_id": "workers", "type": "share"}.items() <= \
            next(x for x in listed if x["group_id"] == "workers").items()
        assert 'data-group="workers"' in http.page("/share-groups")
    finally:
        c.close()
    # The member left: its records are available again, and the empty group can be reset.
    g = wait_until(lambda: (lambda g: g if not g["members"] else None)(
        http.json("/api/share-groups/workers")), 30, "the member to leave")
    assert g["partitions"][0]["in_flight"]["available"] == 6 and g["can_reset"]
    status, headers, _ = http.post("/share-groups/workers/reset",
                                   {"topic": "jobs", "strategy": "to-latest", "value": ""})
    assert status == 303
    assert "reset 1 share-partition(s) to-latest" in http.page(headers["Location"])
    [p] = http.json("/api/share-groups/workers")["partitions"]
    assert p["start_offset"] == 10 and p["lag"] == 0
