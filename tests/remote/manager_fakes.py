"""In-memory stand-ins for the RemoteLogManager's collaborators (metadata manager, storage
manager, reader pool), so its copy/retention/deletion logic is tested alone and fast."""

from __future__ import annotations

import threading

from snakka.remote.types import (
    VALID_SEGMENT_TRANSITIONS,
    IndexType,
    LogSegmentData,
    RemoteLogSegmentMetadata,
    RemoteLogSegmentMetadataUpdate,
    RemoteLogSegmentState,
    RemotePartitionDeleteMetadata,
    TopicIdPartition,
)


class FakeRLMM:
    def __init__(self) -> None:
        self.segments: dict[object, RemoteLogSegmentMetadata] = {}
        self.events: list[tuple[str, object]] = []
        self.partition_events: list[RemotePartitionDeleteMetadata] = []
        self.closed = False

    def is_ready(self, tp: TopicIdPartition) -> bool:
        return True

    async def add_remote_log_segment_metadata(self, md: RemoteLogSegmentMetadata) -> None:
        assert md.state == RemoteLogSegmentState.COPY_SEGMENT_STARTED
        self.segments[md.segment_id] = md
        self.events.append((md.state.name, md.segment_id))

    async def update_remote_log_segment_metadata(self, u: RemoteLogSegmentMetadataUpdate) -> None:
        md = self.segments[u.segment_id]
        if u.state not in VALID_SEGMENT_TRANSITIONS[md.state]:
            raise ValueError(f"{md.state.name} -> {u.state.name}")
        self.events.append((u.state.name, u.segment_id))
        if u.state == RemoteLogSegmentState.DELETE_SEGMENT_FINISHED:
            del self.segments[u.segment_id]
        else:
            self.segments[u.segment_id] = md.create_with_update(u)

    async def put_remote_partition_delete_metadata(self, md: RemotePartitionDeleteMetadata) -> None:
        self.partition_events.append(md)

    def list_remote_log_segments(self, tp: TopicIdPartition) -> list[RemoteLogSegmentMetadata]:
        return sorted((m for m in self.segments.values() if m.topic_id_partition == tp),
                      key=lambda m: (m.start_offset, m.event_timestamp_ms))

    def highest_offset_for_epoch(self, tp: TopicIdPartition, leader_epoch: int) -> int | None:
        ends = [m.end_offset for m in self.list_remote_log_segments(tp)
                if m.state == RemoteLogSegmentState.COPY_SEGMENT_FINISHED]
        return max(ends) if ends else None

    def remote_log_size(self, tp: TopicIdPartition) -> int:
        return sum(m.segment_size_in_bytes for m in self.list_remote_log_segments(tp)
                   if m.state == RemoteLogSegmentState.COPY_SEGMENT_FINISHED)

    def close(self) -> None:
        self.closed = True


class FakeRSM:
    """Objects in a dict; ``fail`` makes every call raise (the store is down); ``gate``
    blocks copies until set (an upload in progress)."""

    chunk_size = 1 << 20

    def __init__(self) -> None:
        self.objects: dict[tuple[object, str], bytes] = {}
        self.fail = False
        self.gate = threading.Event()
        self.gate.set()
        self.copies = 0

    def _check(self) -> None:
        if self.fail:
            raise ConnectionRefusedError("object store down")

    def copy_log_segment_data(self, md: RemoteLogSegmentMetadata, data: LogSegmentData) -> bytes:
        assert self.gate.wait(30)
        self._check()
        files = {"log": data.log_segment, "index": data.offset_index,
                 "timeindex": data.time_index, "snapshot": data.producer_snapshot_index}
        if data.transaction_index:
            files["txnindex"] = data.transaction_index
        for suffix, path in files.items():
            with open(path, "rb") as f:
                self.objects[(md.segment_id, suffix)] = f.read()
        self.objects[(md.segment_id, "leader_epoch_checkpoint")] = data.leader_epoch_index
        self.copies += 1
        return b"\x00\x01"

    def fetch_log_segment(self, md: RemoteLogSegmentMetadata, start: int, end: int) -> bytes:
        self._check()
        return self.objects[(md.segment_id, "log")][start:end]

    def fetch_index(self, md: RemoteLogSegmentMetadata, index_type: IndexType) -> bytes:
        self._check()
        return self.objects[(md.segment_id, index_type.name.lower())]

    def delete_log_segment_data(self, md: RemoteLogSegmentMetadata) -> None:
        self._check()
        for key in [k for k in self.objects if k[0] == md.segment_id]:
            del self.objects[key]

    def segment_ids(self) -> set[object]:
        return {k[0] for k in self.objects}

    def close(self) -> None:
        pass


class FakeReader:
    def __init__(self, log) -> None:  # noqa: ANN001
        self.log = log

    def read(self, fetch_offset, max_bytes, *, max_offset, min_one_message):  # noqa: ANN001
        raise AssertionError("the manager's tests do not read remote data")

    def offset_for_timestamp(self, timestamp, start_offset):  # noqa: ANN001
        return None

    def collect_aborted_transactions(self, start_offset, upper_bound_offset):  # noqa: ANN001
        return [], False

    def highest_offset(self) -> int:
        return self.log.highest_offset_in_remote_storage


class FakeReaders:
    def __init__(self) -> None:
        self.forgotten: list[object] = []

    def reader_for(self, log, tp):  # noqa: ANN001
        return FakeReader(log)

    def forget_segment(self, segment_id) -> None:  # noqa: ANN001
        self.forgotten.append(segment_id)

    def close(self) -> None:
        pass
