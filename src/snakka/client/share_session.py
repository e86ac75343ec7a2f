"""The client side of one share session (KIP-932) with one broker: epochs and the partition set
(sans-I/O; Kafka's ShareSessionHandler plays this role in the Java consumer).

A share consumer holds one share session per broker it fetches from, keyed on the broker by
(group id, member id). The epoch rules:

* epoch 0 opens a (new) session; the request lists every partition to fetch and may not carry
  acknowledgements (the broker answers INVALID_REQUEST);
* each successful ShareFetch/ShareAcknowledge moves the epoch to the next value (wrapping from
  2^31-1 to 1); a request lists only partitions added to the session (or carrying
  acknowledgements) in ``Topics`` and the removed ones in ``ForgottenTopicsData``;
* epoch -1 closes the session (ShareAcknowledge with the final acknowledgements);
* SHARE_SESSION_NOT_FOUND / INVALID_SHARE_SESSION_EPOCH (and any other top-level error, or a
  lost connection) reset the session: the next request opens a new one at epoch 0.

Requests on one session must be strictly sequential (the shell holds a per-node lock), since the
broker checks each request's epoch against the one it expects next.
"""

from __future__ import annotations

from dataclasses import dataclass

from snakka.client.share_acks import TopicIdPartition
from snakka.limits import INT32_MAX
from snakka.protocol.errors import ErrorCode
from snakka.protocol.messages.share_acknowledge_request import (
    AcknowledgementBatch as AckBatchAck,
)
from snakka.protocol.messages.share_acknowledge_request import (
    AcknowledgePartition,
    AcknowledgeTopic,
    ShareAcknowledgeRequest,
)
from snakka.protocol.messages.share_fetch_request import (
    AcknowledgementBatch,
    FetchPartition,
    FetchTopic,
    ForgottenTopic,
    ShareFetchRequest,
)
from snakka.protocol.share import AckBatch

INITIAL_EPOCH = 0
FINAL_EPOCH = -1


def next_epoch(epoch: int) -> int:
    """The epoch after ``epoch`` (Kafka's ShareRequestMetadata.nextEpoch)."""
    if epoch < 0:
        return FINAL_EPOCH
    if epoch == INT32_MAX:
        return 1
    return epoch + 1


@dataclass(frozen=True, slots=True)
class FetchParams:
    """ShareFetch limits from the consumer config."""

    max_wait_ms: int = 500          # fetch.max.wait.ms
    min_bytes: int = 1              # fetch.min.bytes
    max_bytes: int = 52_428_800     # fetch.max.bytes
    partition_max_bytes: int = 1_048_576  # max.partition.fetch.bytes (ShareFetch v0 only)
    max_records: int = 500          # max.poll.records
    batch_size: int = 500           # max.poll.records (Kafka's consumer sends the same)
    acquire_mode: int = 0           # share.acquire.mode: 0 batch_optimized, 1 record_limit


def _group_by_topic(tips) -> dict:
    out: dict = {}
    for tid, part in sorted(tips, key=lambda t: (t[0].int, t[1])):
        out.setdefault(tid, []).append(part)
    return out


class ShareSession:
    """Epoch and partition bookkeeping of the share session with one broker."""

    def __init__(self, node_id: int) -> None:
        self.node_id = node_id
        self.epoch = INITIAL_EPOCH
        # Partitions the broker's session holds (as of the last successful response).
        self.partitions: set[TopicIdPartition] = set()
        self._sent_partitions: set[TopicIdPartition] | None = None

    @property
    def established(self) -> bool:
        return self.epoch > 0

    def reset(self) -> None:
        """Forget the session; the next ShareFetch opens a new one at epoch 0."""
        self.epoch = INITIAL_EPOCH
        self.partitions = set()
        self._sent_partitions = None

    # -- ShareFetch ----------------------------------------------------------------------------
    def fetch_request(self, group_id: str, member_id: str, wanted: set[TopicIdPartition],
                      acks: dict[TopicIdPartition, list[AckBatch]], params: FetchParams,
                      version: int) -> ShareFetchRequest:
        """The next ShareFetch: fetch ``wanted`` and piggy-back ``acks`` (partitions in
        ``wanted``). With an epoch-0 (opening) request ``acks`` must be empty."""
        if acks and not self.established:
            raise ValueError("acknowledgements cannot ride on a session-opening ShareFetch")
        unknown = set(acks) - wanted
        if unknown:
            raise ValueError(f"acknowledgements for partitions not fetched: {unknown}")
        if self.established:
            listed = (wanted - self.partitions) | set(acks)
            forgotten = self.partitions - wanted
        else:
            listed, forgotten = set(wanted), set()
        self._sent_partitions = set(wanted)
        pmb = params.partition_max_bytes if version == 0 else 0
        topics = [FetchTopic(topic_id=tid, partitions=[
            FetchPartition(partition_index=p, partition_max_bytes=pmb,
                           acknowledgement_batches=_fetch_batches(acks.get((tid, p), ())))
            for p in parts]) for tid, parts in _group_by_topic(listed).items()]
        return ShareFetchRequest(
            group_id=group_id, member_id=member_id, share_session_epoch=self.epoch,
            max_wait_ms=params.max_wait_ms, min_bytes=params.min_bytes,
            max_bytes=params.max_bytes, max_records=params.max_records,
            batch_size=params.batch_size, share_acquire_mode=params.acquire_mode,
            is_renew_ack=False, topics=topics,
            forgotten_topics_data=[ForgottenTopic(topic_id=tid, partitions=parts)
                                   for tid, parts in _group_by_topic(forgotten).items()])

    def fetch_done(self, error_code: int) -> None:
        """The broker answered the last ShareFetch with top-level ``error_code``."""
        if error_code == ErrorCode.NONE:
            if self._sent_partitions is not None:
                self.partitions = self._sent_partitions
            self.epoch = next_epoch(self.epoch)
        else:
            self.reset()
        self._sent_partitions = None

    # -- ShareAcknowledge ----------------------------------------------------------------------
    def acknowledge_request(self, group_id: str, member_id: str,
                            acks: dict[TopicIdPartition, list[AckBatch]], *,
                            final: bool = False) -> ShareAcknowledgeRequest:
        """A ShareAcknowledge on the established session (``final`` closes it: epoch -1)."""
        if not self.established:
            raise ValueError("ShareAcknowledge needs an established share session")
        renew = any(4 in b.types for bs in acks.values() for b in bs)
        topics = [AcknowledgeTopic(topic_id=tid, partitions=[
            AcknowledgePartition(partition_index=p, acknowledgement_batches=[
                AckBatchAck(first_offset=b.first_offset, last_offset=b.last_offset,
                            acknowledge_types=list(b.types)) for b in acks[(tid, p)]])
            for p in parts]) for tid, parts in _group_by_topic(acks).items()]
        return ShareAcknowledgeRequest(
            group_id=group_id, member_id=member_id,
            share_session_epoch=FINAL_EPOCH if final else self.epoch, is_renew_ack=renew,
            topics=topics)

    def acknowledge_done(self, error_code: int, *, final: bool = False) -> None:
        if final:
            self.reset()
        elif error_code == ErrorCode.NONE:
            self.epoch = next_epoch(self.epoch)
        else:
            self.reset()


def _fetch_batches(batches) -> list[AcknowledgementBatch]:
    return [AcknowledgementBatch(first_offset=b.first_offset, last_offset=b.last_offset,
                                 acknowledge_types=list(b.types)) for b in batches]
