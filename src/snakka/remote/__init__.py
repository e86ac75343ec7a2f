"""Tiered storage (KIP-405): closed segments in object storage, their metadata in an internal topic.

Kafka's contracts, in our own code:

- :mod:`snakka.remote.types`: the values every part shares: a remote segment's id and
  metadata (``RemoteLogSegmentMetadata``) and its states, the partition-delete states, what
  is handed to the storage manager for one segment (``LogSegmentData``), the index types.
- :mod:`snakka.remote.storage`: the RemoteStorageManager contract and its backends (a local
  directory; S3-compatible object storage): objects per segment, checksums, retries.
- :mod:`snakka.remote.metadata`: the sans-I/O RemoteLogMetadataCache (legal state changes,
  segments per partition, highest remote offset) and the binary, versioned records of
  ``__remote_log_metadata`` (Kafka's schemas).
- :mod:`snakka.remote.metadata_manager`: the topic-backed RemoteLogMetadataManager: events
  appended to ``__remote_log_metadata`` (pinned to one metadata partition per user
  partition), replayed at start-up; a user partition is ready once its metadata partition is.
- :mod:`snakka.remote.manager`: the RemoteLogManager: the copier (closed segments, in
  order, below the last stable offset), remote retention and deletion, and the reader that
  serves fetches below the local log start offset, off the event loop, through a bounded
  chunk cache with read-ahead.
"""
