"""What GetTelemetrySubscriptions and PushTelemetry share: the client attributes a
subscription is matched on, and keeping the manager's subscriptions in step with the
CLIENT_METRICS config resources of the metadata."""

from __future__ import annotations

import uuid

from snakka.handlers.context import RequestContext
from snakka.protocol.primitives import uuid_to_base64
from snakka.telemetry.manager import ClientMetricsManager
from snakka.telemetry.subscriptions import CLIENT_METRICS_RESOURCE, ClientAttributes


def synced_manager(ctx: RequestContext) -> ClientMetricsManager | None:
    """The manager with the current subscriptions (None: the broker has no receiver)."""
    manager = ctx.services.client_metrics
    if manager is None:
        return None
    md = ctx.services.metadata
    manager.sync(md.version, lambda: {name: cfg for (rtype, name), cfg in md.dynamic_configs.items()
                                      if rtype == CLIENT_METRICS_RESOURCE})
    return manager


def client_attributes(ctx: RequestContext, instance_id: uuid.UUID | None) -> ClientAttributes:
    """Kafka's ClientMetricsInstanceMetadata: the instance id (Kafka's base64 text), client id,
    the software ApiVersions named, the source address and port."""
    software = ctx.connection.client_software
    peer = ctx.connection.peer
    port = peer.rsplit(":", 1)[1] if ":" in peer else None
    return ClientAttributes(
        client_instance_id=uuid_to_base64(instance_id) if instance_id is not None else "",
        client_id=ctx.client_id,
        client_software_name=software[0] if software else None,
        client_software_version=software[1] if software else None,
        client_source_address=ctx.client_address or None,
        client_source_port=port if port and port.isdigit() else None)
