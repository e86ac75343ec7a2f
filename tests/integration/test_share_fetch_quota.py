"""ShareFetch under a ``consumer_byte_rate`` quota, as Kafka 4.0's KafkaApis: the request's byte
limit is capped at a quota span's worth of the rate (more would be throttled for sure), so a
share consumer with a quota acquires a span's worth per fetch, not everything at once."""

from __future__ import annotations

from snakka.testing import EmbeddedBroker

from .helpers import raw_connect, run_async
from .share_protocol import ShareMember, create_topic, produce, set_group_configs

RECORD = 5_000
BATCHES = 20


async def _quota(conn, rate: float) -> None:
    from snakka.protocol.messages.alter_client_quotas_request import (
        AlterClientQuotasRequest,
        EntityData,
        EntryData,
        OpData,
    )

    resp = await conn.send(AlterClientQuotasRequest(entries=[EntryData(
        entity=[EntityData(entity_type="client-id", entity_name=None)],
        ops=[OpData(key="consumer_byte_rate", value=rate, remove=False)])]))
    assert [e.error_code for e in resp.entries] == [0]


def test_share_fetch_is_capped_at_the_quota_span():
    # 2 samples of 1 s: the span is rate x (samples - 1) x window = 10,000 bytes.
    with EmbeddedBroker(config={"quota.window.num": "2",
                                "quota.window.size.seconds": "1"}) as broker:
        bs = broker.bootstrap_servers

        async def go():
            admin = await raw_connect(bs)
            tid = await create_topic(admin, "sq", 1)
            await set_group_configs(admin, "g", {"share.auto.offset.reset": "earliest"})
            for i in range(BATCHES):  # one batch each
                await produce(admin, "sq", 0, [b"%05d" % i + b"x" * (RECORD - 5)])
            m = await ShareMember.connect(bs, "g")
            await m.join(["sq"])
            unlimited = await m.fetch([(tid, 0)], max_bytes=1 << 20, max_records=1000)
            everything = len(unlimited.records(tid, 0))
            await m.close()
            # A second group with the quota in force.
            await set_group_configs(admin, "q", {"share.auto.offset.reset": "earliest"})
            await _quota(admin, 10_000)
            q = await ShareMember.connect(bs, "q")
            await q.join(["sq"])
            capped = await q.fetch([(tid, 0)], max_bytes=1 << 20, max_records=1000)
            pd = capped.partitions[(tid, 0)]
            await q.close()
            await admin.close()
            return everything, len(capped.records(tid, 0)), len(bytes(pd.records or b""))

        everything, got, nbytes = run_async(go())
        assert everything == BATCHES  # without a quota one fetch acquires them all
        assert 1 <= got < BATCHES
        assert nbytes <= 10_000 + RECORD + 200, nbytes  # the span, plus at most one batch
