"""Client metrics and observability (KIP-714): sans-I/O cores.

- ``subscriptions``: the CLIENT_METRICS config resource (validation, parsing, matching);
- ``manager``: Kafka's ClientMetricsManager (client instances, GetTelemetrySubscriptions and
  PushTelemetry decisions and error codes);
- ``otlp``: decoding a pushed OpenTelemetry MetricsData payload (opentelemetry-proto);
- ``store``: the received client metrics the Prometheus endpoint shows (bounded).

The handlers (handlers/get_telemetry_subscriptions.py, push_telemetry.py) drive them; the
broker builds one manager and one store and hands them to the handlers through Services.
"""
