"""The client-quota core (metadata/client_quotas.py), sans-I/O with a fake clock: Kafka's
precedence of quota entities, the sampled rate and the throttle time."""

from __future__ import annotations

import pytest

from snakka.metadata.client_quotas import (
    ClientQuotaConfigs,
    ClientQuotaManager,
    ControllerMutationQuotaManager,
    QuotaAlteration,
    QuotaManagers,
)
from snakka.protocol.api_keys import ApiKey

KEY = "producer_byte_rate"


def _configs(*entities: tuple[tuple[tuple[str, str | None], ...], float]) -> ClientQuotaConfigs:
    c = ClientQuotaConfigs()
    results, records = c.alter([QuotaAlteration(list(e), [(KEY, v, False)])
                                for e, v in entities])
    assert all(r.error_code == 0 for r in results), results
    for r in records:
        c.apply(r)
    return c


U, C = "user", "client-id"
LEVELS = [
    (((U, "alice"), (C, "app")), 1.0, ("alice", "app")),
    (((U, "alice"), (C, None)), 2.0, ("alice", "app")),
    (((U, "alice"),), 3.0, ("alice", "")),
    (((U, None), (C, "app")), 4.0, ("alice", "app")),
    (((U, None), (C, None)), 5.0, ("alice", "app")),
    (((U, None),), 6.0, ("alice", "")),
    (((C, "app"),), 7.0, ("", "app")),
    (((C, None),), 8.0, ("", "app")),
]


@pytest.mark.parametrize("level", range(len(LEVELS)))
def test_precedence_most_specific_first(level):
    """Every level from ``level`` down is configured: the first one wins, with its entity."""
    configs = _configs(*[(e, v) for e, v, _ in LEVELS[level:]])
    _entity, value, tags = LEVELS[level]
    assert configs.resolve(KEY, "alice", "app") == (value, tags)


def test_no_quota_and_other_clients():
    configs = _configs((((C, "app"),), 7.0))
    assert configs.resolve(KEY, "bob", "other") == (None, ("", "other"))
    assert configs.resolve(KEY, "bob", "app") == (7.0, ("", "app"))
    assert configs.resolve("consumer_byte_rate", "bob", "app")[0] is None


def test_default_user_applies_to_anonymous():
    configs = _configs((((U, None),), 6.0))
    assert configs.resolve(KEY, "ANONYMOUS", "x") == (6.0, ("ANONYMOUS", ""))


def test_remove_forgets_the_entity():
    configs = _configs((((C, "app"),), 7.0))
    _r, recs = configs.alter([QuotaAlteration([(C, "app")], [(KEY, 0, True)])])
    for r in recs:
        configs.apply(r)
    assert configs.quotas == {} and not configs.configured(KEY)


def test_throttle_time_is_kafkas():
    """Quota 1000 B/s, 11 samples of 1 s: the rate is measured over at least 10 s, so 20 000
    bytes at once is 2000 B/s, throttled (2000 - 1000) / 1000 * 10 s = 10 s."""
    now = [0]
    configs = _configs((((C, "app"),), 1000.0))
    m = ClientQuotaManager(KEY, configs, num_samples=11, window_seconds=1,
                           clock_ms=lambda: now[0])
    assert m.record("u", "app", 5_000) == 0  # 500 B/s over the 10 s minimum window
    assert m.record("u", "app", 15_000) == 10_000
    assert m.record("u", "other", 10**9) == 0  # no quota for that client
    # time passes: the samples expire after 11 windows, the rate is back to 0
    now[0] = 12_000
    assert m.record("u", "app", 100) == 0


def test_shared_quota_entity_for_user_level():
    now = [0]
    configs = _configs((((U, "alice"),), 1000.0))
    m = ClientQuotaManager(KEY, configs, num_samples=11, window_seconds=1,
                           clock_ms=lambda: now[0])
    assert m.record("alice", "a", 8_000) == 0
    assert m.record("alice", "b", 8_000) > 0  # both clients share alice's rate
    assert m.record("bob", "a", 8_000) == 0


def test_quota_managers_per_api_and_request_percentage():
    now = [0]
    configs = ClientQuotaConfigs()
    qm = QuotaManagers(configs, clock_ms=lambda: now[0])
    assert not qm.enabled
    _r, recs = configs.alter([QuotaAlteration([(C, "app")], [("request_percentage", 1.0,
                                                              False)])])
    for r in recs:
        configs.apply(r)
    assert qm.enabled and qm.request.active and not qm.produce.active
    # 0.5 s of handler time within 10 s is 5 % of a thread: throttled, bounded by one window
    assert qm.throttle_time_ms(int(ApiKey.METADATA), "u", "app", 10, 0, 0.5) == 1000
    assert qm.throttle_time_ms(int(ApiKey.API_VERSIONS), "u", "app", 10, 0, 5.0) == 0


def test_fetch_quota_unrecords_a_throttled_fetch_and_caps_its_size():
    now = [0]
    configs = ClientQuotaConfigs()
    qm = QuotaManagers(configs, num_samples=3, clock_ms=lambda: now[0])
    assert qm.record_fetch("u", "app", 10**9) == 0 and qm.fetch_max_bytes("u", "app") is None
    _r, recs = configs.alter([QuotaAlteration([(C, "app")], [("consumer_byte_rate", 1000.0,
                                                              False)])])
    for r in recs:
        configs.apply(r)
    # A fetch never asks for more than one quota span's worth: 1000 B/s x 2 windows.
    assert qm.fetch_max_bytes("u", "app") == 2000
    assert qm.record_fetch("u", "app", 2000) == 0  # 2000 B over 2 s: at the quota
    # 1000 B more is 3000 B / 2 s: throttled (1500 - 1000) / 1000 x 2000 ms, and not counted
    assert qm.record_fetch("u", "app", 1000) == 1000
    assert qm.fetch.rates[("", "app")].measure(0) == 1000.0
    # Only Fetch records bytes through record_fetch: the per-response path leaves them alone.
    assert qm.throttle_time_ms(int(ApiKey.FETCH), "u", "app", 10, 10**9, 0.0) == 0
    # An ip entity's connection_creation_rate does not make requests pay for quotas.
    ip_only = ClientQuotaConfigs()
    _r, recs = ip_only.alter([QuotaAlteration([("ip", None)], [("connection_creation_rate",
                                                                 5.0, False)])])
    for r in recs:
        ip_only.apply(r)
    assert ip_only.quotas and not QuotaManagers(ip_only, clock_ms=lambda: 0).enabled


def test_fetch_request_time_is_recorded_by_the_fetch_handler():
    """Kafka records a consumer Fetch's handler time against request_percentage before it
    makes the response (and answers a throttled fetch empty), so the per-response path
    leaves Fetch out; a fetch the request quota throttles takes its bytes back too."""
    now = [0]
    configs = ClientQuotaConfigs()
    qm = QuotaManagers(configs, num_samples=3, clock_ms=lambda: now[0])
    assert qm.record_fetch_request("u", "app", 5.0) == 0  # no quota
    _r, recs = configs.alter([QuotaAlteration([(C, "app")], [
        ("request_percentage", 1.0, False), ("consumer_byte_rate", 1000.0, False)])])
    for r in recs:
        configs.apply(r)
    # The per-response path records nothing for a Fetch (10 s of handler time: not throttled).
    assert qm.throttle_time_ms(int(ApiKey.FETCH), "u", "app", 10, 0, 10.0) == 0
    assert ("", "app") not in qm.request.rates
    # 0.1 s within 2 s is 5 % of a thread: throttled, at most one window.
    assert qm.record_fetch_request("u", "app", 0.1) == 1000
    # Its bytes, within the byte quota, are recorded and taken back (unrecord=True).
    assert qm.record_fetch("u", "app", 500, unrecord=True) == 0
    assert qm.fetch.rates[("", "app")].measure(0) == 0.0
    assert qm.record_fetch("u", "app", 500) == 0
    assert qm.fetch.rates[("", "app")].measure(0) == 250.0


def test_controller_mutation_token_bucket():
    now = [0]
    configs = ClientQuotaConfigs()
    _r, recs = configs.alter([QuotaAlteration([(C, "app")], [("controller_mutation_rate", 2.0,
                                                              False)])])
    for r in recs:
        configs.apply(r)
    m = ControllerMutationQuotaManager(configs, num_samples=11, window_seconds=1,
                                       clock_ms=lambda: now[0])
    assert not m.is_exceeded("u", "app")
    assert m.record("u", "app", 22) == 0  # the burst: 2/s x 11 s
    assert m.record("u", "app", 4) == 2000  # 4 tokens of debt at 2/s
    assert m.is_exceeded("u", "app")
    now[0] = 2000
    assert not m.is_exceeded("u", "app")


def test_strict_and_permissive_request_quotas():
    """Kafka's Strict/PermissiveControllerMutationQuota: strict refuses once the bucket is in
    debt (the overdrawing mutation itself passes); permissive records and throttles."""
    now = [0]
    configs = ClientQuotaConfigs()
    _r, recs = configs.alter([QuotaAlteration([(C, "app")], [("controller_mutation_rate", 2.0,
                                                              False)])])
    for r in recs:
        configs.apply(r)
    m = ControllerMutationQuotaManager(configs, num_samples=11, window_seconds=1,
                                       clock_ms=lambda: now[0])
    strict = m.new_quota("u", "app", strict=True)
    assert strict.record(30)  # 22 tokens: overdrawn by 8, but accepted
    assert strict.throttle_time_ms() == 0 and not strict.exceeded
    assert not strict.record(1)  # in debt: refused
    assert strict.exceeded and strict.throttle_time_ms() == 4000
    now[0] = 1000
    assert strict.throttle_time_ms() == 3000  # less the time since the refusal
    permissive = m.new_quota("u", "app", strict=False)
    assert permissive.record(2)  # 2 more tokens of debt (6 left after 1 s of refill)
    assert permissive.throttle_time_ms() == 4000 and not permissive.exceeded
    unlimited = m.new_quota("u", "other", strict=True)
    assert unlimited.record(1000) and unlimited.throttle_time_ms() == 0
