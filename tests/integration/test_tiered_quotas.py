"""Tiered storage's quotas (KIP-956), both dynamic broker configs as in Kafka 4.0:

- ``remote.log.manager.copy.max.bytes.per.second``: the copier paces segment uploads over all
  partitions; raised with IncrementalAlterConfigs, the copy waiting on it goes at once. Judged
  from outside: ``__remote_log_metadata`` as a confluent-kafka consumer reads it (a copy
  waiting on the quota has its COPY_SEGMENT_STARTED record and no FINISHED yet), and the
  records read back from the earliest offset.
- ``remote.log.manager.fetch.max.bytes.per.second``: while the bytes read from remote storage
  are above it, fetches of remote offsets get no records (no error); a consumer reading from
  the earliest offset is held back, and gets every record in order once the quota allows."""

from __future__ import annotations

import tempfile

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

from snakka.remote.types import RemoteLogSegmentState
from snakka.testing import EmbeddedBroker

from .helpers import ck_alter_broker_configs, ck_consumer_config, ck_create_topic, wait_until
from .tiered_support import (
    TIERED_BROKER,
    LocalBackend,
    produce_numbered,
    read_from_earliest,
    remote_segment_states,
    tiered_topic_config,
    wait_tiered,
)

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("tiered"), pytest.mark.timeout(300)]

SEG = 64 * 1024
RATE = "remote.log.manager.copy.max.bytes.per.second"


def _set_broker_config(broker: EmbeddedBroker, name: str, value: str) -> None:
    ck_alter_broker_configs(broker.bootstrap_servers, {name: value}, str(broker.broker.node_id))


def _states(bootstrap: str, topic: str) -> list[str]:
    """The state of each remote segment of ``topic``; none before the copier created
    ``__remote_log_metadata``."""
    try:
        return [h.state.name for h in remote_segment_states(bootstrap, topic).values()]
    except AssertionError as e:
        if "UNKNOWN_TOPIC_OR_PART" in str(e):
            return []
        raise


def test_copy_quota_paces_uploads_and_changes_at_run_time():
    backend = LocalBackend(tempfile.mkdtemp(prefix="snakka-remote-"))
    # 1,000 B/s: the first 64 KiB segment goes at once and leaves ~65 s of debt, so the
    # second waits on the quota with its COPY_SEGMENT_STARTED written.
    broker = EmbeddedBroker(config={**TIERED_BROKER, **backend.configs(), RATE: "1000"})
    try:
        broker.start()
        bs = broker.bootstrap_servers
        ck_create_topic(bs, "paced", 1, tiered_topic_config(SEG, SEG))
        produce_numbered(bs, "paced", 0, 400)  # ~400 KB: six closed segments

        finished = RemoteLogSegmentState.COPY_SEGMENT_FINISHED.name
        started = RemoteLogSegmentState.COPY_SEGMENT_STARTED.name
        wait_until(lambda: sorted(_states(bs, "paced")) == [finished, started], 60,
                   "one segment copied and the next one waiting on the copy quota")

        _set_broker_config(broker, RATE, str(100 * 1024 * 1024))
        wait_until(lambda: (lambda s: len(s) >= 5 and set(s) == {finished})(
            _states(bs, "paced")), 60, "the waiting copy and the rest go at the new rate")
        assert read_from_earliest(bs, "paced", 400) == list(range(400))
    finally:
        broker.close()
        backend.close()


def test_fetch_quota_holds_remote_reads_back_until_raised():
    backend = LocalBackend(tempfile.mkdtemp(prefix="snakka-remote-"))
    broker = EmbeddedBroker(config={
        **TIERED_BROKER, **backend.configs(),
        # Small reader cache and chunks: every remote read goes to the store.
        "rsm.config.chunk.size": str(64 * 1024), "snakka.remote.log.reader.cache.bytes":
        str(128 * 1024), "remote.log.manager.fetch.quota.window.num": "2"})
    try:
        broker.start()
        bs = broker.bootstrap_servers
        ck_create_topic(bs, "held", 1, tiered_topic_config(SEG, SEG))
        produce_numbered(bs, "held", 0, 400)
        wait_tiered(bs, broker.data_dir, "held", [0], timeout=120, local_max=2 * SEG)
        quota = broker.broker.remote_fetch_quota
        assert quota is not None
        _set_broker_config(broker, "remote.log.manager.fetch.max.bytes.per.second", "1")

        c = Consumer({**ck_consumer_config(bs), "fetch.wait.max.ms": 50})
        try:
            c.assign([TopicPartition("held", 0, OFFSET_BEGINNING)])
            got: list[int] = []

            def poll() -> None:
                for m in c.consume(num_messages=1000, timeout=0.1):
                    assert not m.error(), m.error()
                    got.append(m.offset())

            # One remote read goes through, then every fetch of a remote offset is answered
            # with no records (and no error) while the rate is above the quota.
            wait_until(lambda: poll() or quota.throttled >= 5, 60,
                       "fetches answered without records by the remote fetch quota")
            assert len(got) < 400
            _set_broker_config(broker, "remote.log.manager.fetch.max.bytes.per.second",
                               str(1 << 40))
            wait_until(lambda: poll() or len(got) >= 400, 60, "every record after the change")
            assert got == list(range(400))
        finally:
            c.close()
    finally:
        broker.close()
        backend.close()
