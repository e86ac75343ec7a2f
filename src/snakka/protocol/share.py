"""Share groups (KIP-932): the wire-level values both sides of ShareFetch / ShareAcknowledge use.

The broker's share-partition core (``snakka.share``) and the share consumer (``snakka.client``)
speak the same acknowledgement vocabulary; its one home is here, in the protocol package, so the
client never imports broker-side modules. The ids are the wire values of the request fields
(``AcknowledgeTypes``, ``ShareAcquireMode``); the broker's persisted, non-wire share-partition
state stays in ``snakka.share.types``.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import IntEnum

__all__ = ["AckBatch", "AcknowledgeType", "AcquireMode"]


class AcknowledgeType(IntEnum):
    """Wire values of ``AcknowledgeTypes`` in ShareFetch/ShareAcknowledge."""

    GAP = 0      # the offset holds no record (e.g. a control record); treated as archived
    ACCEPT = 1   # processed: Acknowledged
    RELEASE = 2  # give it back: Available again (delivery count kept), Archived at the limit
    REJECT = 3   # unprocessable: Archived, never delivered again
    RENEW = 4    # KIP-1222 (v2, IsRenewAck): extend the acquisition lock, state unchanged


class AcquireMode(IntEnum):
    """ShareFetch v2 ``ShareAcquireMode``."""

    BATCH_OPTIMIZED = 0  # whole log batches may be acquired; MaxRecords is a soft limit
    RECORD_LIMIT = 1     # never acquire more than MaxRecords records


@dataclass(frozen=True, slots=True)
class AckBatch:
    """One ``AcknowledgementBatch``: ``types`` has one entry for every offset of
    ``first_offset..last_offset``, or a single entry that applies to all of them."""

    first_offset: int
    last_offset: int
    types: tuple[int, ...]
