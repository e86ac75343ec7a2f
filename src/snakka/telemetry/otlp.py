"""Decoding a PushTelemetry payload: the compressed OpenTelemetry ``MetricsData`` (KIP-714).

What it owns: :func:`decode_payload` turns the request's ``metrics`` bytes (compressed with the
request's ``compression_type``, the codecs of record batches: records/compression.py) into
flat :class:`Point` values, using the OpenTelemetry project's own protobuf classes
(``opentelemetry-proto``), so every shape a client may send is parsed as OTLP defines it.

Flattening, per OTLP metric type:

- Gauge: one GAUGE point per data point (its last value is what counts);
- Sum: monotonic sums are COUNTER points, DELTA or CUMULATIVE as the client aggregated them
  (GetTelemetrySubscriptions asks for deltas, as Kafka does); non-monotonic sums are GAUGE
  points when cumulative, and DELTA gauges when delta;
- Histogram, ExponentialHistogram, Summary: their ``count`` and ``sum`` as two COUNTER points
  (``<name>_count``, ``<name>_sum``), delta or cumulative as sent (Summary is always
  cumulative); buckets and quantiles are not kept.

Labels come from each data point's attributes (string forms of their values, at most
``CLIENT_METRICS_MAX_ATTRIBUTES``, each cut to ``CLIENT_METRICS_MAX_LABEL_VALUE_CHARS``);
names are made Prometheus-safe here (``org.apache.kafka.producer.record.send.rate`` ->
``org_apache_kafka_producer_record_send_rate``). A payload that does not decompress (or would
decompress beyond ``CLIENT_METRICS_MAX_DECOMPRESSED_BYTES``) or does not parse raises
:class:`PayloadError` (the handler answers INVALID_RECORD).
"""

from __future__ import annotations

import enum
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING

from snakka.limits import (
    CLIENT_METRICS_MAX_ATTRIBUTES,
    CLIENT_METRICS_MAX_DECOMPRESSED_BYTES,
    CLIENT_METRICS_MAX_LABEL_VALUE_CHARS,
)
from snakka.records.compression import COMPRESSION_NONE, CompressionError, decompress_bounded

if TYPE_CHECKING:  # the protobuf modules load at the first push (decode_payload): not at start-up
    from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
    from opentelemetry.proto.metrics.v1 import metrics_pb2

__all__ = ["Kind", "PayloadError", "Point", "decode_payload", "prometheus_name"]

_DELTA = 1  # metrics_pb2.AGGREGATION_TEMPORALITY_DELTA (OTLP's enum value, fixed by the spec)
_UNSAFE = re.compile(r"[^a-zA-Z0-9_]")


class PayloadError(ValueError):
    """The pushed metrics cannot be decoded."""


class Kind(enum.Enum):
    GAUGE = "gauge"
    COUNTER = "counter"


@dataclass(frozen=True, slots=True)
class Point:
    name: str  # Prometheus-safe
    kind: Kind
    delta: bool  # the value is an increment (else the current value)
    labels: tuple[tuple[str, str], ...]
    value: float


def prometheus_name(name: str) -> str:
    """A Prometheus-safe metric or label name (other characters become '_'; a leading digit
    gets a '_' in front)."""
    safe = _UNSAFE.sub("_", name)
    return "_" + safe if not safe or safe[0].isdigit() else safe


def _value_text(v: AnyValue) -> str:
    which = v.WhichOneof("value")
    if which == "string_value":
        text = v.string_value
    elif which == "bool_value":
        text = "true" if v.bool_value else "false"
    elif which == "int_value":
        text = str(v.int_value)
    elif which == "double_value":
        text = repr(v.double_value)
    elif which == "bytes_value":
        text = v.bytes_value.hex()
    else:  # arrays and maps: not label material
        text = ""
    return text[:CLIENT_METRICS_MAX_LABEL_VALUE_CHARS]


def _labels(attributes: list[KeyValue]) -> tuple[tuple[str, str], ...]:
    out: dict[str, str] = {}
    for kv in attributes:
        if len(out) >= CLIENT_METRICS_MAX_ATTRIBUTES:
            break
        out.setdefault(prometheus_name(kv.key), _value_text(kv.value))
    return tuple(sorted(out.items()))


def _number(dp: metrics_pb2.NumberDataPoint) -> float:
    return float(dp.as_int) if dp.WhichOneof("value") == "as_int" else dp.as_double


def _flatten(m: metrics_pb2.Metric, out: list[Point]) -> None:
    name = prometheus_name(m.name)
    which = m.WhichOneof("data")
    if which == "gauge":
        for dp in m.gauge.data_points:
            out.append(Point(name, Kind.GAUGE, False, _labels(list(dp.attributes)), _number(dp)))
    elif which == "sum":
        delta = m.sum.aggregation_temporality == _DELTA
        kind = Kind.COUNTER if m.sum.is_monotonic else Kind.GAUGE
        for dp in m.sum.data_points:
            out.append(Point(name, kind, delta, _labels(list(dp.attributes)), _number(dp)))
    elif which in ("histogram", "exponential_histogram"):
        data = m.histogram if which == "histogram" else m.exponential_histogram
        delta = data.aggregation_temporality == _DELTA
        for hp in data.data_points:
            labels = _labels(list(hp.attributes))
            out.append(Point(name + "_count", Kind.COUNTER, delta, labels, float(hp.count)))
            out.append(Point(name + "_sum", Kind.COUNTER, delta, labels, hp.sum))
    elif which == "summary":
        for sp in m.summary.data_points:
            labels = _labels(list(sp.attributes))
            out.append(Point(name + "_count", Kind.COUNTER, False, labels, float(sp.count)))
            out.append(Point(name + "_sum", Kind.COUNTER, False, labels, sp.sum))


def decode_payload(compression_type: int, payload: bytes) -> list[Point]:
    """The points of one pushed payload (see the module docstring); PayloadError if it does
    not decode."""
    if compression_type == COMPRESSION_NONE:
        raw = payload
    else:
        try:
            raw = bytes(decompress_bounded(compression_type, payload,
                                           CLIENT_METRICS_MAX_DECOMPRESSED_BYTES))
        except (CompressionError, ValueError) as e:
            raise PayloadError(f"metrics do not decompress: {e}") from None
    from google.protobuf.message import DecodeError
    from opentelemetry.proto.metrics.v1 import metrics_pb2

    data = metrics_pb2.MetricsData()
    try:
        data.ParseFromString(raw)
    except DecodeError as e:
        raise PayloadError(f"metrics are not an OTLP MetricsData: {e}") from None
    out: list[Point] = []
    for rm in data.resource_metrics:
        for sm in rm.scope_metrics:
            for m in sm.metrics:
                _flatten(m, out)
    return out
