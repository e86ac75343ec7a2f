"""Small helpers shared by handlers (partition lookup and leader epochs are the replica manager's)."""

from __future__ import annotations

# Kafka's "unknown" authorized-operations marker.
AUTHORIZED_OPERATIONS_OMITTED = -2147483648


def named_assignment(metadata, parts) -> list[tuple]:
    """A group member's assignment ``[(topic_id, partitions), ...]`` as
    ``[(topic_id, topic_name, sorted partitions), ...]`` for the describe APIs; topics deleted
    since the assignment was computed are left out."""
    out = []
    for tid, ps in parts:
        ti = metadata.topics_by_id.get(tid)
        if ti is not None:
            out.append((tid, ti.name, sorted(ps)))
    return out
