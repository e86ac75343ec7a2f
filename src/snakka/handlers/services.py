"""The services a request handler may use: one typed bundle, built once by the broker.

Handlers see the broker only through this bundle (and their request context): the controller
for metadata changes, the replica manager for records, the coordinators for groups and share
groups, the fetch-session cache. Nothing here reaches back to the Broker object, which is wiring
only. Adding a feature (transactions, ACLs, quotas) adds a field here rather than a back-pointer.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from snakka.config import BrokerConfig, Listener
    from snakka.controller import Controller
    from snakka.fetch_sessions import FetchSessionCache
    from snakka.groups.coordinator import GroupCoordinator
    from snakka.metadata.client_quotas import QuotaManagers
    from snakka.metadata.configs import ConfigResolver
    from snakka.metadata.core import ClusterMetadata
    from snakka.remote.manager import RemoteLogManager
    from snakka.replica.manager import ReplicaManager
    from snakka.security.sasl.config import SaslServerFactory
    from snakka.security.ssl_reload import SslReconfiguration
    from snakka.share.manager import SharePartitionManager
    from snakka.telemetry.manager import ClientMetricsManager
    from snakka.telemetry.store import ClientMetricsStore
    from snakka.txn.manager import TransactionManager


class Endpoints(Protocol):
    """Where clients reach this broker (the listeners know their bound ports)."""

    def advertised_endpoint(self, listener: Listener) -> tuple[str, int]: ...


@dataclasses.dataclass(frozen=True, slots=True)
class Services:
    config: BrokerConfig
    node_id: int
    time_ms: Callable[[], int]
    controller: Controller
    replicas: ReplicaManager
    groups: GroupCoordinator
    shares: SharePartitionManager
    txns: TransactionManager
    remote: RemoteLogManager | None  # tiered storage (remote.log.storage.system.enable)
    fetch_sessions: FetchSessionCache
    endpoints: Endpoints
    # The SASL listeners' mechanisms (None: no SASL listener).
    sasl: SaslServerFactory | None = None
    # The SSL listeners' contexts, changed by dynamic per-listener SSL configs (None: the
    # broker has no SSL listener wiring, e.g. a unit test's bundle).
    ssl_reconfiguration: SslReconfiguration | None = None
    # Client quotas (metadata/client_quotas.py; None: a unit test's bundle without them).
    quotas: QuotaManagers | None = None
    # KIP-714 client metrics (telemetry/): the subscriptions and client instances, and the
    # received metrics the Prometheus endpoint shows (None: no receiver, the APIs are not
    # served).
    client_metrics: ClientMetricsManager | None = None
    client_metrics_store: ClientMetricsStore | None = None

    @property
    def metadata(self) -> ClusterMetadata:
        """The cluster metadata (read it; change it only through the controller)."""
        return self.controller.metadata

    @property
    def resolver(self) -> ConfigResolver:
        return self.controller.resolver

    def advertised_endpoint(self, listener: Listener) -> tuple[str, int]:
        return self.endpoints.advertised_endpoint(listener)
