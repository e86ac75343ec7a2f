"""``remote.log.manager.copy.max.bytes.per.second`` (Kafka's RLMQuotaManager for copies): the
copier paces segment uploads over all partitions, and the limit is a dynamic broker config, as
in Kafka 4.0: raised with IncrementalAlterConfigs, the copy waiting on it goes at once.

Judged from outside: ``__remote_log_metadata`` as a confluent-kafka consumer reads it (a copy
waiting on the quota has its COPY_SEGMENT_STARTED record and no FINISHED yet), and the records
read back from the earliest offset."""

from __future__ import annotations

import tempfile

import pytest
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource

from snakka.remote.types import RemoteLogSegmentState
from snakka.testing import EmbeddedBroker

from .helpers import ck_create_topic, wait_until
from .tiered_support import (
    TIERED_BROKER,
    LocalBackend,
    produce_numbered,
    read_from_earliest,
    remote_segment_states,
    tiered_topic_config,
)

pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("tiered"), pytest.mark.timeout(300)]

SEG = 64 * 1024
RATE = "remote.log.manager.copy.max.bytes.per.second"


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
        admin = AdminClient({"bootstrap.servers": bs})
        ck_create_topic(bs, "paced", 1, tiered_topic_config(SEG, SEG))
        produce_numbered(bs, "paced", 0, 400)  # ~400 KB: six closed segments

        finished = RemoteLogSegmentState.COPY_SEGMENT_FINISHED.name
        started = RemoteLogSegmentState.COPY_SEGMENT_STARTED.name
        wait_until(lambda: sorted(_states(bs, "paced")) == [finished, started], 60,
                   "one segment copied and the next one waiting on the copy quota")

        res = ConfigResource("BROKER", str(broker.broker.node_id), incremental_configs=[
            ConfigEntry(RATE, str(100 * 1024 * 1024),
                        incremental_operation=AlterConfigOpType.SET)])
        for fut in admin.incremental_alter_configs([res]).values():
            fut.result(timeout=30)
        wait_until(lambda: (lambda s: len(s) >= 5 and set(s) == {finished})(
            _states(bs, "paced")), 60, "the waiting copy and the rest go at the new rate")
        assert read_from_earliest(bs, "paced", 400) == list(range(400))
    finally:
        broker.close()
        backend.close()
