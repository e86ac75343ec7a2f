"""Tiered storage's remote fetch quota: ``remote.log.manager.fetch.max.bytes.per.second``
(KIP-956; Kafka's RLMQuotaManager of type RLM_FETCH). Sans-I/O, with an injected clock.

What it owns: the byte rate read from remote storage for consumer fetches, measured as Kafka
measures it (a SimpleRate over ``remote.log.manager.fetch.quota.window.num`` samples of
``remote.log.manager.fetch.quota.window.size.seconds``), and the throttle time when that rate
is above the quota. Kafka checks the quota before each remote read of a fetch: while it is
exceeded, the partitions whose fetch offset lies in remote storage are answered with no
records and no error (the fetch goes on for its other partitions, and may wait as any fetch
does), and every remote read that happens records its bytes. snakka's reader
(:mod:`snakka.remote.reader`) records the segment bytes its tasks fetch from the object store
(read-ahead included, which Kafka does not have) and skips read-ahead while the quota is
exceeded; reads served from its chunk cache cost no remote bandwidth and are not throttled.
"""

from __future__ import annotations

from collections.abc import Callable

from snakka.limits import INT64_MAX
from snakka.metadata.client_quotas import SampledRate


class RemoteFetchQuota:
    def __init__(self, bytes_per_second: int, *, num_samples: int, window_seconds: int,
                 clock_ms: Callable[[], int]) -> None:
        self.quota = float(bytes_per_second)
        self._clock_ms = clock_ms
        self._rate = SampledRate(num_samples, window_seconds * 1000, clock_ms(), simple=True)
        self.throttled = 0  # reads answered without records because of the quota

    @property
    def unlimited(self) -> bool:
        return self.quota >= INT64_MAX

    def set_quota(self, bytes_per_second: int) -> None:
        """A dynamic change (Kafka's RemoteLogManager.updateFetchQuota): the bytes measured
        so far are judged against the new quota."""
        self.quota = float(bytes_per_second)

    def record(self, nbytes: int) -> None:
        """Bytes read from remote storage (recorded whatever the quota, as Kafka's sensor
        does, so a quota set later judges the recent past)."""
        if nbytes > 0:
            self._rate.record(float(nbytes), self._clock_ms())

    def throttle_ms(self) -> int:
        """0 while the measured rate is within the quota, else Kafka's
        QuotaUtils.throttleTime: (rate - quota) / quota x the rate's window."""
        if self.unlimited:
            return 0
        now = self._clock_ms()
        measured = self._rate.measure(now)
        if measured <= self.quota:
            return 0
        if self.quota <= 0:
            return self._rate.window_size_ms(now)
        return max(1, round((measured - self.quota) / self.quota
                            * self._rate.window_size_ms(now)))
