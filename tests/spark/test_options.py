"""Option rules of the ``snakka`` source and sink (Spark's Kafka connector rules), and the
driver-side planning helpers: no Spark session needed."""

from __future__ import annotations

import pytest

from snakka.spark.options import (
    SnakkaSparkOptionError,
    parse_read_options,
    parse_write_options,
)
from snakka.spark.reader import OffsetRange, plan_ranges, rate_limit

BS = {"kafka.bootstrap.servers": "localhost:9092"}


def test_defaults_and_case_insensitive_names():
    s = parse_read_options({**BS, "SUBSCRIBE": "a, b", "IncludeHeaders": "TRUE",
                            "maxOFFSETSpertrigger": "10"}, streaming=True)
    assert s.subscribe == ("a", "b")
    assert s.include_headers is True
    assert s.max_offsets_per_trigger == 10
    assert s.starting == ("latest",)  # streaming default
    assert parse_read_options({**BS, "subscribe": "a"}, streaming=False).starting == ("earliest",)
    s = parse_read_options({**BS, "assign": '{"t":[1,0]}', "startingOffsets":
                            '{"t":{"0":5,"1":-2}}', "endingOffsets": '{"t":{"0":9,"1":-1}}'},
                           streaming=False)
    assert s.assign == (("t", 0), ("t", 1))
    assert s.starting == ("offsets", {("t", 0): 5, ("t", 1): -2})
    assert s.ending == ("offsets", {("t", 0): 9, ("t", 1): -1})
    # Timestamps take precedence over offsets, as in Spark.
    s = parse_read_options({**BS, "subscribe": "t", "startingOffsets": "earliest",
                            "startingTimestamp": "1000"}, streaming=True)
    assert s.starting == ("timestamp", 1000)
    assert parse_read_options({**BS, "subscribe": "t", "kafka.request.timeout.ms": "2000"},
                              streaming=True).client.request_timeout_ms == 2000


@pytest.mark.parametrize("options, streaming, message", [
    ({}, True, "one of the options 'subscribe', 'subscribePattern' or 'assign'"),
    ({"subscribe": "a", "assign": '{"a":[0]}'}, True, "only one of the options"),
    ({"subscribe": " , "}, True, "option 'subscribe' names no topics"),
    ({"subscribePattern": "("}, True, "not a valid regular expression"),
    ({"assign": "{not json"}, True, "option 'assign' is not valid JSON"),
    ({"assign": '{"a":0}'}, True, "must map to a list of partition numbers"),
    ({"assign": "[1,2]"}, True, "must be a non-empty JSON object"),
    ({"subscribe": "a", "startingOffsets": "{bad"}, True, "option 'startingOffsets' is not valid JSON"),
    ({"subscribe": "a", "startingOffsets": '{"a":{"x":1}}'}, True, "partition 'x' of topic 'a'"),
    ({"subscribe": "a", "startingOffsets": '{"a":{"0":"1"}}'}, True, "integer value"),
    ({"subscribe": "a", "startingOffsets": '{"a":{"0":-3}}'}, True, "offset -3 for a-0 is invalid"),
    ({"subscribe": "a", "startingOffsets": "latest"}, False, "cannot be 'latest' for batch"),
    ({"subscribe": "a", "startingOffsets": '{"a":{"0":-1}}'}, False, "cannot start at latest"),
    ({"subscribe": "a", "endingOffsets": "earliest"}, False, "cannot be 'earliest'"),
    ({"subscribe": "a", "endingOffsets": '{"a":{"0":-2}}'}, False, "cannot end at earliest"),
    ({"subscribe": "a", "endingOffsets": "latest"}, True, "not valid for streaming queries"),
    ({"assign": '{"a":[0]}', "startingOffsets": '{"b":{"0":1}}'}, True, "that 'assign' does not"),
    ({"subscribe": "a", "maxOffsetsPerTrigger": "0"}, True, "'maxOffsetsPerTrigger' must be >= 1"),
    ({"subscribe": "a", "minPartitions": "x"}, True, "'minPartitions' must be an integer"),
    ({"subscribe": "a", "failOnDataLoss": "yes"}, True, "'failOnDataLoss' must be 'true' or"),
    ({"subscribe": "a", "startingTimestamp": "-5"}, True, "'startingTimestamp' must be >= 0"),
    ({"subscribe": "a", "startingOffsetsByTimestampStrategy": "x"}, True, "'error' or 'latest'"),
    ({"subscribe": "a", "subscription": "a"}, True, "unknown option 'subscription'"),
    ({"subscribe": "a", "kafka.auto.offset.reset": "earliest"}, True, "set the source option 'startingOffsets'"),
    ({"subscribe": "a", "kafka.ssl.truststore.location": "x"}, True,
     "'kafka.ssl.truststore.location' needs 'kafka.security.protocol' = SSL or SASL_SSL"),
    ({"subscribe": "a", "kafka.security.protocol": "SASL_SSL"}, True,
     "'kafka.sasl.mechanism' is not set, and Kafka's default GSSAPI (Kerberos) is not supported"),
    ({"subscribe": "a", "kafka.security.protocol": "TLS"}, True,
     "'kafka.security.protocol' must be one of PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL"),
    ({"subscribe": "a", "kafka.isolation.level": "x"}, True, "read_uncommitted or read_committed"),
])
def test_bad_read_options(options, streaming, message):
    with pytest.raises(SnakkaSparkOptionError, match=None) as e:
        parse_read_options({**BS, **options}, streaming=streaming)
    assert message in str(e.value)


def test_bootstrap_required_and_parsed():
    with pytest.raises(SnakkaSparkOptionError, match="'kafka.bootstrap.servers' must be specified"):
        parse_read_options({"subscribe": "a"}, streaming=True)
    with pytest.raises(SnakkaSparkOptionError, match="list of host:port"):
        parse_read_options({"subscribe": "a", "kafka.bootstrap.servers": "nohost"}, streaming=True)
    s = parse_read_options({"subscribe": "a", "kafka.bootstrap.servers": "h1:1, [::1]:2"},
                           streaming=True)
    assert s.client.bootstrap_servers == (("h1", 1), ("::1", 2))


def test_write_options():
    w = parse_write_options({**BS, "topic": "t", "kafka.compression.type": "lz4",
                             "kafka.acks": "1", "checkpointLocation": "/x"})
    assert (w.topic, w.compression, w.acks, w.idempotent) == ("t", 3, 1, False)
    assert parse_write_options(BS).idempotent is True
    for opts, msg in [({"kafka.compression.type": "brotli"}, "kafka.compression.type"),
                      ({"kafka.acks": "2"}, "kafka.acks"),
                      ({"kafka.acks": "1", "kafka.enable.idempotence": "true"}, "requires"),
                      ({"kafka.value.serializer": "x"}, "convert the 'value' column"),
                      ({"subscribe": "t"}, "unknown option 'subscribe' for the snakka sink")]:
        with pytest.raises(SnakkaSparkOptionError) as e:
            parse_write_options({**BS, **opts})
        assert msg in str(e.value)


def test_transactional_sink_options():
    w = parse_write_options({**BS, "topic": "t", "transactionalIdPrefix": " q1 ",
                             "kafka.transaction.timeout.ms": "120000"})
    assert (w.transactional_id_prefix, w.transaction_timeout_ms) == ("q1", 120_000)
    assert parse_write_options(BS).transactional_id_prefix is None
    assert parse_write_options({**BS, "transactionalidprefix": "q"}).transaction_timeout_ms \
        == 60_000
    for opts, msg in [({"transactionalIdPrefix": " "}, "'transactionalIdPrefix' is empty"),
                      ({"transactionalIdPrefix": "q", "kafka.acks": "1"}, "idempotent"),
                      ({"transactionalIdPrefix": "q", "kafka.enable.idempotence": "false"},
                       "idempotent"),
                      ({"kafka.transaction.timeout.ms": "1000"}, "needs 'transactionalIdPrefix'"),
                      ({"transactionalIdPrefix": "q", "kafka.transaction.timeout.ms": "0"},
                       ">= 1"),
                      ({"kafka.transactional.id": "x"}, "'transactionalIdPrefix' instead")]:
        with pytest.raises(SnakkaSparkOptionError) as e:
            parse_write_options({**BS, **opts})
        assert msg in str(e.value), (opts, str(e.value))


def test_rate_limit_is_proportional():
    start = {("t", 0): 0, ("t", 1): 0, ("t", 2): 0}
    latest = {("t", 0): 1000, ("t", 1): 500, ("t", 2): 1500}
    assert rate_limit(start, latest, 600) == {("t", 0): 200, ("t", 1): 100, ("t", 2): 300}
    assert rate_limit(start, latest, 10_000) == latest
    # A tiny backlog still gets at least one record; nobody passes its latest offset.
    end = rate_limit({("a", 0): 0, ("a", 1): 0}, {("a", 0): 1, ("a", 1): 100_000}, 10)
    assert end == {("a", 0): 1, ("a", 1): 9}


def test_plan_ranges_splits_big_ranges():
    r = [OffsetRange("t", 0, 0, 900), OffsetRange("t", 1, 0, 100), OffsetRange("t", 2, 5, 5)]
    assert plan_ranges(r, None, None) == [[r[0]], [r[1]]]  # empty ranges are dropped
    parts = plan_ranges(r, 10, None)
    assert len(parts) == 10
    assert sum(x.size for [x] in parts) == 1000
    assert [x for [x] in parts if x.partition == 0][0] == OffsetRange("t", 0, 0, 100)
    parts = plan_ranges(r, None, 250)
    assert [(x.partition, x.start, x.end) for [x] in parts] == [
        (0, 0, 225), (0, 225, 450), (0, 450, 675), (0, 675, 900), (1, 0, 100)]


def test_readers_and_partitions_pickle_without_connections(spark_broker):
    import pickle

    from snakka.spark.reader import (
        KafkaInputPartition,
        SnakkaBatchReader,
        SnakkaStreamReader,
    )

    s = parse_read_options({"kafka.bootstrap.servers": spark_broker.bootstrap_servers,
                            "subscribe": "x", "startingOffsets": "earliest"}, streaming=True)
    stream = SnakkaStreamReader(s)
    stream._c().metadata(None)  # an open driver-side connection must not travel along
    try:
        copy = pickle.loads(pickle.dumps(stream))
        assert copy._client is None and copy.settings == s
    finally:
        stream.stop()
    assert pickle.loads(pickle.dumps(SnakkaBatchReader(s))).settings == s
    part = KafkaInputPartition(3, [OffsetRange("x", 0, 5, 9)], s.client, True, False, 1000)
    back = pickle.loads(pickle.dumps(part))
    assert (back.value, back.ranges, back.client) == (3, part.ranges, s.client)
