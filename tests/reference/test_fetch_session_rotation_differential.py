"""Fetch-session fairness against the reference Kafka 4.0: the same raw Fetch sequence (a full
fetch opening a session, then incremental ones, each response holding one partition's worth)
serves the backlogged partitions in the same order on both brokers (Kafka's FetchSession moves a
partition that returned records to the end of the session)."""

from __future__ import annotations

import uuid

from server.test_fetch_session_rotation import served_in_turn  # tests/ is on sys.path


def _served(bootstrap: str) -> list[list[int]]:
    return served_in_turn(bootstrap, f"fair-{uuid.uuid4().hex[:8]}")


def test_incremental_sessions_rotate_partitions_as_kafka(brokers):
    kafka, snakka = brokers
    on_kafka = _served(kafka)
    assert on_kafka == [[0], [0], [1], [2], [3]], on_kafka  # what Kafka 4.0 does
    assert _served(snakka) == on_kafka
