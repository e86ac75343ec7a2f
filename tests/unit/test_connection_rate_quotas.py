"""Connection creation rates (KIP-612) in ConnectionQuotas' sans-I/O core, with a fake clock:
the broker-wide and per-listener ``max.connection.creation.rate`` (the acceptor's wait) and the
``ip`` entities' ``connection_creation_rate`` (a refused, un-recorded connection), with Kafka's
throttle times (``(rate - limit) / limit x window``, at most one window)."""

from __future__ import annotations

import logging

from snakka.config import BrokerConfig
from snakka.metadata.client_quotas import ClientQuotaConfigs
from snakka.server.quotas import ConnectionQuotas

# Two 1 s samples: the rate is measured over at least one whole second, so the burst a new
# client gets is one second's worth (Kafka's default, 11 samples, gives ten).
WINDOWS = {"quota.window.num": "2", "quota.window.size.seconds": "1"}


class Clock:
    def __init__(self) -> None:
        self.s = 100.0

    def __call__(self) -> float:
        return self.s


def quotas(**overrides: str) -> tuple[ConnectionQuotas, Clock]:
    clock = Clock()
    q = ConnectionQuotas(BrokerConfig({**WINDOWS, **overrides}), clock=clock)
    return q, clock


def ip_quota(configs: ClientQuotaConfigs, ip: str | None, rate: float) -> None:
    configs.apply({"type": "client_quota", "entity": [["ip", ip]],
                   "key": "connection_creation_rate", "value": rate, "remove": False})


def test_no_limits_nothing_is_paced_or_throttled():
    q, _ = quotas()
    assert not q.rate_limited("PLAINTEXT")
    assert all(q.record_accept("PLAINTEXT") == 0 for _ in range(1000))
    assert all(q.ip_throttle_ms("PLAINTEXT", "10.0.0.1") == 0 for _ in range(1000))
    q.client_quotas = ClientQuotaConfigs()  # configs without any ip quota: still nothing
    assert q.ip_throttle_ms("PLAINTEXT", "10.0.0.1") == 0


def test_broker_rate_delays_accepts_with_kafkas_throttle_time():
    q, clock = quotas(**{"max.connection.creation.rate": "5"})
    assert q.rate_limited("PLAINTEXT")
    # One second's worth is accepted at once.
    assert [q.record_accept("PLAINTEXT") for _ in range(5)] == [0] * 5
    # The 6th: 6 per 1 s against 5 -> (6 - 5) / 5 x 1000 ms.
    assert q.record_accept("PLAINTEXT") == 200
    # The acceptor waits each throttle time before accepting the next connection: over a
    # long run the acceptance rate holds at the limit (the initial burst included).
    start = clock.s
    accepted = 6
    while clock.s - start < 60:
        delay = q.record_accept("PLAINTEXT")
        clock.s += max(delay, 1) / 1000  # a connection is waiting in the backlog at once
        accepted += 1
    assert 5 * 0.9 <= accepted / (clock.s - start) <= 5 * 1.1
    assert q.accepts_delayed > 250


def test_throttle_time_is_at_most_one_window():
    q, _ = quotas(**{"max.connection.creation.rate": "1"})
    delays = [q.record_accept("PLAINTEXT") for _ in range(20)]
    assert delays[0] == 0 and max(delays) == 1000 and delays[-1] == 1000
    q0, _ = quotas(**{"max.connection.creation.rate": "0"})
    assert q0.record_accept("PLAINTEXT") == 1000  # 0: every accept waits a window, as Kafka


def test_listener_rate_overrides_the_broker_default_for_that_listener_only():
    q, _ = quotas(**{
        "listeners": "PLAINTEXT://localhost:0,SLOW://localhost:0",
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,SLOW:PLAINTEXT",
        "listener.name.slow.max.connection.creation.rate": "2"})
    assert q.rate_limited("SLOW") and not q.rate_limited("PLAINTEXT")
    assert [q.record_accept("SLOW") for _ in range(3)] == [0, 0, 500]
    assert all(q.record_accept("PLAINTEXT") == 0 for _ in range(50))


def test_ip_quota_refuses_the_excess_unrecords_it_and_recovers(caplog):
    q, clock = quotas(**{"max.connection.creation.rate": "100"})
    configs = q.client_quotas = ClientQuotaConfigs()
    ip_quota(configs, "10.0.0.1", 5)
    for _ in range(5):
        assert q.record_accept("PLAINTEXT") == 0
        assert q.ip_throttle_ms("PLAINTEXT", "10.0.0.1") == 0
    with caplog.at_level(logging.WARNING, logger="snakka.server"):
        for _ in range(4):  # each retry is refused again: the refused ones are not counted
            assert q.record_accept("PLAINTEXT") == 0
            assert q.ip_throttle_ms("PLAINTEXT", "10.0.0.1") == 200
    assert q.connections_throttled == 4
    assert "rejected connection from 10.0.0.1: connection creation rate above its quota " \
           "connection_creation_rate=5" in caplog.text
    assert len(caplog.records) == 1  # one line, then rate-limited summaries
    # Refused connections were taken back from the broker's rate too: 5 admitted.
    assert q._broker_rate is not None and q._broker_rate.measure(int(clock.s * 1000)) == 5.0
    # Another address is not limited (no default entity), the same one recovers once its
    # samples expire.
    assert all(q.ip_throttle_ms("PLAINTEXT", "10.0.0.2") == 0 for _ in range(50))
    clock.s += 2.0
    assert q.ip_throttle_ms("PLAINTEXT", "10.0.0.1") == 0


def test_default_ip_entity_and_specific_override():
    q, _ = quotas()
    configs = q.client_quotas = ClientQuotaConfigs()
    ip_quota(configs, None, 2)
    ip_quota(configs, "10.0.0.9", 1000)
    assert [q.ip_throttle_ms("PLAINTEXT", "10.0.0.1") for _ in range(3)] == [0, 0, 500]
    assert [q.ip_throttle_ms("PLAINTEXT", "10.0.0.2") for _ in range(3)] == [0, 0, 500]
    assert all(q.ip_throttle_ms("PLAINTEXT", "10.0.0.9") == 0 for _ in range(100))
