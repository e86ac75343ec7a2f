"""bench/compare_kafka.py's pure parts: parsing the Java perf tools' output, the goals' verdicts,
medians and ranges, and the markdown table (the runs themselves are exercised by running the
script; docs/benchmarks.md "Against Apache Kafka 4.0, same run"); and bench/raw_fetch.py's
(the raw-large workload's client): its Fetch request read back by snakka's own decoder, its
response parsing of a response snakka's encoder made (the runs: docs/benchmarks.md "Large
consume"); and the small-record "who limits" workloads (small-procs, raw-small, ptool-procs),
run at their --quick size against a snakka broker process (the benchmark's own SnakkaBroker),
checking that what they count is what the broker stored."""

from __future__ import annotations

import importlib.util
import struct
import sys
from pathlib import Path

import pytest

_BENCH = Path(__file__).resolve().parents[1] / "bench"
sys.path.insert(0, str(_BENCH))  # compare_kafka imports its siblings (common, compare)
_spec = importlib.util.spec_from_file_location("snakka_bench_compare_kafka",
                                               _BENCH / "compare_kafka.py")
assert _spec and _spec.loader
ck = importlib.util.module_from_spec(_spec)
sys.modules[_spec.name] = ck
_spec.loader.exec_module(ck)
import raw_fetch  # noqa: E402  (bench/, on the path above)
import raw_produce  # noqa: E402

# Output of the Kafka 4.0 tools, as printed by kafka_2.13-4.0.0/bin/*.sh.
PRODUCER_OUT = """\
1498312 records sent, 299602.4 records/sec (28.57 MB/sec), 95.3 ms avg latency, 412.0 ms max latency.
1000000 records sent, 96015.4 records/sec (9.16 MB/sec), 505.62 ms avg latency, 671.00 ms max \
latency, 566 ms 50th, 655 ms 95th, 664 ms 99th, 671 ms 99.9th.
"""
CONSUMER_OUT = """\
start.time, end.time, data.consumed.in.MB, MB.sec, data.consumed.in.nMsg, nMsg.sec, \
rebalance.time.ms, fetch.time.ms, fetch.MB.sec, fetch.nMsg.sec
2026-11-29 08:08:39:988, 2026-11-29 08:08:41:565, 19.0735, 12.0948, 200000, 126823.0818, 1019, \
558, 34.1819, 358422.9391
"""
E2E_OUT = """\
Topic "e2e" does not exist. Will create topic with 1 partition(s) and replication factor = 1
0\t55.895778
1000\t0.873904
Avg latency: 1.4249 ms
Percentiles: 50th = 0, 99th = 8, 99.9th = 34
"""


def test_producer_perf_takes_the_final_line_with_percentiles():
    r = ck.parse_producer_perf(PRODUCER_OUT)
    assert r == {"records": 1000000, "rec_s": 96015.4, "mb_s": 9.16, "avg_ms": 505.62,
                 "max_ms": 671.0, "p50_ms": 566.0, "p95_ms": 655.0, "p99_ms": 664.0,
                 "p999_ms": 671.0}


def test_producer_perf_without_a_final_line_is_an_error():
    with pytest.raises(ValueError):
        ck.parse_producer_perf(PRODUCER_OUT.splitlines()[0])


def test_consumer_perf_maps_header_to_values():
    r = ck.parse_consumer_perf(CONSUMER_OUT)
    assert r["data.consumed.in.nMsg"] == 200000
    assert r["fetch.nMsg.sec"] == pytest.approx(358422.9391)
    assert r["nMsg.sec"] == pytest.approx(126823.0818)
    assert r["rebalance.time.ms"] == 1019
    assert "start.time" not in r
    with pytest.raises(ValueError):
        ck.parse_consumer_perf(CONSUMER_OUT.splitlines()[0])


def test_e2e_latency_summary():
    assert ck.parse_e2e_latency(E2E_OUT) == {"avg_ms": 1.4249, "p50_ms": 0.0, "p99_ms": 8.0,
                                             "p999_ms": 34.0}
    with pytest.raises(ValueError):
        ck.parse_e2e_latency("Avg latency: 1.0 ms\n")


def _runs(workload: str, metric: str, snakka: list[float], kafka: list[float]) -> list[dict]:
    return ([{"workload": workload, "broker": "snakka", metric: v} for v in snakka]
            + [{"workload": workload, "broker": "kafka", metric: v} for v in kafka])


def _row(runs: list[dict], goal) -> dict:
    (row,) = ck.summarize(runs, [goal])
    return row


def test_ratio_of_medians_and_ranges():
    g = ck.Goal("w", "rec_s", "x", "ratio_min", 1.2)
    row = _row(_runs("w", "rec_s", [100, 300, 120], [100, 90, 1000]), g)
    assert row["snakka_median"] == 120 and row["kafka_median"] == 100
    assert row["snakka_range"] == [100, 300] and row["kafka_range"] == [90, 1000]
    assert row["ratio"] == 1.2 and row["verdict"] == "pass"
    assert row["p"] >= 0.5  # overlapping runs: no separation
    assert _row(_runs("w", "rec_s", [119], [100]), g)["verdict"] == "miss"


def test_latency_goals_want_a_lower_ratio():
    g = ck.Goal("w", "p99_ms", "x", "ratio_max", 1.0)
    assert _row(_runs("w", "p99_ms", [5, 6, 7], [8, 9, 10]), g)["verdict"] == "pass"
    assert _row(_runs("w", "p99_ms", [9, 10, 11], [8, 9, 10]), g)["verdict"] == "miss"


def test_absolute_and_baseline_goals():
    rss = ck.Goal("w", "rss", "x", "abs_max", 60, "MB")
    row = _row(_runs("w", "rss", [59.9], [500]), rss)
    assert row["verdict"] == "pass" and row["goal"] == "< 60 MB"
    assert _row(_runs("w", "rss", [60.0], [500]), rss)["verdict"] == "miss"
    share = ck.Goal("s", "rec_s", "x", "baseline_min", 2.0, baseline=100.0)
    row = _row(_runs("s", "rec_s", [150, 250, 210], []), share)
    assert row["ratio"] == 2.1 and row["verdict"] == "pass" and row["kafka_median"] is None


def test_missing_kafka_runs_give_no_ratio_and_no_verdict():
    g = ck.Goal("w", "rec_s", "x", "ratio_min", 1.0)
    row = _row(_runs("w", "rec_s", [1, 2], []), g)
    assert row["ratio"] is None and row["verdict"] == "n/a" and row["p"] is None
    assert ck.summarize(_runs("other", "rec_s", [1], [1]), [g]) == []


def test_markdown_table_has_a_row_per_goal():
    rows = ck.summarize(_runs("w", "rec_s", [1500, 2500, 2000], [1000, 1000, 1000]),
                        [ck.Goal("w", "rec_s", "produce rec/s", "ratio_min", 1.5)])
    lines = ck.markdown_table(rows).splitlines()
    assert len(lines) == 3
    assert lines[2] == ("| produce rec/s | 2,000 (1,500–2,500) | 1,000 (1,000–1,000) | 2.00x "
                        "| 0.10 | >= 1.5x | pass |")


def test_every_goal_names_a_workload_and_rounds_alternate():
    assert {g.workload for g in ck.GOALS} <= set(ck.WORKLOADS)
    assert [ck.round_order(["s", "k"], r) for r in (1, 2, 3)] == [["s", "k"], ["k", "s"],
                                                                   ["s", "k"]]


def test_quick_divides_record_counts():
    assert ck.Settings(quick=True).n(1_000_000) == 100_000
    assert ck.Settings().n(1_000_000) == 1_000_000


# -- raw-large: bench/raw_fetch.py -------------------------------------------------------------
def test_raw_fetch_request_is_a_fetch_v11_snakka_decodes():
    from snakka.protocol import decode_request

    frame = raw_fetch.encode_fetch(7, "raw", "big", 3, 12345, 50 * 1024 * 1024, 100, 1)
    assert struct.unpack_from(">i", frame)[0] == len(frame) - 4
    header, req, _ = decode_request(frame[4:])
    assert (header.request_api_key, header.request_api_version) == (1, 11)
    assert header.correlation_id == 7 and header.client_id == "raw"
    assert (req.replica_id, req.max_wait_ms, req.min_bytes, req.max_bytes) == (-1, 100, 1,
                                                                               50 * 1024 * 1024)
    assert (req.isolation_level, req.session_id, req.session_epoch) == (0, 0, -1)
    (t,) = req.topics
    (p,) = t.partitions
    assert t.topic == "big" and p.partition == 3 and p.fetch_offset == 12345
    assert p.partition_max_bytes == 50 * 1024 * 1024 and p.current_leader_epoch == -1
    assert req.forgotten_topics_data == [] and req.rack_id == ""


def _batches(*sizes_counts: tuple[int, int], base: int = 100) -> bytes:
    from snakka.records.record import Record, build_batch

    out, offset = b"", base
    for size, count in sizes_counts:
        out += build_batch([Record(value=bytes(size))] * count, base_offset=offset)
        offset += count
    return out


def _response(records: bytes | None, aborted: list | None = None, hw: int = 500,
              error: int = 0) -> bytes:
    from snakka.protocol import encode_response
    from snakka.protocol.messages.fetch_response import (
        AbortedTransaction,
        FetchableTopicResponse,
        FetchResponse,
        PartitionData,
    )

    resp = FetchResponse(responses=[FetchableTopicResponse(topic="big", partitions=[
        PartitionData(partition_index=0, error_code=error, high_watermark=hw,
                      last_stable_offset=hw, log_start_offset=0,
                      aborted_transactions=None if aborted is None else
                      [AbortedTransaction(producer_id=p, first_offset=o) for p, o in aborted],
                      preferred_read_replica=-1, records=records)])])
    return encode_response(42, 1, 11, resp)[4:]   # the size prefix is read apart


def test_raw_fetch_parses_the_head_and_walks_whole_batches():
    records = _batches((1000, 2), (50, 3))
    body = _response(records, aborted=[(9, 1), (10, 2)])
    head = raw_fetch.parse_fetch_head(body, len(body))
    assert (head.correlation_id, head.error_code, head.partition_error) == (42, 0, 0)
    assert head.high_watermark == 500 and head.records_length == len(records)
    assert body[head.records_start:head.records_start + head.records_length] == records
    assert raw_fetch.walk_batches(body, head.records_start, head.records_length) == (
        105, 5, len(records))


def test_raw_fetch_drops_a_truncated_last_batch_and_reads_null_records():
    whole = _batches((1000, 2))
    records = whole + _batches((5000, 1), base=102)[:-10]   # as Kafka cuts at its limit
    body = _response(records)
    head = raw_fetch.parse_fetch_head(body, len(body))
    assert raw_fetch.walk_batches(body, head.records_start, head.records_length) == (
        102, 2, len(whole))
    empty = _response(None, error=1)
    head = raw_fetch.parse_fetch_head(empty, len(empty))
    assert head.records_length == -1 and head.partition_error == 1
    assert raw_fetch.walk_batches(empty, head.records_start, 0) == (-1, 0, 0)


def test_raw_fetch_refuses_a_record_set_overrunning_the_response():
    body = _response(_batches((1000, 1)))
    with pytest.raises(ValueError):
        raw_fetch.parse_fetch_head(body, len(body) - 1)


# -- small records: raw-small's bench/raw_produce.py, small-procs, ptool-procs -------------------
def test_raw_produce_batches_are_librdkafka_sized_and_valid_produce_v7():
    from snakka.protocol import decode_request
    from snakka.records.batch import validate_batches
    from snakka.records.record import iter_records

    per = raw_produce.records_per_batch(100)
    plan = raw_produce.plan_partition("small", 2, 2 * per + 7, 100)
    assert (plan.per_batch, plan.sends, plan.last_records, plan.records) == (per, 2, 7,
                                                                             2 * per + 7)
    assert plan.last is not None
    batches = []
    for frame in [*plan.frames, plan.last]:
        header, req, _ = decode_request(frame[4:])
        assert (header.request_api_key, header.request_api_version) == (0, 7)
        assert req.acks == 1 and req.transactional_id is None
        ((t,),) = [req.topic_data]
        (p,) = t.partition_data
        assert t.name == "small" and p.index == 2
        (info,) = validate_batches(p.records, max_message_bytes=1_048_588)
        batches.append(bytes(p.records))
    full, tail = batches[:-1], batches[-1]
    # librdkafka's batch.size: the largest batch that fits 1,000,000 bytes
    assert all(len(b) <= raw_produce.BATCH_BYTES for b in full)
    assert len(full[0]) + 108 > raw_produce.BATCH_BYTES
    assert len(set(full)) == len(full) == 2   # distinct batches, not one copied
    recs = list(iter_records(full[0]))
    assert len(recs) == per and all(r.key is None and len(r.value) == 100 for r in recs)
    assert len(list(iter_records(tail))) == 7


def test_raw_produce_response_parsing_reads_partition_errors():
    from snakka.protocol import encode_response
    from snakka.protocol.messages.produce_response import (
        PartitionProduceResponse,
        ProduceResponse,
        TopicProduceResponse,
    )

    resp = ProduceResponse(responses=[TopicProduceResponse(name="small", partition_responses=[
        PartitionProduceResponse(index=3, error_code=10, base_offset=-1)])])
    frame = encode_response(5, 0, 7, resp)
    assert raw_produce.parse_produce_response(frame[4:]) == [(3, 10, -1)]


def test_parallel_window_counts_from_the_first_start_to_the_last_end():
    # tool A: 100 records at 100/s, ends at 10 -> started at 9; tool B: 50 at 25/s, ends at 12
    window, spread = ck.parallel_window([(10.0, 100, 100.0), (12.0, 50, 25.0)])
    assert window == pytest.approx(12.0 - 9.0) and spread == pytest.approx(1.0)


@pytest.fixture
def snakka_broker():
    b = ck.SnakkaBroker()
    try:
        yield b
    finally:
        b.close()


def test_small_procs_counts_what_the_broker_stored(tmp_path):
    # The script itself (its client processes are spawned, and import it by its own name): a
    # broker process, --client-procs producer processes then consumer processes.
    import json
    import subprocess

    out = tmp_path / "runs.jsonl"
    proc = subprocess.run([sys.executable, str(_BENCH / "compare_kafka.py"), "--workloads",
                           "small-procs", "--quick", "--no-kafka", "--client-procs", "2",
                           "--json-out", str(out)], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    lines = [json.loads(x) for x in out.read_text().splitlines()]
    assert not [x for x in lines if x["type"] == "kafka-compare-error"]
    (res,) = [x for x in lines if x["type"] == "kafka-compare-run"]
    # the workload refuses a count or log end offsets (4 x 25,000) that do not match
    assert res["records"] == 100_000 and res["client_procs"] == 2
    for phase in ("procs_produce", "procs_consume"):
        assert res[f"{phase}_rec_s"] == pytest.approx(100_000 / res[f"{phase}_s"], rel=0.01)
        assert res[f"{phase}_client_cpu_s"] > 0   # the client processes' own CPU, reported


def test_raw_small_acks_and_fetches_every_record(snakka_broker):
    res = ck.wl_raw_small(snakka_broker, ck.Settings(quick=True))
    assert res["raw_produce_records"] == res["raw_produce_leo_total"] == 100_000
    assert res["raw_fetch_records"] == 100_000
    assert res["raw_requests"] == 4 * -(-25_000 // res["raw_batch_records"])
    leo = ck._log_end_offsets(snakka_broker.bootstrap, ck.RAW_SMALL_TOPIC, ck.SMALL_PARTITIONS)
    assert leo == [25_000] * ck.SMALL_PARTITIONS
    # the records the broker stored are the encoded ones, whole and in order
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": snakka_broker.bootstrap, "group.id": "bench-check"})
    try:
        c.assign([TopicPartition(ck.RAW_SMALL_TOPIC, 1, 0)])
        msgs = c.consume(10, timeout=30)
        plan = raw_produce.plan_partition(ck.RAW_SMALL_TOPIC, 1, 25_000, 100)
        from snakka.protocol import decode_request
        from snakka.records.record import iter_records

        first = decode_request(plan.frames[0][4:])[1].topic_data[0].partition_data[0].records
        want = [r.value for r in iter_records(bytes(first))][:10]
        assert [m.value() for m in msgs] == want
    finally:
        c.close()


@pytest.mark.skipif(ck.kafka_skip_reason() is not None,
                    reason=f"Kafka's perf tools: {ck.kafka_skip_reason()}")
def test_ptool_procs_runs_the_tools_side_by_side(snakka_broker):
    res = ck.wl_ptool_procs(snakka_broker, ck.Settings(quick=True, client_procs=2))
    assert res["records"] == 100_000 and res["client_procs"] == 2
    for acks in ("1", "all"):
        tag = f"ptool_procs_acks{acks}"
        leo = [ck._log_end_offsets(snakka_broker.bootstrap, f"ptp-acks{acks}-{i}", 1)[0]
               for i in range(2)]
        assert leo == [50_000, 50_000]
        # the aggregate is over the whole window: never above the tools' summed own rates
        assert 0 < res[f"{tag}_rec_s"] <= res[f"{tag}_sum_rec_s"] * 1.01
        assert res[f"{tag}_window_s"] >= res[f"{tag}_start_spread_s"]
