"""Prometheus metrics (issue 16): what is counted on the request path, what is read from the
broker's state at scrape time, and the HTTP endpoint that serves them (docs/metrics.md).

Naming scheme: a metric Kafka has (a JMX MBean) keeps its JMX name the way the Prometheus JMX
exporter's Kafka rules spell it, ``kafka_<domain>_<type>_<name>`` lower-cased
(``kafka.server:type=BrokerTopicMetrics,name=BytesInPerSec,topic=t`` ->
``kafka_server_brokertopicmetrics_bytesin_total{topic="t"}``); consumer lag takes the
kafka-exporter's ``kafka_consumergroup_lag``; what only snakka has starts with ``snakka_``.
Times are in seconds (Prometheus' convention), not Kafka's milliseconds.

Cost discipline (the hot path is Produce/Fetch): nothing here calls prometheus-client per
request. :meth:`BrokerMetrics.request_done` (called by the connection once per answered request)
updates plain ints and lists in dicts: one latency histogram per (API, version), error counts,
and per-topic bytes/messages in and bytes out read from the request and response objects that
exist anyway. Everything else (connections, log sizes, group lag, share-partition states,
coordinator load times) is read from the broker's state when Prometheus scrapes: a custom
``Collector`` (:class:`BrokerCollector`) turns it all into metric families then.

Threads: request counting and collection run on the broker's event loop; only the flush-time
histogram is written by the flush thread (one writer: single increments under the GIL). A
scrape collects on the loop (the state is read consistently, no locks) and formats the text in
a worker thread, so a large page does not stall request handling; at most
``METRICS_MAX_CONCURRENT_SCRAPES`` scrapes run at once.

Client metrics (KIP-714): what clients push with PushTelemetry is kept by
telemetry/store.py and shown here at scrape time, one family per metric name
(``snakka_client_<OTLP name, '.' as '_'>``), every series labelled with the pushing client's
``client_instance_id`` and ``client_id`` plus its data point attributes; the manager's counts
(Kafka's ``client-metrics`` group: instance count, throttled and unknown-subscription requests,
exports and export errors) and the store's bounds (series kept, series dropped) beside them.

Out of scope: JMX, quotas' throttle metrics (server/quotas).
"""

from __future__ import annotations

import asyncio
import logging
import struct
import time
from bisect import bisect_left
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import TYPE_CHECKING, Any, Protocol

from snakka.limits import (
    EVENT_LOOP_LAG_PROBE_INTERVAL_S,
    METRICS_HTTP_MAX_HEADER_BYTES,
    METRICS_HTTP_REQUEST_TIMEOUT_S,
    METRICS_MAX_CONCURRENT_SCRAPES,
)
from snakka.protocol.errors import ErrorCode
from snakka.share.types import RecordState

if TYPE_CHECKING:
    from prometheus_client.metrics_core import HistogramMetricFamily, Metric

log = logging.getLogger("snakka.metrics")

__all__ = ["BrokerCollector", "BrokerMetrics", "Histogram", "MetricsServer", "MetricsSource"]

# Request latency buckets, seconds (sub-millisecond to a long-poll's 10 s+).
LATENCY_BUCKETS = (0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25,
                   0.5, 1.0, 2.5, 5.0, 10.0, 30.0)
# fsync of one log, seconds.
FLUSH_BUCKETS = (0.0001, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0,
                 2.5, 5.0)
# Event-loop scheduling delay, seconds.
LOOP_LAG_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5)

_PRODUCE, _FETCH, _SASL_AUTHENTICATE = 0, 1, 36
_NONE = 0
# The v2 record batch header: magic at byte 16, the records count at bytes 57-60.
_MAGIC_AT, _RECORDS_COUNT = 16, struct.Struct(">i")
_BATCH_HEADER_BYTES = 61


class Histogram:
    """A cumulative-at-scrape histogram of plain ints: ``observe`` is a bisect and two adds."""

    __slots__ = ("bounds", "counts", "sum")

    def __init__(self, bounds: tuple[float, ...]) -> None:
        self.bounds = bounds
        self.counts = [0] * (len(bounds) + 1)  # the last one is +Inf
        self.sum = 0.0

    def observe(self, value: float) -> None:
        self.counts[bisect_left(self.bounds, value)] += 1
        self.sum += value

    def buckets(self) -> list[tuple[str, float]]:
        out: list[tuple[str, float]] = []
        total = 0
        for bound, n in zip((*map(repr, self.bounds), "+Inf"), self.counts, strict=True):
            total += n
            out.append((bound, total))
        return out


class BrokerMetrics:
    """The counters the request path updates (plain ints), plus a few the broker's parts
    update (flush times, loop lag, authentications). One per broker."""

    def __init__(self, topic_name_by_id: Callable[[Any], str | None] | None = None) -> None:
        # (api key, version) -> latency histogram (its count is the request count)
        self.requests: dict[tuple[int, int], Histogram] = {}
        self.errors: Counter[tuple[int, int]] = Counter()  # (api key, error code) -> count
        self.bytes_in: Counter[str] = Counter()  # topic -> record bytes appended
        self.messages_in: Counter[str] = Counter()  # topic -> records appended
        self.bytes_out: Counter[str] = Counter()  # topic -> record bytes fetched
        self.failed_produce: Counter[str] = Counter()  # topic -> partitions refused
        self.authentications: Counter[tuple[str, bool]] = Counter()  # (listener, ok)
        self.flush_time = Histogram(FLUSH_BUCKETS)
        self.loop_lag = Histogram(LOOP_LAG_BUCKETS)
        self.loop_lag_last = 0.0
        self._topic_name_by_id = topic_name_by_id

    # -- the request path ----------------------------------------------------------------
    def request_done(self, api_key: int, api_version: int, request: Any, result: Any,
                     seconds: float) -> None:
        """One answered request (``result`` its response object, or a no-response marker)."""
        key = (api_key, api_version)
        h = self.requests.get(key)
        if h is None:
            h = self.requests[key] = Histogram(LATENCY_BUCKETS)
        h.counts[bisect_left(LATENCY_BUCKETS, seconds)] += 1
        h.sum += seconds
        if api_key == _PRODUCE:
            if request is not None:
                self._produced(request, result)
        elif api_key == _FETCH:
            self._fetched(result)
        else:
            code = getattr(result, "error_code", _NONE)
            if code:
                self.errors[(api_key, code)] += 1

    def _topic(self, name: str, topic_id: Any) -> str | None:
        if name:
            return name
        resolve = self._topic_name_by_id
        return resolve(topic_id) if resolve is not None else None

    def _produced(self, request: Any, response: Any) -> None:
        failed: set[tuple[str, int]] | None = None
        responses = getattr(response, "responses", None)  # None: acks=0 or an error answer
        if responses is not None:
            for tr in responses:
                for pr in tr.partition_responses:
                    code = pr.error_code
                    if code:
                        self.errors[(_PRODUCE, code)] += 1
                        if failed is None:
                            failed = set()
                        failed.add((tr.name or str(tr.topic_id), pr.index))
        bytes_in, messages_in = self.bytes_in, self.messages_in
        for td in request.topic_data:
            name = self._topic(td.name, td.topic_id)
            if name is None:
                continue
            for pd in td.partition_data:
                if failed is not None and (td.name or str(td.topic_id), pd.index) in failed:
                    self.failed_produce[name] += 1
                    continue
                records = pd.records
                if records is None or len(records) < _BATCH_HEADER_BYTES:
                    continue
                bytes_in[name] += len(records)
                if records[_MAGIC_AT] == 2:
                    messages_in[name] += _RECORDS_COUNT.unpack_from(records, 57)[0]

    def _fetched(self, response: Any) -> None:
        code = getattr(response, "error_code", _NONE)
        if code:
            self.errors[(_FETCH, code)] += 1
        responses = getattr(response, "responses", None)
        if not responses:
            return
        bytes_out = self.bytes_out
        for tr in responses:
            name = None
            for pr in tr.partitions:
                code = pr.error_code
                if code:
                    self.errors[(_FETCH, code)] += 1
                    continue
                records = pr.records
                if records:
                    if name is None:
                        name = self._topic(tr.topic, tr.topic_id)
                        if name is None:
                            break
                    bytes_out[name] += len(records)

    def authenticated(self, listener: str, ok: bool) -> None:
        self.authentications[(listener, ok)] += 1

    # -- background probes ---------------------------------------------------------------
    async def probe_event_loop_lag(self) -> None:
        """Forever: sleep a fixed interval and record how late the loop woke us up."""
        interval = EVENT_LOOP_LAG_PROBE_INTERVAL_S
        while True:
            t0 = time.monotonic()
            await asyncio.sleep(interval)
            lag = max(0.0, time.monotonic() - t0 - interval)
            self.loop_lag_last = lag
            self.loop_lag.observe(lag)


def _histogram(name: str, doc: str, labels: list[str],
               series: Iterable[tuple[list[str], Histogram]]) -> HistogramMetricFamily:
    from prometheus_client.metrics_core import HistogramMetricFamily

    fam = HistogramMetricFamily(name, doc, labels=labels)
    for values, h in series:
        fam.add_metric(values, h.buckets(), h.sum)
    return fam


class MetricsSource(Protocol):
    """What the endpoint serves: prometheus-client's collector interface (duck-typed, so that
    defining one imports nothing)."""

    def collect(self) -> Iterable[Metric]: ...


class BrokerCollector:
    """Turns :class:`BrokerMetrics` and the broker's state into metric families (scrape time,
    on the event loop). A prometheus-client ``Collector`` by its ``collect`` method; it does not
    subclass it, and prometheus-client is imported at the first scrape, not at start-up
    (importing it costs ~60 ms of CPU, a quarter of the broker's imports: its package
    ``__init__`` loads the exposition module with http.server, and the process/platform/gc
    collectors of its default registry)."""

    def __init__(self, metrics: BrokerMetrics, state: Callable[[], Mapping[str, Any]],
                 api_names: Mapping[int, str]) -> None:
        self.metrics = metrics
        self.state = state
        self.api_names = api_names

    def _api(self, key: int) -> str:
        return self.api_names.get(key, str(key))

    def collect(self) -> Iterator[Metric]:
        yield from self._request_metrics()
        yield from self._topic_metrics()
        st = self.state()
        yield from self._socket_metrics(st)
        yield from self._log_metrics(st)
        yield from self._group_metrics(st)
        yield from self._share_metrics(st)
        yield from self._misc_metrics(st)
        yield from self._client_metrics(st)

    def _request_metrics(self) -> Iterator[Metric]:
        from prometheus_client.metrics_core import CounterMetricFamily

        m = self.metrics
        reqs = sorted(m.requests.items())
        total = CounterMetricFamily(
            "kafka_network_requestmetrics_requests",
            "Requests answered, per API and version (Kafka RequestMetrics RequestsPerSec).",
            labels=["request", "version"])
        for (k, v), h in reqs:
            total.add_metric([self._api(k), str(v)], sum(h.counts))
        yield total
        yield _histogram(
            "kafka_network_requestmetrics_totaltime_seconds",
            "Time from a request's processing start to its response being queued for the "
            "socket, per API and version (Kafka RequestMetrics TotalTimeMs).",
            ["request", "version"], (([self._api(k), str(v)], h) for (k, v), h in reqs))
        errors = CounterMetricFamily(
            "kafka_network_requestmetrics_errors",
            "Error codes answered, per API (top-level codes; per partition for Produce and "
            "Fetch) (Kafka RequestMetrics ErrorsPerSec).", labels=["request", "error"])
        for (k, code), n in sorted(m.errors.items()):
            try:
                err = ErrorCode(code).name
            except ValueError:
                err = str(code)
            errors.add_metric([self._api(k), err], n)
        yield errors

    def _topic_metrics(self) -> Iterator[Metric]:
        from prometheus_client.metrics_core import CounterMetricFamily

        m = self.metrics
        for name, doc, counts in (
                ("bytesin", "Record bytes appended by producers (BytesInPerSec).", m.bytes_in),
                ("messagesin", "Records appended by producers (MessagesInPerSec).",
                 m.messages_in),
                ("bytesout", "Record bytes returned to Fetch requests (BytesOutPerSec).",
                 m.bytes_out),
                ("failedproducerequests", "Partitions of Produce requests answered with an "
                 "error (FailedProduceRequestsPerSec).", m.failed_produce)):
            fam = CounterMetricFamily(f"kafka_server_brokertopicmetrics_{name}", doc,
                                      labels=["topic"])
            for topic, n in sorted(counts.items()):
                fam.add_metric([topic], n)
            yield fam

    def _socket_metrics(self, st: Mapping[str, Any]) -> Iterator[Metric]:
        from prometheus_client.metrics_core import CounterMetricFamily, GaugeMetricFamily

        conns = GaugeMetricFamily(
            "kafka_server_socketservermetrics_connection_count",
            "Open client connections per listener (socket-server-metrics connection-count).",
            labels=["listener"])
        per_listener = Counter(c.listener.name for c in st["connections"])
        for name in st["listeners"]:
            conns.add_metric([name], per_listener.get(name, 0))
        yield conns
        auth = self.metrics.authentications
        for ok, name, doc in ((True, "successful_authentication", "Successful SASL "
                               "authentications and SSL client authentications"),
                              (False, "failed_authentication", "Failed SASL and SSL client "
                               "authentications")):
            fam = CounterMetricFamily(f"kafka_server_socketservermetrics_{name}",
                                      f"{doc}, per listener.", labels=["listener"])
            for listener in st["listeners"]:
                fam.add_metric([listener], auth.get((listener, ok), 0))
            yield fam

    def _log_metrics(self, st: Mapping[str, Any]) -> Iterator[Metric]:
        from prometheus_client.metrics_core import GaugeMetricFamily

        logs = sorted(st["logs"], key=lambda pl: (pl.topic, pl.partition))
        labels = ["topic", "partition"]
        size = GaugeMetricFamily("kafka_log_log_size",
                                 "Bytes of the partition's log on this disk (Log Size).",
                                 labels=labels)
        segs = GaugeMetricFamily("kafka_log_log_numlogsegments",
                                 "Segments of the partition's log (Log NumLogSegments).",
                                 labels=labels)
        leo = GaugeMetricFamily("kafka_log_log_logendoffset", "Log end offset (Log "
                                "LogEndOffset).", labels=labels)
        lso = GaugeMetricFamily("kafka_log_log_logstartoffset", "Log start offset (Log "
                                "LogStartOffset).", labels=labels)
        for pl in logs:
            lv = [pl.topic, str(pl.partition)]
            size.add_metric(lv, pl.size_bytes)
            segs.add_metric(lv, len(pl.segments))
            leo.add_metric(lv, pl.log_end_offset)
            lso.add_metric(lv, pl.log_start_offset)
        yield from (size, segs, leo, lso)
        n = len(logs)
        for name, doc, value in (
                ("partitioncount", "Partitions on this broker (ReplicaManager PartitionCount).",
                 n),
                ("leadercount", "Partitions this broker leads: all of them, a single broker "
                 "(ReplicaManager LeaderCount).", n),
                ("underminisrpartitioncount", "Partitions under min.insync.replicas: always 0, "
                 "a single broker (ReplicaManager UnderMinIsrPartitionCount).", 0),
                ("underreplicatedpartitions", "Under-replicated partitions: always 0, one "
                 "replica each (ReplicaManager UnderReplicatedPartitions).", 0)):
            g = GaugeMetricFamily(f"kafka_server_replicamanager_{name}", doc)
            g.add_metric([], value)
            yield g
        yield _histogram("kafka_log_logflushstats_logflush_seconds",
                         "Time of one log's fsync (LogFlushStats LogFlushRateAndTimeMs).", [],
                         [([], self.metrics.flush_time)])

    def _group_metrics(self, st: Mapping[str, Any]) -> Iterator[Metric]:
        from prometheus_client.metrics_core import GaugeMetricFamily

        labels = ["consumergroup", "topic", "partition"]
        lag = GaugeMetricFamily(
            "kafka_consumergroup_lag",
            "High watermark minus the committed offset, per group and partition "
            "(kafka-exporter's name; Kafka's consumer records-lag, seen from the broker).",
            labels=labels)
        current = GaugeMetricFamily("kafka_consumergroup_current_offset",
                                    "Committed offset, per group and partition.", labels=labels)
        get_log = st["get_log"]
        for group, topic, partition, offset in st["committed_offsets"]:
            pl = get_log(topic, partition)
            if pl is None:
                continue
            lv = [group, topic, str(partition)]
            current.add_metric(lv, offset)
            lag.add_metric(lv, max(0, pl.high_watermark - offset))
        yield lag
        yield current

    def _share_metrics(self, st: Mapping[str, Any]) -> Iterator[Metric]:
        from prometheus_client.metrics_core import GaugeMetricFamily

        labels = ["group", "topic", "partition"]
        inflight = GaugeMetricFamily(
            "kafka_server_sharepartitionmetrics_inflightmessagecount",
            "Offsets in a share-partition's in-flight window, between its start and end "
            "offsets (KIP-1103 SharePartitionMetrics InFlightMessageCount).", labels=labels)
        by_state = GaugeMetricFamily(
            "snakka_share_partition_records",
            "Offsets of a share-partition's in-flight window by delivery state (available, "
            "acquired, acknowledged, archived).", labels=[*labels, "state"])
        topic_name = st["share_topic_name"]
        for (group, topic_id, partition), sp in sorted(st["share_partitions"],
                                                       key=lambda kv: (kv[0][0], str(kv[0][1]),
                                                                       kv[0][2])):
            topic = topic_name(topic_id) or str(topic_id)
            lv = [group, topic, str(partition)]
            counts = sp.in_flight_counts()
            inflight.add_metric(lv, sum(counts.values()))
            for state in (RecordState.AVAILABLE, RecordState.ACQUIRED,
                          RecordState.ACKNOWLEDGED, RecordState.ARCHIVED):
                by_state.add_metric([*lv, state.name.lower()], counts.get(state, 0))
        yield inflight
        yield by_state

    def _misc_metrics(self, st: Mapping[str, Any]) -> Iterator[Metric]:
        from prometheus_client.metrics_core import GaugeMetricFamily

        load = GaugeMetricFamily(
            "kafka_server_coordinator_load_time_seconds",
            "Time the coordinator took to replay its internal topic at start-up "
            "(group-coordinator-metrics partition-load-time-max, summed over partitions).",
            labels=["coordinator"])
        for name, seconds in sorted(st["coordinator_load_seconds"].items()):
            load.add_metric([name], seconds)
        yield load
        m = self.metrics
        yield _histogram("snakka_event_loop_lag_seconds",
                         "How late the event loop ran a timer (scheduling delay), sampled "
                         f"every {EVENT_LOOP_LAG_PROBE_INTERVAL_S} s.", [], [([], m.loop_lag)])
        last = GaugeMetricFamily("snakka_event_loop_lag_last_seconds",
                                 "The latest event-loop lag sample.")
        last.add_metric([], m.loop_lag_last)
        yield last


    def _client_metrics(self, st: Mapping[str, Any]) -> Iterator[Metric]:
        from prometheus_client.metrics_core import CounterMetricFamily, GaugeMetricFamily, Metric

        manager, store = st.get("client_metrics"), st.get("client_metrics_store")
        if manager is None or store is None:
            return
        stats = manager.stats
        count = GaugeMetricFamily(
            "kafka_server_client_metrics_instance_count",
            "Client instances known to the client-metrics manager (KIP-714 client-metrics "
            "instance-count).")
        count.add_metric([], len(manager.instances))
        yield count
        for name, doc, value in (
                ("throttle", "GetTelemetrySubscriptions and PushTelemetry requests answered "
                 "THROTTLING_QUOTA_EXCEEDED (sent before the push interval)", stats.throttled),
                ("unknown_subscription_request", "PushTelemetry requests answered "
                 "UNKNOWN_SUBSCRIPTION_ID", stats.unknown_subscription),
                ("plugin_export", "Pushed payloads decoded and kept", stats.exported),
                ("plugin_error", "Pushed payloads that did not decode (INVALID_RECORD)",
                 stats.export_errors)):
            fam = CounterMetricFamily(f"kafka_server_client_metrics_{name}", doc + ".")
            fam.add_metric([], value)
            yield fam
        families: dict[str, Metric] = {}
        for name, kind, labels, value in store.samples():
            counter = kind.value == "counter"
            if counter and name.endswith("_total"):  # the sample gets "_total" back below
                name = name[:-6]
            fam_name = "snakka_client_" + name
            pushed = families.get(fam_name)
            if pushed is None:
                pushed = families[fam_name] = Metric(
                    fam_name, "A metric clients pushed (KIP-714 PushTelemetry).",
                    "counter" if counter else "gauge")
            pushed.add_sample(fam_name + "_total" if counter else fam_name, dict(labels), value)
        yield from families.values()
        series = GaugeMetricFamily(
            "snakka_client_metrics_series",
            "Client-metric series kept (bounded by snakka.client.metrics.max.series).")
        series.add_metric([], store.series)
        yield series
        dropped = CounterMetricFamily(
            "snakka_client_metrics_dropped_series",
            "New client-metric series dropped at snakka.client.metrics.max.series.")
        dropped.add_metric([], store.dropped_series)
        yield dropped


class _Collected:
    """Families already collected (on the loop), handed to the formatter (in a thread)."""

    def __init__(self, families: list[Metric]) -> None:
        self.families = families

    def collect(self) -> list[Metric]:
        return self.families


class MetricsServer:
    """The HTTP endpoint: ``GET /metrics`` in Prometheus' text format, on the broker's loop.

    A deliberately small HTTP/1.0-style server (one request per connection, then close): a
    scraper sends one GET; anything else is answered 404/405, an oversize or slow request
    431/408."""

    def __init__(self, source: MetricsSource, host: str, port: int) -> None:
        self.source = source
        self.host = host
        self.port = port
        self._server: asyncio.Server | None = None
        self._scrapes = 0

    async def start(self) -> None:
        self._server = await asyncio.start_server(
            self._serve, self.host or None, self.port, limit=METRICS_HTTP_MAX_HEADER_BYTES)
        self.port = self._server.sockets[0].getsockname()[1]

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
            self._server = None

    @property
    def url(self) -> str:
        host = self.host if self.host not in ("", "0.0.0.0", "::") else "localhost"
        return f"http://{host}:{self.port}/metrics"

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            status, ctype, body = await self._answer(reader)
        except Exception:  # a bug in collection: answer 500, keep serving
            log.exception("metrics scrape failed")
            status, ctype, body = "500 Internal Server Error", "text/plain", b"scrape failed\n"
        try:
            writer.write(f"HTTP/1.1 {status}\r\nContent-Type: {ctype}\r\n"
                         f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n".encode()
                         + body)
            await writer.drain()
        except (ConnectionError, OSError):
            pass
        finally:
            writer.close()

    async def _answer(self, reader: asyncio.StreamReader) -> tuple[str, str, bytes]:
        try:
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"),
                                          METRICS_HTTP_REQUEST_TIMEOUT_S)
        except (asyncio.LimitOverrunError, ValueError):
            return "431 Request Header Fields Too Large", "text/plain", b"too large\n"
        except (TimeoutError, asyncio.IncompleteReadError, ConnectionError):
            return "408 Request Timeout", "text/plain", b"timeout\n"
        parts = head.split(b"\r\n", 1)[0].split()
        if len(parts) != 3:
            return "400 Bad Request", "text/plain", b"bad request\n"
        method, target = parts[0], parts[1].split(b"?", 1)[0]
        if target not in (b"/metrics", b"/"):
            return "404 Not Found", "text/plain", b"not found; try /metrics\n"
        if method != b"GET":
            return "405 Method Not Allowed", "text/plain", b"GET only\n"
        if target == b"/":
            return "200 OK", "text/plain", b"snakka broker metrics: /metrics\n"
        if self._scrapes >= METRICS_MAX_CONCURRENT_SCRAPES:
            return "503 Service Unavailable", "text/plain", b"too many concurrent scrapes\n"
        # prometheus-client is first imported here, by the first scrape (BrokerCollector).
        from prometheus_client.exposition import CONTENT_TYPE_LATEST, generate_latest

        self._scrapes += 1
        try:
            families = list(self.source.collect())  # on the loop: a consistent read
            body = await asyncio.get_running_loop().run_in_executor(
                None, generate_latest, _Collected(families))  # type: ignore[arg-type]
        finally:
            self._scrapes -= 1
        return "200 OK", CONTENT_TYPE_LATEST, body
